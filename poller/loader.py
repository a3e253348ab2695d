"""The minute loader of one instance: it streams each minute partition into the firing plan in
due-time slices (``read_slice_s`` of rows, each read ``preload_s`` before it is due, and only while the
plan holds fewer than ``plan_max_rows``), and re-reads what is loaded of an open minute while a hot mark
says a late write landed there. Re-reads stop at the minute's horizon (how far it is loaded): rows
beyond it come with their slice, whose read begins after they were written.

Storage errors are retried (``durably``) with the read still counted on its minute, so a minute
never closes over rows nobody loaded; a read cut short by anything else (a bug, a cancelled drain)
leaves the count up for good: that minute is not checkpointed by this owner, and the error stops the
instance's task group. Marks reach it from the node through ``on_mark``; the plan's hot-mark gate
learns that their re-read is done from ``reread_loop``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from tickd.poller import minutes
from tickd.poller.fire import durably
from tickd.poller.metrics import Metrics
from tickd.poller.plan import FiringPlan, OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.schema.model import HotMark, InstanceKey
from tickd.schema.store import Store

Clock = Callable[[], datetime]
# Minutes open at once, at most: bounds memory while catching up.
_MAX_OPEN_MINUTES = 3
# How often a minute's stream looks again for room in a full plan (fires ending also wake it).
_ROOM_POLL_S = 0.5


class MinuteLoader:
    def __init__(
        self,
        instance: InstanceKey,
        store: Store,
        plan: FiringPlan,
        settings: PollerSettings,
        clock: Clock,
        log: FilteringBoundLogger,
        metrics: Metrics | None = None,
    ) -> None:
        self._instance = instance
        self._metrics = metrics
        self._store = store
        self._plan = plan
        self._s = settings
        self._now = clock
        self._log = log

    async def run(self, start: datetime) -> None:
        """Open every minute from ``start`` on, each at its preload time, until cancelled; each open
        minute streams in (``_stream``) beside the next ones."""
        minute = start
        async with asyncio.TaskGroup() as streams:
            while True:
                await self._sleep_until(minutes.opens_at(minute, self._s.preload_s))
                while len(self._plan.open) >= _MAX_OPEN_MINUTES:
                    await self._plan.wait_changed(1.0)
                state = self._plan.open_minute(minute, self._now(), self._s.mark_settle_s)
                streams.create_task(self._stream(state))
                minute += minutes.MINUTE

    async def _stream(self, state: OpenMinute) -> None:
        """Read an open minute in due-time slices of ``read_slice_s``, each ``preload_s`` before it is
        due and once the plan holds fewer than ``plan_max_rows`` rows: a minute of 100,000 rows is never
        in memory whole, and its reads are spread over the minute instead of all at its start. The
        stream counts as one read of the minute until its last slice is in."""
        minute, end = state.minute, state.minute + minutes.MINUTE
        slice_ = timedelta(seconds=self._s.read_slice_s)
        state.reads += 1
        start, rows = minute, 0
        while start < end:
            until = start + slice_ if start + slice_ < end else None  # the last slice: the rest
            await self._sleep_until(start - timedelta(seconds=self._s.preload_s))
            while self._plan.pending_through(minute) >= self._s.plan_max_rows:
                await self._plan.wait_changed(_ROOM_POLL_S)
            read = self._plan.slice_reading(state, until, self._now())
            rows += await self.read(minute, start, until)
            self._plan.slice_read(read)
            start = end if until is None else until
        state.reads -= 1
        self._log.debug("minute_loaded", minute=minute.isoformat(), rows=rows)

    async def read(self, minute: datetime, from_due: datetime | None, until_due: datetime | None = None) -> int:
        """Read the minute (from ``from_due``, before ``until_due``) into the plan, retrying storage
        errors. Until every read of a minute has completed, the minute cannot close: a read cut short
        (an error, a drain) would otherwise let the checkpoint pass rows nobody loaded."""
        state = self._plan.open.get(minute)
        if state is None:
            return 0
        state.reads += 1

        async def read() -> int:
            count = 0
            pages = self._store.read_minute(self._instance, minute, from_due=from_due, until_due=until_due)
            async for page in pages:
                for row in page:
                    self._plan.consider(row)
                count += len(page)
            return count

        count = await durably(self._log, "read_minute", read, self._metrics)
        state.reads -= 1
        return count

    async def reread(self, minute: datetime, from_due: datetime | None, until_due: datetime | None = None) -> None:
        """Re-read an open minute from ``from_due`` cheaply: by the rows' stamps first, then whole from the
        first row the plan lacks or holds at an older state (rare: a write that landed since the last
        read). Counted on the minute like ``read``, so the minute cannot close in between."""
        state = self._plan.open.get(minute)
        if state is None:
            return
        # Only what is loaded: rows at and after the horizon come with their slice, read after this.
        until = _earlier(state.horizon, until_due)
        if until is not None and from_due is not None and from_due >= until:
            return
        state.reads += 1

        async def first_changed() -> datetime | None:
            stamps = self._store.read_minute_stamps(self._instance, minute, from_due=from_due, until_due=until)
            async with contextlib.aclosing(stamps):
                async for page in stamps:
                    changed = next((s.due_at for s in page if self._plan.changed(minute, s)), None)
                    if changed is not None:
                        return changed
            return None

        changed = await durably(self._log, "read_minute_stamps", first_changed, self._metrics)
        if changed is not None:
            await self.read(minute, changed, until)
        state.reads -= 1

    async def sweep(self, minute: datetime) -> bool:
        """Read the whole of an open minute once more before it closes; whether that found rows the plan
        did not have. A write answered too late to be acknowledged (the API's hot-write deadline) can land
        after the minute's re-reads with a hot mark older than the one already there, so no mark tells of
        it: this read fires it rather than leave it scheduled behind the checkpoint for good."""
        state = self._plan.open.get(minute)
        if state is None:
            return False
        rows = state.rows
        await self.reread(minute, None)
        return state.rows != rows

    # -- hot marks ------------------------------------------------------------------------------------

    def on_mark(self, mark: HotMark, since: datetime) -> None:
        """A write landed in ``mark.minute`` inside the look-ahead window: re-read it while the mark is fresh.

        A mark keeps only its latest write, so earlier writes that changed it since the node's last
        good poll (``since``) are re-read too, not only those near ``touched_at``."""
        state = self._plan.open.get(mark.minute)
        # Any change of the mark is a new write: with skewed clocks a later write can carry an earlier time,
        # and two writes in one millisecond the same time (told apart by their write ids, seed 102070).
        identity = (mark.touched_at, mark.write_id)
        if state is None or identity == state.last_mark:
            return
        state.last_mark = identity
        touched_at = mark.touched_at
        self._plan.marks_new()
        start = min(touched_at, since)
        if state.first_touch is None or start < state.first_touch:
            state.first_touch = start
        until = max(touched_at, self._now()) + timedelta(seconds=self._s.mark_settle_s)
        state.hot_until = until if state.hot_until is None else max(state.hot_until, until)

    async def reread_loop(self) -> None:
        """Every ``mark_poll_s``: re-read the hot minutes, then tell the plan which poll is covered."""
        while True:
            await asyncio.sleep(self._s.mark_poll_s)
            polled = self._plan.unread_poll
            covered = self._plan.reread_pass_begins()
            now = self._now()
            for state in list(self._plan.open.values()):
                if state.hot_until is None or state.first_touch is None:
                    continue
                start = minutes.reread_from(state.minute, state.first_touch, now, self._s.reread_lag_s)
                await self.reread(state.minute, start)
                if now > state.hot_until:
                    state.hot_until = state.first_touch = None
            for read in covered:  # each slice read since the last pass, once: a write may have raced it
                await self.reread(read.minute, read.start, read.until)
            self._plan.reread_pass_done(covered)
            if polled is not None:
                self._plan.marks_reread(polled)

    async def _sleep_until(self, moment: datetime) -> None:
        delay = (moment - self._now()).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    """The earlier of two upper bounds, None being no bound."""
    if a is None or b is None:
        return b if a is None else a
    return min(a, b)
