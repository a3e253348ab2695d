"""The node's one sender of explicit Kafka batches: every instance's fire passes feed it.

A fire pass of one instance holds few records per partition (a node runs many instances, each taking
its own due rows), and aiokafka keeps one undrained batch per topic partition: a batch submitted while
the one before it waits for the broker waits too. Batches built per pass are therefore small, and they
queue up one round trip apart, so a node that batched per pass sent *fewer* records per request than
one calling ``send`` per record. Here the passes only append their records to a node-wide queue per
topic partition; one task takes everything queued, packs it into as few ``create_batch`` builders as
fit, and submits them (``send_batch``). While a submit waits for its partition to drain, later passes
keep appending, so the next batches carry whatever arrived meanwhile: the busier the node, the fuller
its requests, with one future per batch, not per record.

Records of one topic partition leave in the order they were queued (a schedule's fires keep their
order). A pass that stops waiting (its timeout) is abandoned: its records not yet in a batch are
dropped; those already submitted may still be delivered (a retry may then duplicate them, as with any
timed-out attempt; subscribers deduplicate on the fire id).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from aiokafka.errors import KafkaConnectionError, KafkaError, MessageSizeTooLargeError

from tickd.poller.delivery import KafkaRecord

logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("tickd.callbacks")

_UNSETTLED = object()


class Pass:
    """One ``deliver_many`` pass's queued records: each index's outcome (None: acked; else the error)
    once its batch is acked or fails; ``done`` when all are in."""

    __slots__ = ("abandoned", "done", "open", "outcomes")

    def __init__(self, size: int) -> None:
        self.outcomes: list[object] = [_UNSETTLED] * size
        self.open = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.abandoned = False

    def outcome(self, index: int) -> BaseException | None:
        """The record's outcome; a record not settled by now timed out (it may still arrive)."""
        found = self.outcomes[index]
        if found is _UNSETTLED:
            return TimeoutError()
        assert found is None or isinstance(found, BaseException)
        return found

    def settle(self, index: int, outcome: BaseException | None) -> None:
        if self.outcomes[index] is not _UNSETTLED:
            return
        self.outcomes[index] = outcome
        self.open -= 1
        if self.open == 0 and not self.done.done():
            self.done.set_result(None)


# A queued record: its pass, its index in the pass, the record.
_Entry = tuple[Pass, int, KafkaRecord]
# Where records go: the producer (a replaced one keeps its own queue until drained), topic, partition.
_Where = tuple[Any, str, int]


class BatchSender:
    def __init__(self) -> None:
        self._queued: dict[_Where, list[_Entry]] = {}
        self._taken: dict[_Where, list[_Entry]] = {}  # being packed and submitted now
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def queue(self, producer: Any, topic: str, partition: int, owner: Pass, index: int, record: KafkaRecord) -> None:
        """Queue one record of ``owner`` for the partition; its outcome lands in ``owner``."""
        owner.open += 1
        if self._closed:
            owner.settle(index, KafkaConnectionError("callback dispatcher closed"))
            return
        self._queued.setdefault((producer, topic, partition), []).append((owner, index, record))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tickd-kafka-batches")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for entries in [*self._taken.values(), *self._queued.values()]:
            # Records not acked by now fail retriably (a submitted batch may still arrive: its retry then
            # duplicates it, with the same fire id).
            _settle_all(entries, KafkaConnectionError("callback dispatcher closed"))
        self._queued, self._taken = {}, {}

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queued:
                self._taken, self._queued = self._queued, {}
                for (producer, topic, partition), entries in self._taken.items():
                    try:
                        await self._send(producer, topic, partition, entries)
                    except Exception as exc:  # not the producer's kind of error: fail these, keep sending
                        logger.exception("kafka_batch_failed", topic=topic, partition=partition)
                        _settle_all(entries, exc)
                self._taken = {}

    async def _send(self, producer: Any, topic: str, partition: int, entries: list[_Entry]) -> None:
        """Pack the partition's queued records into batches, in order, and submit each."""
        batch: Any = None
        members: list[_Entry] = []
        for entry in entries:
            if entry[0].abandoned:
                continue
            record = entry[2]
            if batch is None:
                batch = producer.create_batch()
            if not _append(batch, record):
                if members:
                    await _submit(producer, topic, partition, batch, members)
                batch, members = producer.create_batch(), []
                if not _append(batch, record):
                    entry[0].settle(entry[1], MessageSizeTooLargeError("the record does not fit in a batch"))
                    batch = None
                    continue
            members.append(entry)
        if batch is not None and members:
            await _submit(producer, topic, partition, batch, members)


def _append(batch: Any, record: KafkaRecord) -> bool:
    """Append to a producer batch builder; False when it is full (an empty one takes any record)."""
    return batch.append(key=record.key, value=record.value, timestamp=None, headers=record.headers) is not None


async def _submit(producer: Any, topic: str, partition: int, batch: Any, members: list[_Entry]) -> None:
    """Submit one batch; its members settle when its ack does (or now, if the producer refuses it)."""
    try:
        ack: asyncio.Future[Any] = await producer.send_batch(batch, topic, partition=partition)
    except (KafkaError, OSError) as exc:  # refused (e.g. no drain in time): its records fail with it
        _settle_all(members, exc)
        return
    ack.add_done_callback(lambda done: _settle_all(members, _error_of(done)))


def _error_of(ack: asyncio.Future[Any]) -> BaseException | None:
    """A finished ack's error (None: acked); reading it also keeps asyncio from logging it unread."""
    if ack.cancelled():
        return TimeoutError()
    return ack.exception()


def _settle_all(entries: list[_Entry], outcome: BaseException | None) -> None:
    for owner, index, _ in entries:
        owner.settle(index, outcome)
