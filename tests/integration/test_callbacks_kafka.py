"""KafkaDispatcher against the real broker at TICKD_KAFKA_BOOTSTRAP."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import ConsumerRecord

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings
from tickd.schema.model import KafkaCallback, Location, Schedule

pytestmark = pytest.mark.integration

POLICY = RetryPolicy(max_attempts=5, base_s=0.05, cap_s=0.5, inline_budget_s=30.0)


@pytest.fixture(scope="session")
def kafka_settings() -> KafkaSettings:
    # Generous per-attempt time: the suite shares two cores with Cassandra, Kafka and other tests, and a
    # first attempt that times out under that load would be retried (a legitimate duplicate).
    bootstrap = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    return KafkaSettings(bootstrap=bootstrap, attempt_timeout_s=30.0)


@pytest.fixture
def topic() -> str:
    return f"tickd-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def dispatcher(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaDispatcher]:
    async with KafkaDispatcher(kafka_settings, POLICY) as d:
        yield d


def schedules(topic: str, count: int) -> list[Schedule]:
    base = datetime.now(UTC).replace(microsecond=0)
    return [
        Schedule(
            client_id="acme",
            schedule_id=uuid.uuid4(),
            location=Location(0, base),
            fire_at=base + timedelta(milliseconds=i),
            payload=b'{"n": %d}' % i,
            callback=KafkaCallback(topic=topic),
            created_at=base,
        )
        for i in range(count)
    ]


async def consume(settings: KafkaSettings, topic: str, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` up to its end as it is now (the sends were acknowledged before this is
    called): all of them, not only the first ``count``, so a duplicate past the count is seen too. At least
    ``count`` must be there: fewer within the deadline fails the test."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(60):
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=100)  # joins: partitions are assigned, nothing read yet
            partitions = list(consumer.assignment())
            ends = await consumer.end_offsets(partitions)
            assert sum(ends.values()) >= count, f"{sum(ends.values())} records on {topic}, {count} sent"
            await consumer.seek_to_beginning(*partitions)
            while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
                batches = await consumer.getmany(timeout_ms=1000)
                records.extend(r for batch in batches.values() for r in batch)
    finally:
        await consumer.stop()
    return records


def check_records(records: list[ConsumerRecord[bytes, bytes]], sent: list[Schedule]) -> None:
    by_fire_id = {s.fire_id: s for s in sent}
    fire_ids = Counter(msgspec.json.decode(r.value)["fire_id"] for r in records)
    assert set(fire_ids) == set(by_fire_id) and set(fire_ids.values()) == {1}
    for record in records:
        headers = {name: value.decode() for name, value in record.headers}
        schedule = by_fire_id[headers["X-Tickd-Fire-Id"]]
        assert record.key == str(schedule.schedule_id).encode()
        assert headers["X-Tickd-Schedule-Id"] == str(schedule.schedule_id)
        assert headers["X-Tickd-Attempt"] == "1"


async def test_thousand_concurrent_deliveries_each_arrive_once(
    dispatcher: KafkaDispatcher, kafka_settings: KafkaSettings, topic: str
) -> None:
    sent = schedules(topic, 1000)
    fired_at = datetime.now(UTC)
    results = await asyncio.gather(*(dispatcher.deliver(s, 1, fired_at) for s in sent))
    assert all(r.ok and r.attempts == 1 for r in results)
    check_records(await consume(kafka_settings, topic, len(sent)), sent)


async def test_deliver_many(dispatcher: KafkaDispatcher, kafka_settings: KafkaSettings, topic: str) -> None:
    sent = schedules(topic, 1000)
    fired_at = datetime.now(UTC)
    results = await dispatcher.deliver_many([(s, 1, fired_at) for s in sent])
    assert len(results) == 1000 and all(r.ok for r in results)
    records = await consume(kafka_settings, topic, len(sent))
    check_records(records, sent)
    payload = msgspec.json.decode(records[0].value)["payload"]
    assert set(payload) == {"n"}


async def test_batches_keep_each_schedule_on_one_partition_in_order(
    dispatcher: KafkaDispatcher, kafka_settings: KafkaSettings, topic: str
) -> None:
    """On a topic of three partitions, fires sent by ``deliver_many`` (explicit batches per partition)
    and by ``deliver`` (the producer's partitioner) land each schedule's records on one partition, in
    the order they were sent: a consumer per partition sees a schedule's fires in fire order."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_settings.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        await admin.close()
    first = schedules(topic, 60)
    # Three fires of each schedule: two in batches, one single, each a later fire time.
    second = [dataclasses.replace(s, fire_at=s.fire_at + timedelta(seconds=1)) for s in first]
    third = [dataclasses.replace(s, fire_at=s.fire_at + timedelta(seconds=2)) for s in first]
    fired_at = datetime.now(UTC)
    assert all(r.ok for r in await dispatcher.deliver_many([(s, 1, fired_at) for s in first]))
    assert all(r.ok for r in await dispatcher.deliver_many([(s, 1, fired_at) for s in second]))
    assert all(r.ok for r in await asyncio.gather(*(dispatcher.deliver(s, 1, fired_at) for s in third)))

    records = await consume(kafka_settings, topic, 180)
    assert len(records) == 180
    partitions: dict[bytes, set[int]] = {}
    fires: dict[bytes, list[str]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        partitions.setdefault(record.key, set()).add(record.partition)
        fires.setdefault(record.key, []).append(msgspec.json.decode(record.value)["fire_id"])
    assert all(len(p) == 1 for p in partitions.values())
    assert len({p for ps in partitions.values() for p in ps}) == 3  # the keys spread over every partition
    for s, s2, s3 in zip(first, second, third, strict=True):
        assert fires[str(s.schedule_id).encode()] == [s.fire_id, s2.fire_id, s3.fire_id]


async def test_unreachable_broker_is_retriable_within_budget(topic: str) -> None:
    policy = RetryPolicy(max_attempts=2, base_s=0.05, cap_s=0.2, inline_budget_s=1.0)
    settings = KafkaSettings(
        bootstrap="127.0.0.1:1",
        attempt_timeout_s=1.0,
        restart_cooldown_s=0.0,
        outage_retry_cap_s=0.2,
        outage_budget_s=1.0,
    )
    async with KafkaDispatcher(settings, policy) as dispatcher:
        async with asyncio.timeout(20):
            one = await dispatcher.deliver(schedules(topic, 1)[0], 1, datetime.now(UTC))
            many = await dispatcher.deliver_many([(s, 3, datetime.now(UTC)) for s in schedules(topic, 3)])
    for result in [one, *many]:
        assert (result.ok, result.retriable) == (False, True)
        assert result.retry_after_s is not None
    assert one.attempts > 2  # an outage is not the subscriber's fault: max_attempts does not end it


async def test_oversized_record_fails_at_once(dispatcher: KafkaDispatcher, topic: str) -> None:
    [schedule] = schedules(topic, 1)
    huge = Schedule(**{**_fields(schedule), "payload": b'"' + b"x" * (2 << 20) + b'"'})
    result = await dispatcher.deliver(huge, 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.attempts) == (False, False, 1)


def _fields(schedule: Schedule) -> dict[str, object]:
    return {name: getattr(schedule, name) for name in Schedule.__dataclass_fields__}


def test_settings_fixture_reads_env(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKD_KAFKA_BOOTSTRAP", "kafka-1:9092")
    assert KafkaSettings.from_env().bootstrap == "kafka-1:9092"
    assert kafka_settings.bootstrap


async def test_delivery_after_close_is_retriable(kafka_settings: KafkaSettings, topic: str) -> None:
    dispatcher = KafkaDispatcher(dataclasses.replace(kafka_settings, outage_budget_s=0.0), RetryPolicy())
    await dispatcher.close()
    result = await dispatcher.deliver(schedules(topic, 1)[0], 1, datetime.now(UTC))
    assert (result.ok, result.retriable) == (False, True)
