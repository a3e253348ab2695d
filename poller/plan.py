"""The firing plan of one instance: the rows of its open minutes by due time, what is in flight, and
when a due row may fire.

Rows come in through ``consider`` (reads, durable retries, chained occurrences); ``next_due`` hands the
next due row out once the node holds its lease and every change acknowledged in time for that row has
been read (the hot-mark gate); ``start_fire`` / ``end_fire`` track it while it is out. A fire that ends
unsettled poisons its minute, and the first crashed delivery is kept in ``crash``: the checkpointer
stops the instance on it. Nothing here touches storage or raises; the plan's two signals (``wake`` for
the fire loop, ``changed`` for whoever waits for minutes to move) are its only effects.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from tickd.poller.errors import Lease
from tickd.schema.model import RowStamp, Schedule, Status

Clock = Callable[[], datetime]
RowKey = tuple[datetime, UUID]
# Fire ids remembered as delivered by an owner (a few minutes of fires at the rates a node sustains).
_DELIVERED_KEPT = 100_000


@dataclass(eq=False, slots=True)
class SliceRead:
    """A read of an open minute's rows due in ``[start, until)`` (None: to its end), begun at ``began``
    (node clock)."""

    minute: datetime
    start: datetime
    until: datetime | None
    began: datetime
    done: bool = False


@dataclass
class OpenMinute:
    """What an instance knows about one loaded minute."""

    minute: datetime
    rows: int = 0
    pending: int = 0
    inflight: int = 0
    fired: set[RowKey] = field(default_factory=set)
    # A fire of this minute ended without its outcome stored (crashed, or abandoned at a drain deadline):
    # the minute must never be checkpointed by this owner, so the next one fires it again.
    poisoned: bool = False
    # Reads of this minute started and not finished (its stream of slices, re-reads after hot marks).
    reads: int = 0
    # Rows due before this are loaded (the minute is streamed in due-time slices); None: all of them.
    horizon: datetime | None = None
    # The slice being read, if one is: rows up to its end (None: the rest of the minute) are taken.
    loading: SliceRead | None = None
    last_mark: tuple[datetime, UUID | None] | None = None  # the hot mark last seen: (touched_at, write_id)
    # Paused rows read whole that do not wake here (no timed pause ends at them), by version: a re-read
    # need not read them again while their stamp stays the same.
    resting: dict[RowKey, int] = field(default_factory=dict)
    first_touch: datetime | None = None
    hot_until: datetime | None = None


class FiringPlan:
    def __init__(self, poller_id: int, clock: Clock, lease: Lease, *, see_ahead_s: float, recheck_s: float) -> None:
        self._poller_id = poller_id
        self._now = clock
        self._lease = lease
        self._recheck_s = recheck_s
        self._heap: list[RowKey] = []
        self._pending: dict[RowKey, Schedule] = {}
        self.open: dict[datetime, OpenMinute] = {}
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self.crash: BaseException | None = None
        # Every change acknowledged before this (node clock) is in the plan: the latest poll of hot marks
        # whose marks have all been re-read. A row fires only once this is close enough to its due time.
        self._seen_until: datetime | None = None
        self._unread_poll: datetime | None = None  # a poll that brought new marks, not re-read yet
        self._marks_new = False
        self._see_ahead = timedelta(seconds=see_ahead_s)
        # Slice reads under way or not yet covered by a re-read pass (re-reads stop at a minute's horizon).
        self._unsure: list[SliceRead] = []
        # Fires (fire ids, events: event ids) this owner delivered, newest last, at most _DELIVERED_KEPT.
        self._delivered: dict[str, None] = {}

    # -- minutes --------------------------------------------------------------------------------------

    def open_minute(self, minute: datetime, now: datetime, settle_s: float) -> OpenMinute:
        """Open ``minute`` with nothing of it loaded yet (its slices come through ``slice_reading``). A
        write racing its first read shows up as a mark touched just before now, maybe polled before the
        minute was open: keep re-reading (what is loaded) briefly."""
        state = self.open[minute] = OpenMinute(
            minute, horizon=minute, first_touch=now, hot_until=now + timedelta(seconds=settle_s)
        )
        return state

    def slice_reading(self, state: OpenMinute, until: datetime | None, began: datetime) -> SliceRead:
        """A read of ``state``'s rows due from its horizon to ``until`` (a slice; None: the rest) begins at
        ``began``. A change acknowledged after that may be missing from what it loads, and until a
        re-read pass covers the slice, no poll after ``began`` vouches for those rows: they fire by
        ``began`` (``_changes_seen``)."""
        assert state.horizon is not None and state.loading is None
        read = state.loading = SliceRead(state.minute, state.horizon, until, began)
        self._unsure.append(read)
        return read

    def slice_read(self, read: SliceRead) -> None:
        """The slice read is over: its minute is loaded up to its end. A write that raced it may be
        missing: the next re-read pass re-reads the slice once (``reread_pass_begins``), and its rows
        fire once that pass is done."""
        state = self.open[read.minute]
        state.horizon, state.loading = read.until, None
        read.done = True
        self._wake.set()

    def reread_pass_begins(self) -> list[SliceRead]:
        """The slice reads a re-read pass beginning now covers (those over): it re-reads each slice."""
        return [read for read in self._unsure if read.done]

    def reread_pass_done(self, covered: list[SliceRead]) -> None:
        for read in covered:
            self._unsure.remove(read)
        if covered:
            self._wake.set()

    def close_minute(self, minute: datetime) -> OpenMinute:
        state = self.open.pop(minute)
        self._changed.set()
        return state

    # -- rows -----------------------------------------------------------------------------------------

    def consider(self, row: Schedule) -> None:
        """Take a row read from storage into the firing plan (new, changed, or gone). Rows of another
        instance's partition (a recurring schedule's next occurrence moved off a draining poller) belong
        to that instance's owner: taking them here would fire them twice, from two nodes."""
        if row.location.poller_id != self._poller_id:
            return
        state = self.open.get(row.location.minute)
        key = (row.location.due_at, row.schedule_id)
        if state is None or key in state.fired or not _taken(state, key[0]):
            return
        known = self._pending.get(key)
        if row.status is not Status.SCHEDULED and not row.wakes:
            if row.status is Status.PAUSED:
                state.resting[key] = row.version
            if known is not None:
                del self._pending[key]
                state.pending -= 1
            return
        if known is None:
            heapq.heappush(self._heap, key)
            state.rows += 1
            state.pending += 1
            self._wake.set()
        if known is None or row.version >= known.version:
            self._pending[key] = row

    def pending_through(self, minute: datetime) -> int:
        """Rows of ``minute`` and of the open minutes before it waiting to fire. A minute's stream waits
        for room by this count, not by all rows: rows of a later minute fire only once the earlier ones
        are loaded, so counting them could stall both for good."""
        return sum(state.pending for m, state in self.open.items() if m <= minute)

    def changed(self, minute: datetime, stamp: RowStamp) -> bool:
        """Whether a re-read row of ``minute``, seen by its stamp only, would change the plan if read
        whole (``consider``): a scheduled row the plan never had (or a paused one: it may be a pause
        parked where it ends, ``Schedule.wakes``), or a pending one whose status, version or attempts
        moved on. Rows fired already, and minutes not open, change nothing."""
        state = self.open.get(minute)
        key = (stamp.due_at, stamp.schedule_id)
        if state is None or key in state.fired:
            return False
        known = self._pending.get(key)
        if known is None:
            if stamp.status is Status.PAUSED:
                return state.resting.get(key) != stamp.version
            return stamp.status is Status.SCHEDULED
        if stamp.status is not known.status:
            return True
        return stamp.version > known.version or (stamp.version == known.version and stamp.attempts != known.attempts)

    async def next_due(self) -> Schedule:
        """Wait for the next row that is due and may fire, and take it off the plan."""
        while True:
            if not self._heap:
                await _wait(self._wake, None)
                continue
            due, sid = self._heap[0]
            delay = (due - self._now()).total_seconds()
            if delay > 0:
                await _wait(self._wake, delay)
                continue
            if not self._lease() or not self._changes_seen(due):
                # The node may be declared dead by now (it was paused, or its heartbeats fail), or it
                # could not read hot marks lately: fire nothing until it knows.
                await _wait(self._wake, self._recheck_s)
                continue
            heapq.heappop(self._heap)
            row = self._pending.pop((due, sid), None)
            if row is not None:
                return row

    async def take_due(self, limit: int) -> list[Schedule]:
        """Wait for the next row that is due and may fire, then take it and every other such row off the
        plan at once, up to ``limit``, in due order: one pass of the fire loop."""
        rows = [await self.next_due()]
        now = self._now()
        heap, pending = self._heap, self._pending
        while len(rows) < limit and heap:
            due, sid = heap[0]
            if due > now or not self._changes_seen(due):
                break
            heapq.heappop(heap)
            row = pending.pop((due, sid), None)
            if row is not None:
                rows.append(row)
        return rows

    def start_fire(self, row: Schedule) -> OpenMinute:
        """``row`` (from ``next_due``) goes out: it is in flight until ``end_fire``."""
        state = self.open[row.location.minute]
        state.pending -= 1
        state.inflight += 1
        state.fired.add((row.location.due_at, row.schedule_id))
        return state

    def end_fire(self, state: OpenMinute, settled: bool) -> None:
        """A fire of ``state``'s minute is over; unsettled (no outcome stored), it poisons the minute."""
        if not settled:
            state.poisoned = True
        state.inflight -= 1
        self._changed.set()

    def fire_crashed(self, exc: BaseException) -> None:
        """A delivery raised: keep the first such error, for the checkpointer to stop the instance on."""
        if self.crash is None:
            self.crash = exc
            self._changed.set()

    async def wait_changed(self, timeout_s: float) -> None:
        """Until a minute may have moved (opened, closed, a fire ended), or ``timeout_s`` passes."""
        await _wait(self._changed, timeout_s)

    def describe(self, now: datetime) -> dict[str, object]:
        """What the plan holds and what gates it (for the node's /status): rows waiting, the first due
        time, whether the lease holds, and how far back changes are known to be read."""
        first = self._heap[0][0] if self._heap else None
        return {
            "pending": len(self._pending),
            "first_due_in_s": None if first is None else round((first - now).total_seconds(), 3),
            "lease": self._lease(),
            "changes_seen_age_s": None
            if self._seen_until is None
            else round((now - self._seen_until).total_seconds(), 3),
            "marks_unread": self._unread_poll is not None,
            "open_minutes": [m.isoformat() for m in sorted(self.open)],
            # Per open minute, how far its rows are read (due time; None: all of them).
            "loaded_until": {
                m.isoformat(): None if s.horizon is None else s.horizon.isoformat()
                for m, s in sorted(self.open.items())
            },
        }

    # -- fires delivered --------------------------------------------------------------------------------

    def note_delivered(self, key: str) -> None:
        self._delivered[key] = None
        if len(self._delivered) > _DELIVERED_KEPT:
            del self._delivered[next(iter(self._delivered))]

    def delivered_before(self, key: str) -> bool:
        """Whether this owner already delivered the fire ``key``: a retry row of it that lands later (a
        stale owner's write, sent before it froze and applied after) must not deliver it again."""
        return key in self._delivered

    # -- the hot-mark gate ----------------------------------------------------------------------------

    def marks_new(self) -> None:
        """A hot mark of this instance changed: the poll that saw it covers nothing until it is re-read."""
        self._marks_new = True

    def marks_polled(self, polled_at: datetime) -> None:
        """The node read the hot marks, in a poll that began at ``polled_at``: with no new mark for this
        instance, every change acknowledged before then is in the plan; with new marks, once re-read."""
        if self._marks_new:
            self._marks_new = False
            self._unread_poll = polled_at
        elif self._unread_poll is None:
            self._seen_until = polled_at

    @property
    def seen_until(self) -> datetime | None:
        """Every change acknowledged before this moment (node clock) is in the plan (None: not known yet)."""
        return self._seen_until

    @property
    def unread_poll(self) -> datetime | None:
        return self._unread_poll

    def marks_reread(self, polled: datetime) -> None:
        """Every mark of the poll begun at ``polled`` has been re-read: changes before it are planned."""
        self._seen_until = polled
        if self._unread_poll is polled:
            self._unread_poll = None
        self._wake.set()

    def _changes_seen(self, due: datetime) -> bool:
        """Whether a cancel or change acknowledged in time (the API's guard) for a row due at ``due``
        would be in the plan by now; if the marks could not be read lately, the row waits."""
        for state in self.open.values():
            if state.horizon is not None and due >= state.horizon:
                return False  # not loaded yet: a row a fire put here waits for its slice to be read
        seen = self._seen_until
        for read in self._unsure:
            if due >= read.start and seen is not None and read.began < seen:
                seen = read.began
        return seen is not None and seen + self._see_ahead >= due


def _taken(state: OpenMinute, due: datetime) -> bool:
    """Whether a row due at ``due`` belongs in the plan yet: loaded, or in the slice being read. A row
    further on (a retry or an occurrence this owner stored) is left to the slice read that reaches it:
    it begins after the row was stored, so it finds it."""
    if state.horizon is None or due < state.horizon:
        return True
    return state.loading is not None and (state.loading.until is None or due < state.loading.until)


async def _wait(event: asyncio.Event, timeout_s: float | None) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass
    event.clear()
