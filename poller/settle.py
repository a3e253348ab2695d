"""What a fire writes: before it goes out (the next occurrence of a recurring schedule, the events of a
batch trigger, the re-read of a durable retry), and the one way it ends.

A fire ends in exactly one of three ways, each written here and retried in place while storage is
unavailable (``durably``), with the fire still in flight so its minute cannot close:
- delivered: its outcome is recorded (through the ``OutcomeWriter``, which it waits on);
- retried later: a retry row is stored (``callback_retry_scheduled``); when the schedule changed
  meanwhile, its row is recorded MOVED instead, or keeps the client's CANCELLED or PAUSED;
- dead-lettered: its row FAILED, and a dead letter (``callback_dead_lettered``).
An error while settling that is not ``LeaseLost`` nor a storage error (a bug, a value nobody foresaw) ends
the fire as a dead letter naming it (``fire_settle_failed``): stopping the instance would have its next
owner fire the row again and fail the same way, in a loop.

Before a durable retry of a one-time schedule is sent, its schedule is read again (``still_wanted``): a
cancel, pause or change accepted while the fire was in retry drops the fire, its row marked as the change
left it. An attempt already on the wire when the change lands may still arrive.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from tickd.poller import recurring
from tickd.poller.callbacks.backoff import clamp_wait_s
from tickd.poller.delivery import DeliveryResult
from tickd.poller.durable import durably
from tickd.poller.errors import LeaseLost
from tickd.poller.fire import Fire, FireContext
from tickd.poller.loader import MinuteLoader
from tickd.poller.outcomes import OutcomeWriter, tried
from tickd.poller.plan import FiringPlan
from tickd.poller.send import STOPS
from tickd.schema import guard, timing
from tickd.schema.errors import Conflict
from tickd.schema.model import (
    Chain,
    DeadLetter,
    EventOf,
    Location,
    Options,
    Schedule,
    Status,
    callback_type,
)
from tickd.schema.store import Store


class Settler:
    def __init__(
        self, ctx: FireContext, store: Store, plan: FiringPlan, outcomes: OutcomeWriter, loader: MinuteLoader
    ) -> None:
        self._ctx = ctx
        self._store = store
        self._plan = plan
        self._outcomes = outcomes
        self._loader = loader
        self._metrics = ctx.metrics
        self._event_letters: dict[UUID, datetime] = {}  # per batch schedule, its last event letter's time

    # -- ending a fire --------------------------------------------------------------------------------

    async def settle(self, fire: Fire) -> None:
        """Make the fire's end durable: delivered, retried later, or dead-lettered.

        Any other error while settling (a bug, a value nobody foresaw) ends this fire as a dead letter
        naming it, logged with its traceback. ``LeaseLost`` and storage errors still stop the instance."""
        row, result, fired_at = fire.row, fire.delivery, fire.sent_at
        try:
            await self._settle_as_told(row, result, fired_at)
        except STOPS:
            raise
        except Exception as exc:
            self._ctx.log.exception("fire_settle_failed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            reason = f"internal error while settling: {type(exc).__name__}"
            await self._bury(row, DeliveryResult.failed(result.attempts, reason, retriable=False), fired_at)

    async def settle_many(self, fires: Sequence[Fire]) -> None:
        """Settle a group sent together: the delivered ones' outcomes in one write, then each other fire
        on its own (``settle``, in a task each under the group's lease guard). One that raises leaves only
        its own fire unsettled; the first such error is raised once every fire has ended."""
        delivered = [fire for fire in fires if fire.delivery.ok]
        if delivered:
            await self._outcomes.record_many([(f.row, Status.SUCCEEDED, f.delivery, f.sent_at) for f in delivered])
            for fire in delivered:
                fire.settled = True
        failed = [fire for fire in fires if not fire.delivery.ok]
        if not failed:
            return

        async def settle(fire: Fire) -> None:
            # A task of its own (gather): its writes are the fire's too, under the same guard (seed
            # 1109: unguarded, a paused node's durable retry landed after the next owner's delivery).
            assert fire.guard is not None
            guard.set_guard(fire.guard)
            await self.settle(fire)
            fire.settled = True

        errors = await asyncio.gather(*(settle(fire) for fire in failed), return_exceptions=True)
        first_error = next((e for e in errors if isinstance(e, BaseException)), None)
        if first_error is not None:
            raise first_error

    async def settle_delivered_before(self, fire: Fire) -> None:
        """A fire this owner delivered already (a stale owner's retry of it landed late, simulation seed
        8702): recorded as the success it was, not delivered twice."""
        row = fire.row
        self._ctx.log.info("fire_already_delivered", schedule_id=str(row.schedule_id), fire_id=fire.key)
        await self._outcomes.record(row, Status.SUCCEEDED, DeliveryResult.delivered(row.attempts), self._ctx.clock())

    async def _settle_as_told(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> None:
        if result.ok:  # delivered
            await self._outcomes.record(row, Status.SUCCEEDED, result, fired_at)
        elif not self._ctx.lease():
            # Paused or cut off while delivering: the next owner may have fired it by now. A retry or a
            # dead letter written from here would repeat (or bury) that fire; it is left to the next owner.
            raise LeaseLost(
                f"the node's lease ran out while {row.fire_id} was out; its retry is left to the next owner"
            )
        elif result.retriable:  # retried later
            # The dispatcher owns the give-up rule (HTTP ends at max_attempts; Kafka outages never do).
            due = self._ctx.clock() + timedelta(seconds=self._retry_wait_s(result))
            retry = tried(row, result, fired_at)  # the retry row carries the fire's attempts so far
            if not await durably(
                self._ctx.log, "requeue", lambda: self._retry_later(retry, result, due), self._metrics
            ):
                # The client changed the schedule since (or a change of theirs half-landed): this fire
                # of the old version ends here, and its row must say so, not stay "scheduled" (a cancel
                # or pause keeps its own mark).
                await self._superseded(row, result)
        else:  # dead-lettered
            await self._bury(row, result, fired_at)

    def _retry_wait_s(self, result: DeliveryResult) -> float:
        """Seconds until a durable retry: the server's wait clamped to the policy's cap (whoever read it,
        a value beyond it would park the fire for years, or overflow the due time), else the backoff."""
        policy = self._ctx.settings.retry
        asked = None if result.retry_after_s is None else clamp_wait_s(result.retry_after_s, policy.cap_s)
        return max(asked or policy.delay_s(result.attempts, self._ctx.rng), 0.05)

    async def _retry_later(self, row: Schedule, result: DeliveryResult, due: datetime) -> bool:
        """A durable retry: the fire moves to a later due time in storage, surviving this node. Calling
        it again with the same ``due`` after a storage error is safe (the store finishes its own move).
        Whether a retry was stored (False: the schedule changed meanwhile)."""
        log = self._ctx.log
        try:
            retry = await self._store.requeue_schedule(
                row, due, result.attempts, result.error or "retry", self._ctx.clock()
            )
        except Conflict:
            log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id))
            return False
        self._plan.consider(retry)  # planned at once if its minute is open here (else read when it opens)
        log.info(
            "callback_retry_scheduled",
            schedule_id=str(row.schedule_id),
            attempts=result.attempts,
            due_at=due.isoformat(),
            error=result.error,
        )
        return True

    async def _bury(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> None:
        """A fire that failed for good: its row FAILED, and a dead letter dated when its last attempt
        failed (now: in-memory retries may have taken a while since the first went out) that carries
        every attempt of the fire."""
        failed_at = self._letter_time(row, self._ctx.clock())
        await self._outcomes.record(row, Status.FAILED, result, fired_at)
        letter_row = tried(row, result, fired_at)
        await durably(
            self._ctx.log, "dead_letter", lambda: self._dead_letter(letter_row, result, failed_at), self._metrics
        )

    def _letter_time(self, row: Schedule, failed_at: datetime) -> datetime:
        """A dead letter's key is (failed_at in ms, schedule id): the events of one batch fire share the
        schedule id, so an event's letter is moved on by a millisecond past the last one this instance
        wrote for the same schedule, rather than overwrite it (found by the SDK's tests)."""
        at = timing.truncate_ms(failed_at)
        if row.event_id is None:
            return at
        last = self._event_letters.get(row.public_id)
        if last is not None and at <= last:
            at = last + timedelta(milliseconds=1)
        if len(self._event_letters) >= 10_000:
            self._event_letters.clear()
        self._event_letters[row.public_id] = at
        return at

    async def _dead_letter(self, row: Schedule, result: DeliveryResult, failed_at: datetime) -> None:
        # An event's letter carries the event id (<fire id>:<index>), the id its deliveries were sent with.
        letter = DeadLetter(
            row.client_id,
            row.public_id,
            row.event_id or row.fire_id,
            failed_at,
            result.attempts,
            result.error or "failed",
            row.callback,
            row.payload,
            tries=row.tries,
        )
        await self._store.add_dead_letter(letter)
        self._metrics.dead_letters.labels(callback_type(row.callback)).inc()
        self._ctx.log.warning(
            "callback_dead_lettered",
            schedule_id=str(row.schedule_id),
            fire_id=letter.fire_id,
            attempts=result.attempts,
            error=result.error,
        )

    # -- before it goes out ---------------------------------------------------------------------------

    async def still_wanted(self, fire: Fire) -> bool:
        """Before a durable retry's attempt of a one-time schedule: whether the schedule still stands as
        this row. A cancel, pause or change of a schedule in retry is accepted at any time (the API's
        mutation guard does not apply to it), so it may land after the plan's last re-read of hot marks;
        this read is what honours it. The dropped fire is recorded as ``_superseded`` records it. An
        attempt already on the wire when the change lands may still arrive (at-least-once), and its
        outcome is then recorded as it ended."""
        row = fire.row
        if not rechecked(row):
            return True
        current = await self._current(row)
        if current is not None and current.location == row.location and current.status is Status.SCHEDULED:
            return True
        self._ctx.log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
        await self._mark_superseded(row, current, None)
        return False

    async def chain(self, fire: Fire) -> bool:
        """Before a recurring occurrence's first attempt: move the schedule on to its next occurrence
        (computed from this one's nominal time, so a late fire never shifts the timeline). False if the
        client changed or cancelled the schedule since this row was written: then it must not fire."""
        row, now = fire.row, self._ctx.clock
        if row.repeat is None or row.attempts != 0:
            return True
        following = recurring.following(row, row.repeat, row.fire_at, now(), self._ctx.client().poller_count)
        chained = await durably(
            self._ctx.log, "chain", lambda: self._store.chain_schedule(row, following, now()), self._metrics
        )
        if chained.outcome is Chain.CHANGED:
            self._ctx.log.info(
                "occurrence_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id
            )
            await self._superseded(row)
            return False
        if chained.following is not None:
            self._plan.consider(chained.following)
        return True

    async def expand(self, fire: Fire) -> None:
        """A fire of a batch trigger produces its events: ``events`` rows of their own, spread over the
        window, each then fired (and retried, and dead-lettered) like any row. The fire itself counts
        as succeeded once its events are stored."""
        row = fire.row
        options = row.options
        assert options is not None
        fired_at = self._ctx.clock()
        events = _events_of(row, options)
        await durably(self._ctx.log, "events", lambda: self._store.add_events(events, self._ctx.clock()), self._metrics)
        # Planned from storage, not from memory: if this fire was expanded before (its outcome was lost
        # in a crash), some events went out already and their rows say so.
        earliest: dict[datetime, datetime] = {}
        for event in events:
            minute, due = event.location.minute, event.location.due_at
            earliest[minute] = min(due, earliest.get(minute, due))
        for minute, due in sorted(earliest.items()):
            await self._loader.read(minute, due)
        self._ctx.log.info("fire_expanded", fire_id=row.fire_id, events=len(events), window_ms=options.window_ms)
        await self._outcomes.record(row, Status.SUCCEEDED, DeliveryResult.delivered(row.attempts + 1), fired_at)

    # -- a schedule changed under its fire --------------------------------------------------------------

    async def _superseded(self, row: Schedule, result: DeliveryResult | None = None) -> None:
        """A fire dropped because the client changed the schedule ends with its row MOVED, unless the
        change already marked it (a cancel keeps the row CANCELLED, a pause PAUSED). A change that half-landed
        (its pointer swapped, its rows not written) marks nothing, and the row must not stay "scheduled"."""
        await self._mark_superseded(row, await self._current(row), result)

    async def _current(self, row: Schedule) -> Schedule | None:
        """The schedule's current row as stored (through its pointer), read durably."""
        return await durably(
            self._ctx.log,
            "read_schedule",
            lambda: self._store.get_schedule(row.client_id, row.schedule_id),
            self._metrics,
        )

    async def _mark_superseded(self, row: Schedule, current: Schedule | None, result: DeliveryResult | None) -> None:
        if current is not None and current.location == row.location and current.status is not Status.SCHEDULED:
            return
        if result is None:
            result = DeliveryResult.failed(row.attempts, "superseded: the schedule was changed", retriable=False)
        await self._outcomes.record(row, Status.MOVED, result, self._ctx.clock())


def rechecked(row: Schedule) -> bool:
    """Whether a row is read again before it fires: a durable retry of a one-time schedule (the rows a
    client's pointer names; a recurring schedule's occurrences and events are kept by the chain's
    compare-and-set and their parent instead)."""
    return row.attempts > 0 and row.repeat is None and row.event_id is None


def _events_of(row: Schedule, options: Options) -> list[Schedule]:
    """A batch trigger's fire as its events' rows: one per event, spread over the window."""
    fire_id = row.fire_id
    events: list[Schedule] = []
    for index in range(options.events):
        offset = timing.event_offset(f"{fire_id}:{index}", index, options.events, options.window_ms)
        # From the fire's own due time, not the expansion's moment: a fire expanded again after a crash
        # must put each event on the same row, or an event delivered already goes out twice.
        due = timing.truncate_ms(timing.due_time(row.fire_at + offset, row.location.due_at))
        events.append(
            dataclasses.replace(
                row,
                schedule_id=uuid.uuid5(row.schedule_id, f"{fire_id}:{index}"),
                location=Location(row.location.poller_id, due),
                options=Options(event=EventOf(row.schedule_id, index, options.events), throttle=options.throttle),
                version=1,
                status=Status.SCHEDULED,
                attempts=0,
                fired_at=None,
                last_error=None,
                tries=(),
            )
        )
    return events
