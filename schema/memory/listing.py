"""The listing rules the Cassandra adapter applies on top of its partition reads, and its write chunking,
kept identical here so both adapters list and batch alike (tests/contract checks they do)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from schema.model import ListCursor, Schedule, Status

# Partition reads in flight at once, and per page (a page may end early on the budget).
LIST_CONCURRENCY = 32
LIST_READ_BUDGET = 2048
# Event rows per unlogged batch: at most this many, and about this many bytes.
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
