"""The checkpointer of one instance: where a new owner resumes, and how the checkpoint moves on.

``resume`` re-stamps the stored checkpoint under this claim's epoch (a stale owner's writes are
ignored from then on) and records, as skipped, the minutes older than the catch-up window. ``run``
closes each minute once no late write can land in it and every row of it has been read, fired and
recorded, and one last whole read of it found nothing new (a write held up past the API's deadline can
land unmarked), writing the checkpoint fenced by the epoch. That last read comes at an offset of the
instance's own (``sweep_spread_s``), so a node's instances do not all read a whole minute at once.

Error edges, all out of ``run`` into the instance's task group and from there to the node:
``InstanceCrashed`` when a delivery raised (its minute is poisoned, so the checkpoint stays before it
and the next owner fires it again); ``InstanceDrained`` when, above a lowered quota, nothing remains
at or after the checkpoint; ``StoreUnavailable`` from a checkpoint write or a horizon read (the
checkpoint stays where it was, which is always safe: the next owner resumes earlier).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from tickd.poller import minutes
from tickd.poller.errors import InstanceCrashed, InstanceDrained
from tickd.poller.metrics import Metrics
from tickd.poller.plan import FiringPlan
from tickd.poller.settings import PollerSettings
from tickd.schema import missed
from tickd.schema.model import Claim, Client, FireOutcome, Status, next_occurrence
from tickd.schema.store import Store
from tickd.schema.timing import minute_bucket

Clock = Callable[[], datetime]
# Most minutes recorded as skipped on resume (one day): older ones are left as they are.
_MAX_SKIPPED_MINUTES = 1440


class Checkpointer:
    def __init__(
        self,
        claim: Claim,
        client: Callable[[], Client],
        store: Store,
        plan: FiringPlan,
        settings: PollerSettings,
        metrics: Metrics,
        clock: Clock,
        log: FilteringBoundLogger,
        sweep: Callable[[datetime], Awaitable[bool]],
    ) -> None:
        self._claim = claim
        self._sweep = sweep
        self._instance = claim.instance
        self._client = client  # read at each use: the node swaps in the client's latest settings
        self._store = store
        self._plan = plan
        self._s = settings
        self._metrics = metrics
        self._now = clock
        self._log = log
        self._checkpoint: datetime | None = None
        self.drained = False
        spread = minutes.sweep_offset_s(self._instance.client_id, self._instance.poller_id, settings.sweep_spread_s)
        self._sweep_after = timedelta(seconds=spread)

    # -- resuming -------------------------------------------------------------------------------------

    async def resume(self) -> datetime:
        """The first minute this owner fires, after re-stamping the checkpoint and recording what the
        catch-up window skips."""
        cp = await self._store.get_checkpoint(self._instance)
        if cp is not None:
            # Re-stamp under our epoch: from now on a stale owner's checkpoint writes are ignored.
            await self._store.write_checkpoint(self._claim, cp.minute)
            self._checkpoint = cp.minute
        plan = minutes.plan_start(
            cp.minute if cp else None, self._client().created_at, self._now(), self._s.catch_up_window_s
        )
        if plan.skip_from is not None:
            await self._record_skipped(plan.skip_from, plan.start)
        current = minute_bucket(self._now())
        if cp is not None and plan.start < current:
            self._log.info("catch_up", from_minute=plan.start.isoformat(), to_minute=current.isoformat())
        return plan.start

    async def _record_skipped(self, start: datetime, end: datetime) -> None:
        reason = f"older than the catch-up window ({self._s.catch_up_window_s} s)"
        for minute in minutes.minutes_between(start, end)[-_MAX_SKIPPED_MINUTES:]:
            rows = [r async for page in self._store.read_minute(self._instance, minute) for r in page]
            live = [r for r in rows if r.status is Status.SCHEDULED]
            if not live:
                continue
            now = self._now()
            await self._store.record_outcomes(
                [
                    FireOutcome(
                        r.client_id, r.schedule_id, r.location, Status.FAILED, r.attempts, now, f"skipped: {reason}"
                    )
                    for r in live
                ]
            )
            for r in live:
                if r.repeat is not None and r.attempts == 0:
                    # A recurring schedule lives on: its timeline resumes at the first occurrence after now,
                    # or where its missed-fire policy says (``schema.missed.after_window_skip``). (Past its
                    # calendars' exclusions as its next fire finds them: ``Settler.chain``.)
                    client = self._client()
                    policy = r.repeat.missed or client.settings.missed or missed.FIRE_ALL
                    window_s = self._s.catch_up_window_s
                    after = now
                    if policy.applies:
                        recurrence = r.repeat.recurrence()
                        after = missed.after_window_skip(policy, recurrence, r.fire_at, now, window_s, fired=r.seq)
                    following = next_occurrence(r, r.repeat, after, now, client.poller_count).row
                    await self._store.chain_schedule(r, following, now)
            await self._store.record_skipped(self._instance, minute, reason, len(live))
            self._log.warning("minute_skipped", minute=minute.isoformat(), rows=len(live), reason=reason)

    # -- closing minutes ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Close minutes as they become ready, until cancelled or one of the error edges above."""
        while True:
            await self._plan.wait_changed(0.5)
            if (crash := self._plan.crash) is not None:
                raise InstanceCrashed(f"a delivery crashed: {crash!r}") from crash
            await self.close_ready_minutes()

    async def close_ready_minutes(self) -> None:
        """Checkpoint every open minute, oldest first, that is over, read, and fully recorded."""
        now = self._now()
        for minute in sorted(self._plan.open):
            state = self._plan.open[minute]
            if state.poisoned or state.reads:
                return  # never checkpoint past a fire whose outcome is not stored, nor past unread rows
            closes = minutes.closes_at(minute, self._s.minute_close_s)
            if now < closes + self._sweep_after or state.pending or state.inflight:
                return
            seen = self._plan.seen_until
            if seen is None or seen < closes:
                # A write to this minute acknowledged before it closed may not be planned yet: its hot mark
                # is read by a poll begun after the close point (a node resuming from a pause or an
                # outage is past the close point with marks it has not read).
                return
            if await self._sweep(minute) or state.pending or state.inflight or state.poisoned:
                return  # rows landed late (unacknowledged writes): fired before the minute closes
            await self._store.write_checkpoint(self._claim, minute)
            self._plan.close_minute(minute)
            self._checkpoint = minute
            self._metrics.checkpoint_lag.labels(str(self._instance)).set((now - minute).total_seconds())
            self._log.info("minute_fired", minute=minute.isoformat(), rows=state.rows, fired=len(state.fired))
            await self._check_drained(now)

    async def _check_drained(self, now: datetime) -> None:
        """Beyond a lowered quota, an instance stops once nothing remains at or after its checkpoint."""
        c = self._client()
        if self._instance.poller_id < c.poller_count or c.resized_at is None:
            return
        if (now - c.resized_at).total_seconds() < self._s.drain_grace_s:
            return
        horizon = await self._store.get_horizon(self._instance)
        if horizon is None or (self._checkpoint is not None and self._checkpoint >= horizon):
            self.drained = True
            self._log.info("instance_drained", horizon=horizon.isoformat() if horizon else None)
            raise InstanceDrained
