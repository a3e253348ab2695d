"""A client's schedules by tag, over the tag index (``BulkStore.tagged``), with no time window: the listing
``GET /v1/schedules?tag=`` answers when it has no ``from``/``to``, and what a bulk job walks.

The index is read shard after shard, each in schedule-id order, and every entry is checked against the
schedule it names (read by id): a stale entry (the tag removed, the schedule finished, moved or gone) is
skipped, and one whose schedule is gone is deleted. A page reads entries until it holds ``limit``
schedules, has read ``budget`` entries or has spent half the request's store time (``deadline``); only a
run of stale entries gives an empty page, and its cursor goes on from there."""

from __future__ import annotations

import base64
import dataclasses
from uuid import UUID

from tickd.schema import aio, deadline
from tickd.schema.cassandra.bulk import TAG_SHARDS
from tickd.schema.errors import InvalidInput
from tickd.schema.listing import target_of
from tickd.schema.model import BulkFilter, Schedule, Status
from tickd.schema.store import Store

# Schedules read by id at once (two reads each: pointer, row).
RESOLVE_CONCURRENCY = 8
# Index entries one listing page reads at most, whatever its limit: each is two reads, and a page must fit
# in a request's store budget (acceptance O7: a status filter none of 10,000 entries matched took 20,000
# reads and a 503).
PAGE_BUDGET = 2000
# Entries resolved between two looks at the request's store time: a page stops with a cursor once half
# of it is spent, so a slow store gives a short page, not a 503 (acceptance O7 in CI: 2,000 entries, every
# one paused, did not fit in 10 s on a loaded machine).
CHUNK = 128


@dataclasses.dataclass(frozen=True, slots=True)
class TagCursor:
    """Where a walk of the index resumes: in ``shard``, after ``after`` (None: the shard's start)."""

    shard: int = 0
    after: UUID | None = None

    def encode(self) -> str:
        raw = f"t1:{self.shard}:{self.after.hex if self.after else ''}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> TagCursor:
        """The cursor a walk handed out; ``InvalidInput`` (field ``cursor``) for anything else."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            version, shard, after = raw.split(":")
            if version != "t1" or not shard.isdigit() or not 0 <= int(shard) < TAG_SHARDS:
                raise ValueError(raw)
            return cls(int(shard), UUID(hex=after) if after else None)
        except (ValueError, UnicodeDecodeError):
            raise InvalidInput("cursor is not one this API handed out", field="cursor") from None


def selects(f: BulkFilter, s: Schedule) -> bool:
    """Whether ``s`` (as stored now) is one of the schedules ``f`` selects."""
    options = s.options
    if options is None or f.tag not in options.tags:
        return False
    if options.event is not None or options.retry_of is not None or options.notice:
        return False
    # The row the pointer names may read "moved": a change of it whose write was lost (the poller marked
    # the row superseded). It is the schedule's current row, scheduled to the client, and a bulk change of
    # it finishes the lost one (simulation seed 1038: passed over, a lost bulk cancel was never finished).
    status = Status.SCHEDULED if s.status is Status.MOVED else s.status
    if f.status is not None and status is not f.status:
        return False
    due = s.location.due_at
    if (f.due_from is not None and due < f.due_from) or (f.due_to is not None and due >= f.due_to):
        return False
    return f.target is None or target_of(s) == f.target.lower()


async def page(
    store: Store, client_id: str, f: BulkFilter, cursor: TagCursor | None, limit: int, budget: int
) -> tuple[list[Schedule], TagCursor | None]:
    """Up to ``limit`` schedules ``f`` selects, from ``cursor`` on, reading at most ``budget`` index
    entries; and the cursor to go on from (None: the index is read to its end)."""
    tag = f.tag
    assert tag is not None, "a tag job's filter"
    at = cursor or TagCursor()
    found: list[Schedule] = []
    read = 0
    while at.shard < TAG_SHARDS and len(found) < limit and read < budget:
        if read and (share := deadline.share_left()) is not None and share < 0.5:
            break
        want = min(limit - len(found), budget - read, CHUNK)
        ids = await store.tagged(client_id, tag, at.shard, at.after, want)
        read += len(ids)
        calls = [lambda sid=sid: store.get_schedule(client_id, sid) for sid in ids]
        schedules = await aio.gather_limited(calls, RESOLVE_CONCURRENCY)
        for sid, s in zip(ids, schedules, strict=True):
            if s is None:
                await store.forget_tagged(client_id, tag, sid)
            elif selects(f, s):
                found.append(s)
        at = TagCursor(at.shard, ids[-1]) if len(ids) == want else TagCursor(at.shard + 1)
    return found, at if at.shard < TAG_SHARDS else None
