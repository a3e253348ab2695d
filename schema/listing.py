"""Listing a client's schedules over any adapter's partition reads, and cutting event rows into batches:
written once for both store adapters (``Listing`` is mixed in; it needs only ``read_minute``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Sequence
from contextlib import aclosing
from datetime import datetime, timedelta
from typing import cast
from uuid import UUID

from tickd.schema import aio, timing
from tickd.schema.model import Client, InstanceKey, ListCursor, Page, Schedule, Status

# Partition reads in flight at once, and per page (a page may end early on the budget). 1024 reads take
# about 1 s on 2 shared cores (2048 took 1.6-2.3 s, over schemathesis's 2 s response limit).
LIST_CONCURRENCY = 32
LIST_READ_BUDGET = 1024
# Event rows per unlogged batch (one partition each): at most this many, and about this many bytes,
# well under Cassandra's batch_size_fail_threshold (50 KiB by default).
EVENT_CHUNK = 50
EVENT_CHUNK_BYTES = 16 * 1024
ROW_OVERHEAD_BYTES = 256


def list_order(schedule: Schedule) -> tuple[datetime, UUID]:
    return schedule.location.due_at, schedule.schedule_id


@dataclasses.dataclass(frozen=True, slots=True)
class ListFilter:
    """Which rows a listing shows: due in [start, end), not superseded, not an event, past the cursor."""

    start: datetime
    end: datetime
    status: Status | None
    after: ListCursor | None

    def __call__(self, s: Schedule) -> bool:
        due = s.location.due_at
        if s.status is Status.MOVED or not self.start <= due < self.end:
            return False
        if s.options is not None and (s.options.event is not None or s.options.retry_of is not None):
            return False
        if self.status is not None and s.status is not self.status:
            return False
        if self.after is None:
            return True
        if self.after.schedule_id is None:
            return due >= self.after.due_at
        return (due, s.schedule_id) > (self.after.due_at, self.after.schedule_id)


# Event-row batches of one fire written at once: a fire of 10,000 events written all together queues the
# encoding of every batch ahead of everything else on the node's event loop, other tenants' fires too.
EVENT_WRITES_IN_FLIGHT = 4


async def in_turn(writes: Sequence[Awaitable[None]], limit: int = EVENT_WRITES_IN_FLIGHT) -> None:
    """Await ``writes`` (not yet started coroutines) at most ``limit`` at a time, in order."""
    gate = asyncio.Semaphore(limit)

    async def one(write: Awaitable[None]) -> None:
        async with gate:
            await write

    await aio.gather(*(one(w) for w in writes))


def chunks(rows: Sequence[Schedule]) -> list[list[Schedule]]:
    """Rows cut into batches of at most ``EVENT_CHUNK`` rows and about ``EVENT_CHUNK_BYTES``."""
    out: list[list[Schedule]] = [[]]
    size = 0
    for row in rows:
        cost = len(row.payload) + ROW_OVERHEAD_BYTES
        if out[-1] and (len(out[-1]) >= EVENT_CHUNK or size + cost > EVENT_CHUNK_BYTES):
            out.append([])
            size = 0
        out[-1].append(row)
        size += cost
    return [chunk for chunk in out if chunk]


class Listing:
    """``list_schedules`` for an adapter that provides ``read_minute`` (mixed in)."""

    def read_minute(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncIterator[list[Schedule]]:
        raise NotImplementedError

    async def list_schedules(
        self,
        client: Client,
        start: datetime,
        end: datetime,
        status: Status | None,
        after: ListCursor | None,
        limit: int,
    ) -> Page:
        begin = max(start, after.due_at) if after is not None else start
        keep = ListFilter(start, end, status, after)
        step = max(1, LIST_CONCURRENCY // client.poller_span)
        minute, reads, found = timing.minute_bucket(begin), 0, list[Schedule]()
        while minute < end:
            chunk = [m for i in range(step) if (m := minute + timedelta(minutes=i)) < end]
            found += sorted(await self._list_chunk(client, chunk, begin, keep, limit), key=list_order)
            minute, reads = chunk[-1] + timedelta(minutes=1), reads + len(chunk) * client.poller_span
            if len(found) >= limit:
                items = found[:limit]
                more = len(found) > limit or minute < end
                last = items[-1]
                return Page(items, ListCursor(last.location.due_at, last.schedule_id).encode() if more else None)
            if reads >= LIST_READ_BUDGET and minute < end:
                return Page(found, ListCursor(minute).encode())
        return Page(found, None)

    async def _list_chunk(
        self, client: Client, minutes: list[datetime], begin: datetime, keep: ListFilter, limit: int
    ) -> list[Schedule]:
        gate = asyncio.Semaphore(LIST_CONCURRENCY)

        async def one(instance: InstanceKey, minute: datetime) -> list[Schedule]:
            async with gate:
                return await self._list_partition(instance, minute, max(minute, begin), keep, limit)

        reads = [
            one(InstanceKey(client.client_id, poller_id), minute)
            for minute in minutes
            for poller_id in range(client.poller_span)
        ]
        return [s for rows in await aio.gather(*reads) for s in rows]

    async def _list_partition(
        self, instance: InstanceKey, minute: datetime, from_due: datetime, keep: ListFilter, limit: int
    ) -> list[Schedule]:
        kept: list[Schedule] = []
        # read_minute is an async generator: close it when stopping early so its query does not dangle.
        pages = cast(AsyncGenerator[list[Schedule], None], self.read_minute(instance, minute, from_due=from_due))
        async with aclosing(pages):
            async for page in pages:
                kept += filter(keep, page)
                if len(kept) >= limit:
                    break
        return kept[:limit]
