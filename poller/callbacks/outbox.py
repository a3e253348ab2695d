"""The one task that hands Kafka records to the producer, in arrival order.

Why not let every delivery call ``producer.send`` itself: when a partition's batch is full, aiokafka
parks each sender on that batch and wakes *all* of them when it drains; with thousands of concurrent
fires they spin on the accumulator until they time out (measured: 20,000 concurrent ``send_and_wait``
fail with KafkaTimeoutError). A single feeder is the FIFO queue instead: a send that does not wait
costs no extra loop iteration, and a full batch holds back only the feeder. Callers wait for topic
metadata *before* submitting, so an unknown or unavailable topic never blocks the queue for others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from aiokafka.errors import KafkaConnectionError

from tickd.poller.delivery import KafkaRecord

Placed = asyncio.Future[asyncio.Future[Any]]
_Entry = tuple[Any, str, KafkaRecord, Placed]


class Outbox:
    """A FIFO of records for the producer. ``submit`` returns a future set to the record's ack future
    once the producer has accepted it (or to the producer's error)."""

    def __init__(self) -> None:
        self._queue: deque[_Entry] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, producer: Any, topic: str, record: KafkaRecord) -> Placed:
        placed: Placed = asyncio.get_running_loop().create_future()
        self._queue.append((producer, topic, record, placed))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tickd-kafka-outbox")
        return placed

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._queue:
            placed = self._queue.popleft()[3]
            if not placed.done():
                placed.set_exception(KafkaConnectionError("callback dispatcher closed"))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await _place(*self._queue.popleft())


async def _place(producer: Any, topic: str, record: KafkaRecord, placed: Placed) -> None:
    if placed.done():
        return  # its delivery stopped waiting (timeout): a retry will send it
    try:
        ack: asyncio.Future[Any] = await producer.send(
            topic, value=record.value, key=record.key, headers=record.headers
        )
    except Exception as exc:  # handed to the delivery that waits for it; the outbox keeps running
        if not placed.done():
            placed.set_exception(exc)
        return
    if placed.done():
        ack.add_done_callback(observe_ack)  # sent after all (at least once); nobody reads the outcome
    else:
        placed.set_result(ack)


def observe_ack(ack: asyncio.Future[Any]) -> None:
    """Marks a late ack's error as read (a delivery stopped waiting for it), so asyncio does not log it."""
    if not ack.cancelled():
        ack.exception()
