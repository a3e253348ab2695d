"""Listing a client's schedules over the adapter's partition reads, and cutting event rows into batches
(``Listing`` is mixed into the adapter; it needs only ``list_minute``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from urllib.parse import urlsplit
from uuid import UUID

from tickd.schema import aio, timing
from tickd.schema.model import Client, HttpCallback, InstanceKey, ListCursor, Page, Schedule, Status

# Partition reads in flight at once, and partitions per page (a page may end early on the budget): 512
# cost the API 1.4 s of CPU on 2 busy shared cores (make bench-isolation, the widest listing), 256 half.
# Every answer is decoded on the driver's one I/O thread, so another client's read waits behind those in
# flight: at 32, its reads took up to 130 ms beside the widest listing; at 8, under 75 ms, and the listing
# itself was no slower (its CPU, not the round trips, is what it waits on).
LIST_CONCURRENCY = 8
LIST_READ_BUDGET = 256
# Rows one page reads in all (its partitions' first reads, a fair share each, may go a chunk over): a
# page listing one status among many other rows ends early, with a cursor where its reads stopped.
LIST_ROW_BUDGET = 4000
# Event rows per unlogged batch (one partition each): at most this many, and about this many bytes,
# well under Cassandra's batch_size_fail_threshold (50 KiB by default).
EVENT_CHUNK = 50
EVENT_CHUNK_BYTES = 16 * 1024
ROW_OVERHEAD_BYTES = 256


@dataclasses.dataclass(frozen=True, slots=True)
class ListFilter:
    """Which rows a listing shows: due in [start, end), not superseded, not an event, retry or notification,
    of the status and with the tag asked for, past the cursor."""

    start: datetime
    end: datetime
    status: Status | None
    after: ListCursor | None
    tag: tuple[str, str] | None = None
    target: str | None = None

    def __call__(self, s: Schedule) -> bool:
        due = s.location.due_at
        if s.status is Status.MOVED or not self.start <= due < self.end:
            return False
        options = s.options
        if options is not None and (options.event is not None or options.retry_of is not None or options.notice):
            return False  # the rows of a fire (its events and retries) and notifications on their way
        if self.status is not None and s.status is not self.status:
            return False
        if self.tag is not None and (s.options is None or self.tag not in s.options.tags):
            return False
        if self.target is not None and target_of(s) != self.target.lower():
            return False
        if self.after is None:
            return True
        if self.after.schedule_id is None:
            return due >= self.after.due_at
        return (due, s.schedule_id) > (self.after.due_at, self.after.schedule_id)


def target_of(s: Schedule) -> str:
    """What a schedule calls: its HTTP callback URL's host (lower case), or its Kafka topic."""
    callback = s.callback
    if isinstance(callback, HttpCallback):
        return (urlsplit(callback.url).hostname or "").lower()
    return callback.topic


# Event-row batches of one fire written at once: a fire of 10,000 events written all together queues the
# encoding of every batch ahead of everything else on the node's event loop, other tenants' fires too.
EVENT_WRITES_IN_FLIGHT = 4


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


_NIL = UUID(int=0)


def _key(s: Schedule) -> tuple[datetime, int, UUID]:
    return s.location.due_at, 1, s.schedule_id


def _mark(c: ListCursor) -> tuple[datetime, int, UUID]:
    """Where a cursor stands among rows' ``_key``s: after its row, or before every row due at its time."""
    return (c.due_at, 0, _NIL) if c.schedule_id is None else (c.due_at, 1, c.schedule_id)


@dataclasses.dataclass
class _Rows:
    """The rows a page may still read, and the most one partition's first read may take."""

    left: int
    share: int = 1


class Listing:
    """``list_schedules`` for an adapter that provides ``list_minute`` (mixed in)."""

    async def list_minute(
        self, instance: InstanceKey, minute: datetime, start: ListCursor, max_rows: int
    ) -> tuple[list[Schedule], int, ListCursor | None]:
        raise NotImplementedError

    async def list_schedules(
        self,
        client: Client,
        start: datetime,
        end: datetime,
        status: Status | None,
        after: ListCursor | None,
        limit: int,
        tag: tuple[str, str] | None = None,
        target: str | None = None,
    ) -> Page:
        begin = max(start, after.due_at) if after is not None else start
        keep = ListFilter(start, end, status, after, tag, target)
        step = max(1, LIST_CONCURRENCY // client.poller_span)
        rows = _Rows(LIST_ROW_BUDGET, max(1, LIST_ROW_BUDGET // (step * client.poller_span)))
        minute, reads, found = timing.minute_bucket(begin), 0, list[Schedule]()
        while minute < end:
            chunk = [m for i in range(step) if (m := minute + timedelta(minutes=i)) < end]
            listed, cut = await self._list_chunk(client, chunk, begin, keep, limit, rows)
            found += sorted(listed, key=_key)
            minute, reads = chunk[-1] + timedelta(minutes=1), reads + len(chunk) * client.poller_span
            if cut is not None:  # a partition's reads stopped before its end: list nothing past where
                return _page([s for s in found if _key(s) <= _mark(cut)], limit, cut)
            if len(found) >= limit:
                return _page(found, limit, ListCursor(minute) if minute < end else None)
            if (reads >= LIST_READ_BUDGET or rows.left <= 0) and minute < end:
                return Page(found, ListCursor(minute).encode())
        return Page(found, None)

    async def _list_chunk(
        self, client: Client, minutes: list[datetime], begin: datetime, keep: ListFilter, limit: int, rows: _Rows
    ) -> tuple[list[Schedule], ListCursor | None]:
        """The rows ``keep`` keeps of the chunk's partitions, and the earliest place a partition's reads
        stopped before its end (None: every partition was read to the end of the range)."""
        reads = [
            functools.partial(
                self._list_partition, InstanceKey(client.client_id, p), minute, max(minute, begin), keep, limit, rows
            )
            for minute in minutes
            for p in range(client.poller_span)
        ]
        done = await aio.gather_limited(reads, LIST_CONCURRENCY)
        stops = [stop for _, stop in done if stop is not None]
        return [s for kept, _ in done for s in kept], min(stops, key=_mark, default=None)

    async def _list_partition(
        self, instance: InstanceKey, minute: datetime, from_due: datetime, keep: ListFilter, limit: int, rows: _Rows
    ) -> tuple[list[Schedule], ListCursor | None]:
        """Up to ``limit`` kept rows of one partition, read ``limit`` (or the page's share) at a time, each
        read after the last; and the last row read if the reads stopped before the partition's (or the
        range's) end."""
        kept: list[Schedule] = []
        at = keep.after if keep.after is not None and keep.after.due_at >= from_due else ListCursor(from_due)
        size = min(limit, rows.share)  # a first read always gets its share: every page moves on
        while True:
            rows.left -= size
            listed, read, last = await self.list_minute(instance, minute, at, size)
            rows.left += size - read
            kept += filter(keep, listed)
            at = last or at
            if read < size or at.due_at >= keep.end:
                return kept, None
            if len(kept) >= limit:
                return kept, at
            size = min(limit - len(kept), rows.left)
            if size <= 0:
                return kept, at


def _page(found: list[Schedule], limit: int, more: ListCursor | None) -> Page:
    """The first ``limit`` of ``found`` (sorted) and the cursor after them: after the last item if some
    were left out, else ``more`` (where the listing goes on; None at its end)."""
    if len(found) > limit or (len(found) == limit and more is not None):
        last = found[limit - 1]
        return Page(found[:limit], ListCursor(last.location.due_at, last.schedule_id).encode())
    return Page(found, more.encode() if more is not None else None)
