"""The Kafka ack topic against the real broker and Cassandra: an ack record with the event's token
releases the event's token; records that are not acks (malformed, forged, of unknown clients or events)
are counted by reason and skipped, the consumer stays alive, and their offsets are committed."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.conftest import later, make_client
from tickd.poller.acks import GROUP_ID, AckConsumer
from tickd.poller.metrics import Metrics
from tickd.schema import events
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import Options, ThrottlePolicy, Token

pytestmark = pytest.mark.integration
BOOTSTRAP = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
PARTITIONS = 2


async def _new_topic() -> str:
    topic = f"tickd-acks-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        await admin.close()
    return topic


async def _send(topic: str, values: list[bytes]) -> None:
    """All on one key, so one partition, in this order."""
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, max_request_size=4 << 20)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"acks")
    finally:
        await producer.stop()


async def _committed(topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=GROUP_ID, enable_auto_commit=False)
    await consumer.start()
    try:
        offsets = [await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)]
    finally:
        await consumer.stop()
    return sum(o or 0 for o in offsets)


def _ack(client_id: str, event_id: str, token: str) -> bytes:
    return json.dumps({"client_id": client_id, "event_id": event_id, "ack_token": token}).encode()


def _count(metrics: Metrics, outcome: str) -> float:
    return metrics.registry.get_sample_value("tickd_throttle_acks_total", {"outcome": outcome}) or 0.0


async def test_only_an_authentic_ack_releases_and_bad_records_are_counted_and_skipped(
    store: CassandraStore, client_id: str, new_schedule: object
) -> None:
    topic = await _new_topic()
    now = datetime.now(UTC)
    assert await store.create_client(make_client(client_id))
    secret = await store.ensure_ack_secret(client_id, events.new_ack_secret())
    assert secret is not None
    await store.put_policy(ThrottlePolicy(client_id, "p", 5, 600, now, now))
    schedule = new_schedule(later(3600), poller_id=0, options=Options(throttle="p"))  # type: ignore[operator]
    await store.create_schedule(schedule, now)
    event_id = f"{schedule.fire_id}:0"
    assert await store.take_token(Token(client_id, "p", 2, event_id, "node-x", now), 600)
    token = events.ack_token(secret, event_id)
    unknown_event = f"{uuid.uuid4()}:1700000000000:0"
    bad = {
        "not_json": b"not json",
        "not_utf8": b'{"client_id": "\xff\xfe"}',
        "too_large": _ack("x" * 70_000, event_id, token),
        "invalid_fields": json.dumps({"client_id": 1, "event_id": [event_id], "ack_token": None}).encode(),
        "unknown_client": _ack(f"{client_id}-nobody", event_id, token),
        "unknown_event": _ack(client_id, unknown_event, events.ack_token(secret, unknown_event)),
        "bad_token": _ack(client_id, event_id, events.ack_token("a guess", event_id)),
    }
    await _send(topic, [*bad.values(), _ack(client_id, event_id, ""), _ack(client_id, event_id, token)])

    metrics = Metrics()
    consumer = AckConsumer(store, BOOTSTRAP, topic, metrics=metrics)
    task = asyncio.create_task(consumer.run())
    try:
        async with asyncio.timeout(60):
            while await store.tokens(client_id, "p"):
                assert not task.done()
                await asyncio.sleep(0.2)
            while await _committed(topic) < len(bad) + 2:
                await asyncio.sleep(0.2)
        assert not task.done()  # none of them stopped the consumer
        expected = dict.fromkeys(bad, 1.0) | {"invalid_fields": 2.0}  # and the ack with an empty token
        assert {reason: _count(metrics, reason) for reason in bad} == expected
        assert _count(metrics, "released") == 1
        assert consumer.released == 1 and consumer.skipped == len(bad) + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
