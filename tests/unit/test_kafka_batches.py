"""KafkaDispatcher.deliver_many sends a pass's records as explicit producer batches: per topic partition
(the partition ``deliver`` would pick), a new batch when one is full, and each record's result is its
batch's. Against a producer that records what it is given, with aiokafka's own batch builder."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka.errors import KafkaConnectionError, NotLeaderForPartitionError, UnknownTopicOrPartitionError
from aiokafka.producer.message_accumulator import BatchBuilder

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings, key_partitioner
from tickd.poller.delivery import FIRE_ID_HEADER
from tickd.schema.model import KafkaCallback, Location, Schedule

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def schedule(topic: str, payload: bytes = b'{"n":1}') -> Schedule:
    due = NOW + timedelta(seconds=1)
    return Schedule("c1", uuid.uuid4(), Location(0, due), due, payload, KafkaCallback(topic), NOW)


class Producer:
    """Records the batches it is given; ``fail`` makes a partition's batches fail with that error,
    ``hang`` leaves their acks pending."""

    def __init__(self, partitions: dict[str, set[int]], batch_size: int = 16 * 1024) -> None:
        self.partitions = partitions
        self.batch_size = batch_size
        self.sent: list[tuple[str, int, list[bytes]]] = []
        self.fail: dict[tuple[str, int], BaseException] = {}
        self.hang: set[tuple[str, int]] = set()
        self.singles = 0
        self.fail_once: set[tuple[str, int]] = set()

    async def partitions_for(self, topic: str) -> set[int]:
        if topic not in self.partitions:
            raise UnknownTopicOrPartitionError()
        return self.partitions[topic]

    def create_batch(self) -> Any:
        return Recording(self.batch_size)

    async def send_batch(self, batch: Recording, topic: str, *, partition: int) -> asyncio.Future[None]:
        batch.close()
        self.sent.append((topic, partition, batch.fire_ids))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if (topic, partition) in self.fail:
            ack.set_exception(self.fail[(topic, partition)])
            if (topic, partition) in self.fail_once:
                del self.fail[(topic, partition)]
        elif (topic, partition) not in self.hang:
            ack.set_result(None)
        return ack

    async def send(self, topic: str, *, value: bytes, key: bytes, headers: Any) -> asyncio.Future[None]:
        self.singles += 1
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ack.set_result(None)
        return ack

    async def stop(self) -> None:
        return None


class Recording(BatchBuilder):
    def __init__(self, batch_size: int) -> None:
        super().__init__(batch_size, 0)
        self.fire_ids: list[bytes] = []

    def append(self, *, timestamp: Any, key: Any, value: Any, headers: Any = ()) -> Any:
        metadata = super().append(timestamp=timestamp, key=key, value=value, headers=headers)
        if metadata is not None:
            self.fire_ids.append(next(v for k, v in headers if k == FIRE_ID_HEADER))
        return metadata


def dispatcher(producer: Producer, budget_s: float = 0.0, **settings: Any) -> KafkaDispatcher:
    kafka = KafkaDispatcher(
        KafkaSettings(bootstrap="127.0.0.1:1", attempt_timeout_s=0.2, outage_budget_s=budget_s, **settings),
        RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.01, inline_budget_s=0.0),
    )
    kafka._producer = producer
    return kafka


async def test_records_go_in_batches_per_partition_as_deliver_would_place_them() -> None:
    producer = Producer({"orders": {0, 1, 2}, "refunds": {0}})
    fires = [schedule("orders") for _ in range(30)] + [schedule("refunds") for _ in range(5)]
    results = await dispatcher(producer).deliver_many([(s, 1, NOW) for s in fires])

    assert all(r.ok and r.attempts == 1 for r in results)
    assert producer.singles == 0
    placed = {fire_id: (topic, partition) for topic, partition, ids in producer.sent for fire_id in ids}
    assert sorted(placed) == sorted(s.fire_id.encode() for s in fires)  # each record once
    for s in fires:
        partitions = sorted(producer.partitions[s.callback.topic])  # type: ignore[union-attr]
        key = str(s.public_id).encode()
        assert placed[s.fire_id.encode()][1] == key_partitioner(key, partitions, partitions)
        assert placed[s.fire_id.encode()][1] == partitions[zlib.crc32(key) % len(partitions)]
    # One batch per partition here: the records fit.
    assert len(producer.sent) == len({(t, p) for t, p, _ in producer.sent})


async def test_a_full_batch_is_followed_by_another_for_the_same_partition() -> None:
    producer = Producer({"orders": {0}}, batch_size=2048)
    fires = [schedule("orders", b'{"pad":"' + b"x" * 300 + b'"}') for _ in range(40)]
    results = await dispatcher(producer).deliver_many([(s, 2, NOW) for s in fires])
    assert all(r.ok and r.attempts == 2 for r in results)
    assert len(producer.sent) > 3
    assert [fire_id for _, _, ids in producer.sent for fire_id in ids] == [s.fire_id.encode() for s in fires]


async def test_a_failed_batch_fails_its_records_only_and_they_are_retried_in_batches_too() -> None:
    producer = Producer({"orders": {0, 1}})
    producer.fail[("orders", 1)] = NotLeaderForPartitionError()
    producer.fail_once.add(("orders", 1))
    fires = [schedule("orders") for _ in range(20)]
    results = await dispatcher(producer, budget_s=5.0).deliver_many([(s, 1, NOW) for s in fires])
    first, *retried = [ids for topic, partition, ids in producer.sent if partition == 1]
    on_one = set(first)
    assert on_one and len(on_one) < len(fires)
    # The failed batch's records were retried one by one (the retry loop), each through the batch sender
    # like every record: sent alone beside explicit batches, each waited a broker round trip.
    assert sorted(i for ids in retried for i in ids) == sorted(on_one)
    assert producer.singles == 0
    assert all(r.ok for r in results)
    assert all(r.attempts == (2 if s.fire_id.encode() in on_one else 1) for s, r in zip(fires, results, strict=True))


async def test_an_unknown_topic_fails_its_records_and_not_the_others() -> None:
    producer = Producer({"orders": {0}})
    fires = [schedule("orders"), schedule("missing"), schedule("orders")]
    kafka = dispatcher(producer)
    kafka._retrier.policy = RetryPolicy(max_attempts=1, base_s=0.01, cap_s=0.01, inline_budget_s=0.0)
    results = await kafka.deliver_many([(s, 1, NOW) for s in fires])
    assert results[0].ok and results[2].ok
    assert not results[1].ok and results[1].retriable and "UnknownTopicOrPartition" in (results[1].error or "")


async def test_a_record_above_the_request_limit_fails_for_good_without_a_batch() -> None:
    producer = Producer({"orders": {0}})
    fires = [schedule("orders", b'"' + b"x" * 3000 + b'"'), schedule("orders")]
    results = await dispatcher(producer, max_request_size=2048).deliver_many([(s, 1, NOW) for s in fires])
    assert not results[0].ok and not results[0].retriable and "max_request_size" in (results[0].error or "")
    assert results[1].ok
    assert [ids for _, _, ids in producer.sent] == [[fires[1].fire_id.encode()]]


async def test_an_ack_that_never_comes_is_a_timeout_that_may_have_been_received() -> None:
    producer = Producer({"orders": {0}})
    producer.hang.add(("orders", 0))
    kafka = dispatcher(producer)
    first = await kafka._first_pass([(schedule("orders"), 1, NOW)])
    assert not first[0].ok and first[0].retriable and first[0].maybe_received and first[0].error == "timeout"


async def test_no_producer_fails_every_record_retriably() -> None:
    kafka = KafkaDispatcher(KafkaSettings(bootstrap="127.0.0.1:1", attempt_timeout_s=0.2), RetryPolicy())
    kafka._closed = True  # no producer can be had
    first = await kafka._first_pass([(schedule("orders"), 1, NOW), (schedule("orders"), 4, NOW)])
    assert [(r.ok, r.retriable, r.attempts) for r in first] == [(False, True, 1), (False, True, 4)]
    assert all(KafkaConnectionError.__name__ in (r.error or "") for r in first)


class Draining(Producer):
    """Like ``Producer``, but a partition's submit waits while its batch before is undrained (as aiokafka's
    accumulator does): here until the test lets the first batch drain."""

    def __init__(self, partitions: dict[str, set[int]]) -> None:
        super().__init__(partitions)
        self.drained = asyncio.Event()
        self.submits = 0

    async def send_batch(self, batch: Recording, topic: str, *, partition: int) -> asyncio.Future[None]:
        self.submits += 1
        if self.submits > 1:
            await self.drained.wait()
        return await super().send_batch(batch, topic, partition=partition)


async def test_passes_of_many_instances_share_the_nodes_batches() -> None:
    """Passes that queue in the same loop turn (instances firing side by side) go out as one batch per
    partition, not one per pass: what keeps requests full when each pass holds a few records."""
    producer = Producer({"orders": {0, 1}})
    kafka = dispatcher(producer)
    passes = [[schedule("orders") for _ in range(3)] for _ in range(8)]
    answers = await asyncio.gather(*(kafka.deliver_many([(s, 1, NOW) for s in fires]) for fires in passes))
    assert all(r.ok for results in answers for r in results)
    assert len(producer.sent) == 2  # 24 records, two partitions
    assert sorted(i for _, _, ids in producer.sent for i in ids) == sorted(
        s.fire_id.encode() for fires in passes for s in fires
    )


async def test_records_queued_while_a_partition_drains_go_in_the_next_batch_in_order() -> None:
    producer = Draining({"orders": {0}})
    kafka = dispatcher(producer)
    kafka.settings = dataclasses.replace(kafka.settings, attempt_timeout_s=5.0)
    first = asyncio.create_task(kafka.deliver_many([(schedule("orders"), 1, NOW)]))
    second_fires = [schedule("orders") for _ in range(2)]
    later_fires = [[schedule("orders") for _ in range(3)] for _ in range(4)]
    await asyncio.sleep(0.01)  # the first batch is out; the second pass's batch waits for it to drain
    second = asyncio.create_task(kafka.deliver_many([(s, 1, NOW) for s in second_fires]))
    await asyncio.sleep(0.01)
    later = [asyncio.create_task(kafka.deliver_many([(s, 1, NOW) for s in fires])) for fires in later_fires]
    await asyncio.sleep(0.01)
    producer.drained.set()
    results = [await first, await second] + [await t for t in later]
    assert all(r.ok for rs in results for r in rs)
    # The four later passes were queued while the second batch waited: they leave as one batch after it.
    assert [len(ids) for _, _, ids in producer.sent] == [1, 2, 12]
    assert producer.sent[2][2] == [s.fire_id.encode() for fires in later_fires for s in fires]


async def test_a_pass_that_stops_waiting_leaves_its_unsent_records_behind() -> None:
    producer = Draining({"orders": {0}})
    kafka = dispatcher(producer)  # attempt timeout 0.2 s
    first = asyncio.create_task(kafka.deliver_many([(schedule("orders"), 1, NOW)]))
    await asyncio.sleep(0.01)
    stuck = [schedule("orders") for _ in range(2)]
    second = await kafka._first_pass([(s, 1, NOW) for s in stuck])  # its batch waits to drain: times out
    assert [(r.ok, r.error, r.maybe_received) for r in second] == [(False, "timeout", True)] * 2
    behind = [schedule("orders") for _ in range(2)]
    third = asyncio.create_task(kafka._first_pass([(s, 1, NOW) for s in behind]))
    await asyncio.sleep(0.3)  # the third pass times out too, before its records were packed
    producer.drained.set()
    await first
    assert not any(r.ok for r in await third)
    await asyncio.sleep(0.01)
    sent = [i for _, _, ids in producer.sent for i in ids]
    # The second pass's batch was submitted before it stopped waiting (it may still arrive); the third's
    # records were never packed into a batch: abandoned, they are not sent (its retry sends them).
    assert {s.fire_id.encode() for s in stuck} <= set(sent)
    assert not {s.fire_id.encode() for s in behind} & set(sent)


async def test_closing_fails_what_is_still_queued() -> None:
    producer = Draining({"orders": {0}})
    kafka = dispatcher(producer)
    kafka.settings = dataclasses.replace(kafka.settings, attempt_timeout_s=5.0)
    first = asyncio.create_task(kafka._first_pass([(schedule("orders"), 1, NOW)]))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(kafka._first_pass([(schedule("orders"), 1, NOW)]))
    third = asyncio.create_task(kafka._first_pass([(schedule("orders"), 1, NOW)]))
    await asyncio.sleep(0.01)
    await kafka._batches.close()
    assert (await first)[0].ok
    for task in (second, third):
        (result,) = await task
        assert not result.ok and result.retriable
