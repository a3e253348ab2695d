"""A fire: one due row taken off the firing plan, carried as one object through the pipeline's fixed steps
(``poller.pipeline``), and those steps, in the order the fire meets them:

- ``Fire``: the fire itself, which each step fills in; ``FireContext``: what every step reads;
- ``Sender``: its throttle token, the node's send slots, the lease check, its delivery;
- ``Settler``: what it writes before it goes out (a durable retry's re-read, a recurring occurrence's
  next one, a batch trigger's events), and the one way it ends; each step returns what the plan must be
  told (a next occurrence, a retry row, the event minutes to read), which ``poller.pipeline`` hands on;
- ``FailureNotices``: what a dead letter sets off, the client's notice and the auto-pause of a recurring
  schedule failing ``pause_after_failures`` times in a row;
- ``OutcomeWriter``: its outcome made durable, in one batch per partition per flush, the fire waiting on it;
- ``durably``: how its writes and reads see a storage outage through (the minute loader's reads too).

Sending. A fire holds the node's send slots (``poller.slots``: its client's channel slot, then the node's)
only from when it can go out, its throttle token in hand, until it is out: a fire waiting for a token or
for its client's turn holds nothing another tenant needs. A pass's group goes out together
(``Sender.send_many``) with the slots ``poller.pipeline`` took for it. Every send checks the node's lease
right before: a fire whose lease is gone raises ``LeaseLost`` and is left to the next owner (an unused
token goes back first). An exception a send raises that is not the instance's to stop on (a bug in a
dispatcher, a value nobody foresaw) is that fire's failed attempt, logged with its traceback
(``fire_failed_unexpectedly``): see ``_ContainedRouter``.

Settling. A fire ends in exactly one of three ways, each written by the settler and retried in place while
storage is unavailable (``durably``: only ``StoreUnavailable``, backing off up to 5 s; any other storage
error propagates), with the fire still in flight so its minute cannot close:
- delivered: its outcome is recorded (through the ``OutcomeWriter``, which it waits on);
- retried later: a retry row is stored (``callback_retry_scheduled``); when the schedule changed
  meanwhile, its row is recorded MOVED instead, or keeps the client's CANCELLED or PAUSED;
- dead-lettered: its row FAILED, and a dead letter (``callback_dead_lettered``).
The pipeline marks it ``settled``. An error while settling that is not ``LeaseLost`` nor a storage error (a
bug, a value nobody foresaw) ends the fire as a dead letter naming it (``fire_settle_failed``): stopping
the instance would have its next owner fire the row again and fail the same way, in a loop. A fire whose
steps raise stays unsettled: its minute is poisoned in the plan and the next owner fires it again.

Before a durable retry of a one-time schedule or a debounced fire is sent, its schedule is read again
(``still_wanted``, ``Schedule.rechecked``): a cancel, pause or change accepted while the fire was in retry,
or a PUT that pushed a debounced fire back, drops the fire, its row marked as the change left it. An
attempt already on the wire when the change lands may still arrive.

Recording. A fire hands its outcome to ``OutcomeWriter.record`` and waits until it is stored. On
``StoreUnavailable`` a flush keeps the batch for the next one, so the waiting fires stay in flight and no
minute closes over them; any other storage error propagates out of the flush (stopping the instance's task
group, or its drain, loudly) and the waiting fires stay unrecorded for the next owner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar
from uuid import UUID

from structlog.typing import FilteringBoundLogger

from tickd.poller import stats
from tickd.poller.calendars import CalendarBook
from tickd.poller.callbacks.backoff import clamp_wait_s
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.errors import STOPS, Lease, LeaseLost
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.stats import TenantStats
from tickd.poller.throttle import ThrottleGate
from tickd.schema import calendars as cal
from tickd.schema import missed, notices, timing
from tickd.schema.errors import Conflict, StoreUnavailable
from tickd.schema.model import (
    AuditRecord,
    Chain,
    Chained,
    Client,
    DeadLetter,
    EventOf,
    FireOutcome,
    Location,
    Options,
    Repeat,
    Run,
    Schedule,
    Status,
    Token,
    Try,
    add_tries,
    callback_type,
    next_occurrence,
)
from tickd.schema.store import Store

Clock = Callable[[], datetime]
T = TypeVar("T")
# Ceiling of the wait between tries of a storage call while Cassandra does not answer.
_MAX_STORE_RETRY_S = 5.0


# -- the fire -----------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Fire:
    """One due row on its way from the plan to its recorded outcome."""

    row: Schedule
    minute: OpenMinute  # the plan's open minute it was taken from: ended there, settled or not
    token: Token | None = None  # its throttle policy's token, once granted
    fired_at: datetime | None = None  # when it went out (a batch trigger's: when its expansion began)
    lateness_s: float | None = None  # a first attempt's lateness when it went out
    result: DeliveryResult | None = None  # how its delivery ended
    settled: bool = False  # its end is durable: outcome recorded, retry stored, or dead letter written
    # A missed-fire policy's deadline for its first attempt (``schema.missed``; fire_once: or its next
    # occurrence's due time, if later): past it when its send slots come, it is not sent (``skipped``) and
    # is recorded skipped instead.
    start_by: datetime | None = None
    once: bool = False  # start_by is a fire_once policy's: past it, the next occurrence fires instead
    skipped: bool = False

    @property
    def key(self) -> str:
        """What it is delivered as: an event's own id, else the fire id."""
        return self.row.event_id or self.row.fire_id

    def went_out(self, fired_at: datetime) -> None:
        """It is sent now. A first attempt's lateness is sent minus due: the row's due time, after jitter,
        window spread or redrive, not the nominal time (statistics count first attempts only)."""
        self.fired_at = fired_at
        if self.row.attempts == 0:
            self.lateness_s = max(0.0, (fired_at - self.row.location.due_at).total_seconds())

    @property
    def delivery(self) -> DeliveryResult:
        """The result of its delivery (only once it has one)."""
        assert self.result is not None
        return self.result

    @property
    def sent_at(self) -> datetime:
        assert self.fired_at is not None
        return self.fired_at


@dataclass(frozen=True)
class FireContext:
    """What every step of an instance's fires reads: its client (read at each use: the node swaps in the
    client's latest settings), the settings, metrics, clock, the node's lease, log, rng and statistics."""

    client: Callable[[], Client]
    settings: PollerSettings
    metrics: Metrics
    clock: Clock
    lease: Lease
    log: FilteringBoundLogger
    rng: random.Random
    stats: TenantStats | None = None  # the node's per-tenant statistics (GET /v1/stats); None: not counted

    def lease_guard(self) -> Callable[[], None]:
        """The check before each store request of a fire (``schema.guard``): none once the node's lease
        is gone, nor once it has lapsed since the fire began, even if renewed since (the instance may be
        another node's by then, its fire delivered)."""
        began = asyncio.get_running_loop().time()
        lease = self.lease

        def check() -> None:
            if not lease(began):
                raise LeaseLost("the node's lease ran out in the middle of a fire's writes; left to the next owner")

        return check

    def observe_lateness(self, fire: Fire) -> None:
        if fire.lateness_s is not None:
            self.metrics.lateness.labels(fire.row.client_id).observe(fire.lateness_s)

    def count_attempt(self, fire: Fire) -> None:
        """The fire's attempt in the callbacks metric."""
        row = fire.row
        self.metrics.callbacks.labels(row.client_id, callback_type(row.callback), _outcome(fire.delivery)).inc()

    def count_in_stats(self, fire: Fire) -> None:
        """The fire's attempt in the tenant's statistics, once it has settled."""
        if self.stats is not None:
            result = fire.delivery
            outcome = stats.DELIVERED if result.ok else stats.RETRIED if result.retriable else stats.FAILED
            self.stats.attempt(fire.row.client_id, fire.sent_at, outcome, fire.lateness_s)


def _outcome(result: DeliveryResult) -> str:
    if result.ok:
        return "succeeded"
    return "retry" if result.retriable else "failed"


# -- sending ------------------------------------------------------------------------------------------


class Sender:
    def __init__(self, ctx: FireContext, router: CallbackRouter, slots: SendSlots, gate: ThrottleGate) -> None:
        self._ctx = ctx
        self._router = _ContainedRouter(router, ctx.settings.retry.max_attempts, ctx.log)
        self._slots = slots
        self._gate = gate

    async def throttle(self, fire: Fire) -> None:
        """An event of a throttled schedule waits here for a token of its policy (in due-time order)."""
        row = fire.row
        options = row.options
        if options is None or options.throttle is None or options.event is None:
            return
        event_id = row.event_id
        assert event_id is not None
        fire.token = await self._gate.acquire(row.client_id, options.throttle, event_id, row.location.due_at)

    async def send(self, fire: Fire) -> None:
        """Send one fire, holding its send slots only while it goes out; then its token is kept (out, or
        maybe out) or given back."""
        await self._take_slots(fire)
        try:
            await self._go_out(fire)
        finally:
            self._slots.give_back(fire.row)
        if fire.skipped:
            return  # a recurring occurrence (no token: only events hold one)
        token, result = fire.token, fire.delivery
        if token is not None:
            if result.ok or result.maybe_received:
                # Out, or maybe out (a timeout): the subscriber may be working on it, so the token stays
                # held until released or timed out (a retry of the event waits for a slot of its own).
                self._gate.delivered(token)
            else:
                await self._gate.not_delivered(token)

    async def send_many(self, fires: Sequence[Fire]) -> None:
        """Send a pass's group together (its send slots are held already)."""
        fired_at = self._ctx.clock()
        for fire in fires:
            fire.went_out(fired_at)
            self._ctx.observe_lateness(fire)
        if not self._ctx.lease():
            raise LeaseLost(f"the node's lease ran out before {len(fires)} fires went out")
        results = await self._router.deliver_many([fire.row for fire in fires], fired_at)
        for fire, result in zip(fires, results, strict=True):
            fire.result = result

    async def _go_out(self, fire: Fire) -> None:
        if fire.start_by is not None and self._ctx.clock() > fire.start_by:
            fire.skipped = True  # its skip policy's deadline passed while it waited: not sent
            return
        fire.went_out(self._ctx.clock())
        self._ctx.observe_lateness(fire)
        row = fire.row
        if not self._ctx.lease():
            if fire.token is not None:
                await self._gate.not_delivered(fire.token)
            raise LeaseLost(f"the node's lease ran out before {row.fire_id} went out")
        fire.result = await self._router.deliver(row, row.attempts + 1, fire.sent_at)

    async def _take_slots(self, fire: Fire) -> None:
        """Wait for the fire's send slots; cancelled meanwhile (a drain deadline), its unused token goes back."""
        try:
            await self._slots.take(fire.row)
        except asyncio.CancelledError:
            if fire.token is not None:
                await asyncio.shield(self._gate.not_delivered(fire.token))
            raise


class _ContainedRouter:
    """The router as a fire is sent through it: an exception a send raises that is not the instance's to
    stop on (a bug in a dispatcher, a value nobody foresaw) is that fire's failed attempt, logged with its
    traceback (``fire_failed_unexpectedly``). It is retriable until ``max_attempts``, then final: a bug
    neither stops the instance (whose next owner would send the row again at the same attempt, in a loop)
    nor retries for ever."""

    def __init__(self, router: CallbackRouter, max_attempts: int, log: FilteringBoundLogger) -> None:
        self._router = router
        self._max_attempts = max_attempts
        self._log = log

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        try:
            return await self._router.deliver(schedule, attempt, fired_at)
        except STOPS:
            raise
        except Exception as exc:
            self._log.exception("fire_failed_unexpectedly", schedule_id=str(schedule.schedule_id), attempt=attempt)
            return self._failed(attempt, exc)

    async def deliver_many(self, schedules: Sequence[Schedule], fired_at: datetime) -> list[DeliveryResult]:
        """A pass's group, each fire sent as a group of its own, all at once: an error one of them raises
        is that fire's alone. Sent as one group, an error would leave the group's outcomes unknown and
        every fire of it sent again (the others already out: twice from one owner). The Kafka dispatcher's
        batch sender still puts concurrent records into the same producer batches."""
        return list(await asyncio.gather(*(self._one_of_many(schedule, fired_at) for schedule in schedules)))

    async def _one_of_many(self, schedule: Schedule, fired_at: datetime) -> DeliveryResult:
        attempt = schedule.attempts + 1
        try:
            (result,) = await self._router.deliver_many([schedule], fired_at)
        except STOPS:
            raise
        except Exception as exc:
            self._log.exception("fire_failed_unexpectedly", schedule_id=str(schedule.schedule_id), attempt=attempt)
            return self._failed(attempt, exc)
        return result

    def _failed(self, attempt: int, exc: Exception) -> DeliveryResult:
        # Maybe sent: the error may have come after the request went out.
        reason = f"internal error: {type(exc).__name__}"
        retriable = attempt < self._max_attempts
        return DeliveryResult.failed(attempt, reason, retriable=retriable, maybe_received=True)


# -- through a storage outage -------------------------------------------------------------------------


async def durably(
    log: FilteringBoundLogger, what: str, call: Callable[[], Awaitable[T]], metrics: Metrics | None = None
) -> T:
    """Run a storage call until it succeeds (it must be safe to repeat), backing off up to 5 s, and
    return what its successful try returned: a fire's writes and reads (and the minute loader's reads),
    which an instance must see through. Only ``StoreUnavailable`` is retried; any other error
    propagates to the caller (a fire, whose minute it poisons, or a loop of the instance's task group,
    which it stops). Each failed try counts in ``metrics`` (if given) as a store error of operation
    ``what``."""
    delay = 0.1
    while True:
        try:
            return await call()
        except StoreUnavailable as exc:
            if metrics is not None:
                metrics.store_error(what)
            log.warning("store_write_retried", what=what, error=str(exc), wait_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_STORE_RETRY_S)


# -- settling -----------------------------------------------------------------------------------------


class Settler:
    """A fire's writes, each step returning what the plan must be told (``poller.pipeline`` tells it)."""

    def __init__(
        self, ctx: FireContext, store: Store, outcomes: OutcomeWriter, calendars: CalendarBook | None = None
    ) -> None:
        self._ctx = ctx
        self._store = store
        self._outcomes = outcomes
        self._calendars = calendars or CalendarBook(store, ctx.settings.clients_refresh_s)
        self._metrics = ctx.metrics
        self._failures = FailureNotices(store, ctx.metrics, ctx.log)
        self._event_letters: dict[UUID, datetime] = {}  # per batch schedule, its last event letter's time

    # -- ending a fire --------------------------------------------------------------------------------

    async def settle(self, fire: Fire) -> Schedule | None:
        """Make the fire's end durable: delivered, retried later, or dead-lettered. Returns the retry row
        when a retry was stored (for the plan), else None.

        Any other error while settling (a bug, a value nobody foresaw) ends this fire as a dead letter
        naming it, logged with its traceback. ``LeaseLost`` and storage errors still stop the instance."""
        row, result, fired_at = fire.row, fire.delivery, fire.sent_at
        try:
            return await self._settle_as_told(row, result, fired_at)
        except STOPS:
            raise
        except Exception as exc:
            self._ctx.log.exception("fire_settle_failed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            reason = f"internal error while settling: {type(exc).__name__}"
            await self._bury(row, DeliveryResult.failed(result.attempts, reason, retriable=False), fired_at)
            return None

    async def settle_delivered(self, fires: Sequence[Fire]) -> None:
        """Settle fires of a group that were delivered: their outcomes in one write."""
        if fires:
            await self._outcomes.record_many([(f.row, Status.SUCCEEDED, f.delivery, f.sent_at) for f in fires])

    async def settle_delivered_before(self, fire: Fire) -> None:
        """A fire this owner delivered already (a stale owner's retry of it landed late, simulation seed
        8702): recorded as the success it was, not delivered twice."""
        row = fire.row
        self._ctx.log.info("fire_already_delivered", schedule_id=str(row.schedule_id), fire_id=fire.key)
        await self._outcomes.record(row, Status.SUCCEEDED, DeliveryResult.delivered(row.attempts), self._ctx.clock())

    async def _settle_as_told(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> Schedule | None:
        if result.ok:  # delivered
            await self._outcomes.record(row, Status.SUCCEEDED, result, fired_at)
            return None
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
            stored = await durably(
                self._ctx.log, "requeue", lambda: self._retry_later(retry, result, due), self._metrics
            )
            if stored is None:
                # The client changed the schedule since (or a change of theirs half-landed): this fire
                # of the old version ends here, and its row must say so, not stay "scheduled" (a cancel
                # or pause keeps its own mark).
                await self._superseded(row, result)
            return stored
        # dead-lettered
        await self._bury(row, result, fired_at)
        return None

    def _retry_wait_s(self, result: DeliveryResult) -> float:
        """Seconds until a durable retry: the server's wait clamped to the policy's cap (whoever read it,
        a value beyond it would park the fire for years, or overflow the due time), else the backoff."""
        policy = self._ctx.settings.retry
        asked = None if result.retry_after_s is None else clamp_wait_s(result.retry_after_s, policy.cap_s)
        return max(asked or policy.delay_s(result.attempts, self._ctx.rng), 0.05)

    async def _retry_later(self, row: Schedule, result: DeliveryResult, due: datetime) -> Schedule | None:
        """A durable retry: the fire moves to a later due time in storage, surviving this node. Calling
        it again with the same ``due`` after a storage error is safe (the store finishes its own move).
        The retry row as stored (None: the schedule changed meanwhile)."""
        log = self._ctx.log
        try:
            retry = await self._store.requeue_schedule(
                row, due, result.attempts, result.error or "retry", self._ctx.clock()
            )
        except Conflict:
            log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id))
            return None
        log.info(
            "callback_retry_scheduled",
            schedule_id=str(row.schedule_id),
            attempts=result.attempts,
            due_at=due.isoformat(),
            error=result.error,
        )
        return retry

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
        await self._failures.dead_lettered(self._ctx.client(), row, result, failed_at)

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
        """Before a durable retry's attempt of a one-time schedule, or a debounced fire: whether the
        schedule still stands as this row. A cancel, pause or change of such a schedule is accepted at any
        time (the API's mutation guard does not apply to it), so it may land after the plan's last re-read
        of hot marks;
        this read is what honours it. The dropped fire is recorded as ``_superseded`` records it. An
        attempt already on the wire when the change lands may still arrive (at-least-once), and its
        outcome is then recorded as it ended."""
        row = fire.row
        if not row.rechecked:
            return True
        current = await self._current(row)
        if current is not None and current.location == row.location and current.status is Status.SCHEDULED:
            return True
        self._ctx.log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
        await self._mark_superseded(row, current, None)
        return False

    async def chain(self, fire: Fire) -> Chained | None:
        """Before a recurring occurrence's first attempt: move the schedule on to its next occurrence
        (computed from this one's nominal time, so a late fire never shifts the timeline; past the ones its
        calendars exclude, each recorded in its runs as skipped), and return the chain's outcome with the
        next occurrence's row as written (None: no chain for this fire).
        ``Chain.CHANGED`` if the client changed or cancelled the schedule since this row was written:
        then it must not fire, and its row is marked so here. ``Chain.SKIPPED`` if this occurrence must
        not fire: one of its calendars, as it stands now, excludes it (a calendar changed after this row
        was written still has its say), or it missed its start deadline and its missed-fire policy skips it
        (``schema.missed``: the timeline then goes on where the policy says, the occurrences passed over
        recorded as skipped); its row and run are recorded skipped here."""
        row, now = fire.row, self._ctx.clock
        repeat = row.repeat
        if repeat is None or row.attempts != 0:
            return None
        calendars = await self._named_calendars(row, repeat.calendars)
        client = self._ctx.client()
        hit = cal.excluded_by(calendars, row.fire_at)
        policy = repeat.missed or client.settings.missed or missed.FIRE_ALL
        verdict = missed.ON_TIME if hit is not None else _missed(policy, row, repeat, calendars, now())
        skip_reason = f"skipped: calendar {hit[0].name} v{hit[0].version}" if hit is not None else verdict.reason
        # A skipped occurrence is not a fire: max_fires counts on from the one before it.
        basis = row if skip_reason is None else dataclasses.replace(row, seq=row.seq - 1)
        after = verdict.resume_after or row.fire_at
        following, passed = next_occurrence(basis, repeat, after, now(), client.poller_count, calendars)
        chained = await durably(
            self._ctx.log, "chain", lambda: self._store.chain_schedule(row, following, now()), self._metrics
        )
        if chained.outcome is Chain.CHANGED:
            self._ctx.log.info(
                "occurrence_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id
            )
            current = await self._current(row)
            # An owed auto-pause first, the mark after: a node that dies in between leaves this row
            # scheduled, and its next owner drops it again and finds the pause still owed (simulation seed
            # 421069: marked moved first, the pause lost with its node, nothing came back to it).
            await self._failures.owed(client, row, current, now())
            await self._mark_superseded(row, current, None)
            return chained
        runs = [Run(m.nominal, Status.SKIPPED, 0, None, m.reason) for m in verdict.passed]
        runs += [
            Run(x.first, Status.SKIPPED, 0, None, f"{x.reason()} until {x.until.isoformat()}")
            for x in passed[: cal.RECORDED_PER_STEP]
        ]
        if runs:
            await durably(
                self._ctx.log, "skipped_runs", lambda: self._store.add_runs(row.client_id, row.schedule_id, runs)
            )
        if skip_reason is None:
            fire.start_by = _send_by(policy, row, chained.following)
            fire.once = policy.policy == "fire_once"
            return chained
        if chained.outcome is Chain.ALREADY:
            # An owner before this one took the occurrence (in time, or not) and stopped before its outcome
            # was recorded: it may have sent it. The policy holds as of now; the run says what is known.
            skip_reason += "; an earlier owner may have sent it before it stopped"
        await self._record_skipped(row, skip_reason)
        return Chained(Chain.SKIPPED, chained.following)

    async def skip_late(self, fire: Fire) -> None:
        """A fire whose missed-fire policy's start deadline passed while it waited for its send slots (and,
        under fire_once, its next occurrence came due meanwhile): not sent, recorded skipped (the schedule
        moved on to its next occurrence when it was chained)."""
        row, now = fire.row, self._ctx.clock()
        assert fire.start_by is not None
        late_s = (now - fire.start_by).total_seconds()
        why = "its next occurrence came due" if fire.once else "its start deadline passed"
        await self._record_skipped(row, f"skipped: missed ({why} {late_s:.1f} s before it could go out)")

    async def _record_skipped(self, row: Schedule, reason: str) -> None:
        self._ctx.log.info("occurrence_skipped", schedule_id=str(row.schedule_id), fire_id=row.fire_id, reason=reason)
        now = self._ctx.clock()
        skipped = FireOutcome(
            row.client_id,
            row.schedule_id,
            row.location,
            Status.SKIPPED,
            0,
            now,
            reason,
            nominal_at=row.fire_at,
            seq=row.seq,
        )
        await durably(self._ctx.log, "record_skipped", lambda: self._store.record_outcomes([skipped]), self._metrics)

    async def _named_calendars(self, row: Schedule, names: Sequence[str]) -> list[cal.Calendar]:
        if not names:
            return []
        return await durably(
            self._ctx.log, "read_calendars", lambda: self._calendars.named(row.client_id, names), self._metrics
        )

    async def expand(self, fire: Fire) -> list[tuple[datetime, datetime]]:
        """A fire of a batch trigger produces its events: ``events`` rows of their own, spread over the
        window, each then fired (and retried, and dead-lettered) like any row. Returns where they landed,
        each minute with its earliest event's due time, in order: to be read into the plan from storage
        (not from memory: if this fire was expanded before, its outcome lost in a crash, some events
        went out already and their rows say so). Once they are, ``settle_expanded`` ends the fire."""
        row = fire.row
        options = row.options
        assert options is not None
        fire.fired_at = self._ctx.clock()
        events = _events_of(row, options)
        await durably(self._ctx.log, "events", lambda: self._store.add_events(events, self._ctx.clock()), self._metrics)
        earliest: dict[datetime, datetime] = {}
        for event in events:
            minute, due = event.location.minute, event.location.due_at
            earliest[minute] = min(due, earliest.get(minute, due))
        return sorted(earliest.items())

    async def settle_expanded(self, fire: Fire) -> None:
        """A batch trigger's fire whose events are stored and planned: it has succeeded."""
        row = fire.row
        options = row.options
        assert options is not None
        self._ctx.log.info("fire_expanded", fire_id=row.fire_id, events=options.events, window_ms=options.window_ms)
        result = DeliveryResult.delivered(row.attempts + 1)
        await self._outcomes.record(row, Status.SUCCEEDED, result, fire.sent_at)

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
        below = await self._below_change(row, current)
        await self._outcomes.record(row, Status.MOVED, result, self._ctx.clock(), below)

    async def _below_change(self, row: Schedule, current: Schedule | None) -> int | None:
        """The timestamp to mark ``row`` superseded at. The pointer naming this very row, still scheduled,
        is a client change in place (a pause, a cancel) whose pointer moved and whose status write is on
        its way, or was lost: the mark goes just below that write, so the change wins whenever it lands
        (simulation seed 200056: an auto-pause's write, slower than the mark, lost to it, and the schedule
        was left neither paused nor firing). None: the writer's clock."""
        if current is None or current.location != row.location:
            return None
        ref = await durably(
            self._ctx.log,
            "read_ref",
            lambda: self._store.get_ref(row.client_id, row.schedule_id),
            self._metrics,
        )
        if ref is None or ref.location != row.location or ref.write_ts is None or ref.changed_version != ref.version:
            return None
        return ref.write_ts - 1


def _send_by(policy: missed.Missed, row: Schedule, following: Schedule | None) -> datetime | None:
    """The latest moment an occurrence chained in time may still go out (None: any time). skip: its start
    deadline. fire_once: its start deadline, or, if later, when its next occurrence is meant due: past
    both, that one is the latest missed and fires once instead (simulation seed 633980: chained in time,
    its send held up 15 s by an outage, it went out though the one after it had come due meanwhile)."""
    if not policy.applies:
        return None
    deadline = missed.start_by(policy, row.schedule_id, row.fire_at, _jitter_ms(row))
    if policy.policy == "skip":
        return deadline
    if following is None:
        return None  # its timeline ends here: the latest there is
    return max(deadline, missed.meant_due(following.schedule_id, following.fire_at, _jitter_ms(following)))


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


# -- what a dead letter sets off ---------------------------------------------------------------------
#
# What a dead letter sets off beyond itself: the client's notice of it (``schema.notices``), and the
# auto-pause of a recurring schedule whose fires failed ``pause_after_failures`` times in a row.
#
# "In a row" is read from the schedule's runs: this occurrence ended dead-lettered, and so did each of the
# ``N - 1`` occurrences before it (a run that succeeded, or was skipped while the schedule was paused,
# breaks the streak; a resume starts a new one). The pause is the one a client's ``POST .../pause`` makes
# (a new version), written only if the schedule still stands as read: a client's change in between wins,
# and an auto-pause lost to a crash before it was written is made by the next failed fire.


class FailureNotices:
    """One instance's: called once a fire of its ended dead-lettered."""

    def __init__(self, store: Store, metrics: Metrics, log: FilteringBoundLogger) -> None:
        self._store = store
        self._metrics = metrics
        self._log = log
        # Schedules being paused, each with the fires waiting to: one pause at a time per schedule, so a
        # pause that finds the schedule paused at the next version knows it was its own (seed 300029:
        # two occurrences dead-lettered at once, both paused it, both said so).
        self._pausing: dict[UUID, tuple[asyncio.Lock, int]] = {}

    async def dead_lettered(self, client: Client, row: Schedule, result: DeliveryResult, at: datetime) -> None:
        if notices.is_notice(row):  # a notification that could not be delivered: its dead letter says so
            return
        fire_id = row.event_id or row.fire_id
        detail = {"fire_id": fire_id, "attempts": result.attempts, "error": result.error or "failed"}
        record = notices.notice(row.client_id, notices.DEAD_LETTERED, fire_id, at, detail, row.public_id)
        await self._notify(client, record)
        threshold = _pause_threshold(client, row)
        if threshold and await self._failed_in_a_row(row, threshold):
            await self._pause_once(client, row, threshold, at)

    async def owed(self, client: Client, row: Schedule, current: Schedule | None, at: datetime) -> None:
        """``row``, an occurrence dropped because the schedule changed, and the schedule's ``current`` row
        as read before ``row`` was marked: if that is ``row`` itself, still scheduled (or marked moved by
        an earlier owner), the change that dropped it has not landed; if also a recent streak of
        occurrences ended dead-lettered ``threshold`` times in a row with no auto-pause recorded for it
        and no client change recorded since, its auto-pause is owed, and is made now. It was begun (the
        pointer moved) and lost with the node that began it before its status write landed, and nothing
        else would finish it: the schedule was left neither paused nor firing (simulation seed 400359).
        The streak need not end just before ``row``: occurrences chained before the pause moved the
        pointer may have fired or still be in retry (seed 404743: the trigger two occurrences back, the
        one after it delivered, the next in retry). A pause that landed, or was made and then resumed by
        the client, leaves nothing owed."""
        threshold = _pause_threshold(client, row)
        if not threshold or row.seq <= threshold:
            return
        if current is None or current.location != row.location or current.status not in _LIMBO:
            return  # the change landed (a client's pause, cancel or edit) or moved the schedule elsewhere
        before = await self._fires_before(row, threshold + _OWED_RECENT_RUNS)
        last = _streak_end(before, threshold)
        if last is None:
            return
        trigger = dataclasses.replace(row, fire_at=last.nominal_at, seq=last.seq)  # the streak's last failure
        trail = await durably(
            self._log,
            "read_audit",
            lambda: self._store.page_schedule_audit(row.client_id, row.public_id, None, _OWED_AUDIT_ROWS),
            self._metrics,
        )
        if any(r.action == _AUTO_PAUSE and trigger.fire_id in r.changes for r in trail):
            return  # this streak's pause was made (and the client resumed the schedule since)
        if any(r.actor != notices.ACTOR and r.at >= last.nominal_at for r in trail):
            return  # a client changed the schedule since the streak: a pause dropped for that is not owed
        await self._pause_once(client, trigger, threshold, at)

    async def _pause_once(self, client: Client, row: Schedule, threshold: int, at: datetime) -> None:
        lock, waiting = self._pausing.get(row.public_id, (asyncio.Lock(), 0))
        self._pausing[row.public_id] = (lock, waiting + 1)
        try:
            async with lock:
                await self._pause(client, row, threshold, at)
        finally:
            lock, waiting = self._pausing[row.public_id]
            if waiting == 1:
                del self._pausing[row.public_id]
            else:
                self._pausing[row.public_id] = (lock, waiting - 1)

    async def _fires_before(self, row: Schedule, count: int) -> list[Run]:
        """The runs of the last ``count`` occurrences before ``row``'s that were not skipped, newest first.
        A skipped occurrence is no fire: one a calendar excluded keeps the sequence numbers of the fires
        around it in a row (it takes none of its own); the ones a pause skipped take theirs, so a streak
        never runs across a pause. Read a page of ``count`` at a time, at most ``_SKIPPED_PAGES`` more
        while skipped ones fill them."""
        found: list[Run] = []
        before = row.fire_at
        for _ in range(1 + _SKIPPED_PAGES):
            page = await durably(
                self._log,
                "read_runs",
                lambda b=before: self._store.list_runs(row.client_id, row.public_id, b, count),  # type: ignore[misc]
                self._metrics,
            )
            found += [run for run in page if run.status is not Status.SKIPPED]
            if len(found) >= count or len(page) < count:
                break
            before = page[-1].nominal_at
        return found[:count]

    async def _failed_in_a_row(self, row: Schedule, threshold: int) -> bool:
        """Whether the ``threshold - 1`` occurrences just before ``row``'s all ended dead-lettered."""
        if threshold == 1:
            return True
        before = await self._fires_before(row, threshold - 1)
        if len(before) != threshold - 1 or any(run.status is not Status.FAILED for run in before):
            return False
        # The runs just before it, none missing: an occurrence late or still in retry has no run yet, and
        # the one before it is not "in a row" with this one (simulation seed 200222).
        return row.seq <= 0 or [run.seq for run in before] == [row.seq - 1 - i for i in range(threshold - 1)]

    async def _pause(self, client: Client, row: Schedule, threshold: int, at: datetime) -> None:
        schedule_id = row.public_id
        current = await durably(
            self._log, "read_schedule", lambda: self._store.get_schedule(row.client_id, schedule_id), self._metrics
        )
        # A current row reading "moved" is one a poller marked superseded by a change that never landed
        # (this pause's own, lost with its node: ``owed``): scheduled to the client, and the pause adopts it.
        if current is None or current.status not in (Status.SCHEDULED, Status.MOVED) or current.repeat is None:
            return  # cancelled, paused, ended or changed into a one-time schedule meanwhile
        try:
            paused = await durably(
                self._log, "auto_pause", lambda: self._store.pause_schedule(current, at), self._metrics
            )
        except Conflict:
            # A client's change landed in between, or this pause did and its answer was lost (then retried):
            # a schedule paused at the very next version is this pause's (seed 200531: its last read failed
            # after it landed, and the pause went unrecorded and unannounced).
            landed = await durably(
                self._log, "read_schedule", lambda: self._store.get_schedule(row.client_id, schedule_id), self._metrics
            )
            if landed is None or landed.status is not Status.PAUSED or landed.version != current.version + 1:
                self._log.info("auto_pause_dropped_schedule_changed", schedule_id=str(schedule_id))
                return
            paused = landed
        self._log.warning(
            "schedule_auto_paused", client_id=row.client_id, schedule_id=str(schedule_id), failed_in_a_row=threshold
        )
        detail = {"failed_in_a_row": threshold, "fire_id": row.fire_id, "version": paused.version}
        record = notices.notice(row.client_id, notices.AUTO_PAUSED, str(schedule_id), at, detail, schedule_id)
        # A change of the schedule's too: in its audit trail, by tickd, with the version it left.
        change = dataclasses.replace(record, action=_AUTO_PAUSE, version=paused.version)
        await durably(self._log, "audit", lambda: self._store.record_audit([change]), self._metrics)
        await self._notify(client, record)

    async def _notify(self, client: Client, record: AuditRecord) -> None:
        await notify_durably(self._store, self._log, self._metrics, client, record)


async def notify_durably(
    store: Store, log: FilteringBoundLogger, metrics: Metrics, client: Client, record: AuditRecord
) -> None:
    """A notice tickd made (``schema.notices``) into the client's feed and to its target, through store
    outages (``durably``)."""
    sent = notices.delivery(client, record)  # made once: a retried write writes the same schedule
    await durably(log, "notice", lambda: store.record_notice(record), metrics)
    if sent is not None:
        await durably(log, "notice_delivery", lambda: store.create_schedule(sent, record.at), metrics)
    metrics.notices.labels(record.action).inc()


# The audit action of an auto-pause, and how many of a schedule's latest records ``owed`` reads for one.
_AUTO_PAUSE = "schedule.auto_pause"
_OWED_AUDIT_ROWS = 20
# How many runs before a dropped occurrence ``owed`` looks through for the streak, beyond the streak.
_OWED_RECENT_RUNS = 8
# Pages of skipped runs a streak is read past (each page as long as the streak): a chain step records at
# most ``calendars.RECORDED_PER_STEP`` exclusions.
_SKIPPED_PAGES = 4
# A current row that is the dropped occurrence's own, its change not landed.
_LIMBO = (Status.SCHEDULED, Status.MOVED)


def _streak_end(runs: Sequence[Run], threshold: int) -> Run | None:
    """Of ``runs`` (newest first), the latest that ends ``threshold`` consecutive occurrences (by
    sequence number, none missing) all dead-lettered; None if there is none."""
    for i, run in enumerate(runs):
        streak = runs[i : i + threshold]
        if [r.seq for r in streak] == [run.seq - j for j in range(threshold)] and all(
            r.status is Status.FAILED for r in streak
        ):
            return run
    return None


def _pause_threshold(client: Client, row: Schedule) -> int:
    """Fires in a row that pause ``row``'s schedule: its own setting, else its client's; 0: never. Only a
    recurring schedule's occurrences count (an event is a part of its fire, not a fire)."""
    options = row.options
    if options is None or options.repeat is None or options.event is not None:
        return 0
    if options.pause_after_failures is not None:
        return options.pause_after_failures
    return client.settings.pause_after_failures


def _jitter_ms(row: Schedule) -> int:
    return row.options.jitter_ms if row.options is not None else 0


def _missed(
    policy: missed.Missed, row: Schedule, repeat: Repeat, calendars: Sequence[cal.Calendar], now: datetime
) -> missed.Decision:
    """The occurrence's fate under its missed-fire policy."""
    if not policy.applies:
        return missed.ON_TIME
    return missed.decide(
        policy,
        repeat.recurrence(),
        row.schedule_id,
        row.fire_at,
        _jitter_ms(row),
        now,
        fired=row.seq,
        calendars=calendars,
    )


# -- recording its outcome ----------------------------------------------------------------------------


def tries_of(row: Schedule, result: DeliveryResult, sent_at: datetime) -> tuple[Try, ...]:
    """The attempts one delivery call made of ``row``'s fire, the first sent at ``sent_at``: the first due
    at the row's due time, an in-memory retry due when it went out (its backoff ended then); the last
    ended as the call did, the others were retried. None if the call made no attempt (not sent)."""
    notes = result.sent or (((result.attempts, 0.0, result.error),) if result.attempts > row.attempts else ())
    final = "delivered" if result.ok else "retry" if result.retriable else "failed"
    tries = []
    for index, (attempt, after_s, error) in enumerate(notes):
        at = timing.truncate_ms(sent_at + timedelta(seconds=after_s))
        due = row.location.due_at if index == 0 else at
        tries.append(Try(attempt, due, at, final if index == len(notes) - 1 else "retry", error))
    return tuple(tries)


def tried(row: Schedule, result: DeliveryResult, sent_at: datetime) -> Schedule:
    """``row`` with the attempts of this call added to those it carries (bounded)."""
    return dataclasses.replace(row, tries=add_tries(row.tries, tries_of(row, result, sent_at)))


def outcome_of(
    row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime, write_ts: int | None = None
) -> FireOutcome:
    """What storage records of one fire of ``row`` (at ``write_ts``, if given: ``FireOutcome.write_ts``)."""
    options = row.options
    events, window_ms = options.expansion if options is not None else (0, 0)
    return FireOutcome(
        row.client_id,
        row.schedule_id,
        row.location,
        status,
        result.attempts,
        fired_at,
        result.error,
        nominal_at=row.fire_at if options is not None and options.in_runs else None,
        seq=row.seq,
        event=options.event if options is not None else None,
        events=events,
        window_ms=window_ms,
        run_of=options.retry_of if options is not None else None,
        tries=add_tries(row.tries, tries_of(row, result, fired_at)),
        write_ts=write_ts,
        backfill=options is not None and options.backfill,
    )


class OutcomeWriter:
    def __init__(self, store: Store, flush_s: float, log: FilteringBoundLogger) -> None:
        self._store = store
        self._flush_s = flush_s
        self._log = log
        # Outcomes waiting for the next batch write, each with the future its fire waits on.
        self._waiting: list[tuple[FireOutcome, asyncio.Future[None]]] = []
        self._queued = asyncio.Event()

    async def record(
        self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime, write_ts: int | None = None
    ) -> None:
        """Queue the outcome for the next per-partition batch and wait until it is durable."""
        outcome = (outcome_of(row, status, result, fired_at, write_ts), asyncio.get_running_loop().create_future())
        self._waiting.append(outcome)
        self._queued.set()
        await asyncio.shield(outcome[1])

    async def record_many(self, outcomes: Sequence[tuple[Schedule, Status, DeliveryResult, datetime]]) -> None:
        """``record`` for a group of fires that wait together: queued at once (so one flush writes them
        all), one future for the group."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.extend((outcome_of(*outcome), done) for outcome in outcomes)
        self._queued.set()
        await asyncio.shield(done)

    @property
    def waiting(self) -> int:
        """Outcomes queued and not written yet."""
        return len(self._waiting)

    async def run(self) -> None:
        """Flush ``flush_s`` after the first outcome queued since the last flush (the others queued
        meanwhile go in the same batches), until cancelled; idle, it does not wake up."""
        while True:
            await self._queued.wait()
            await asyncio.sleep(self._flush_s)
            self._queued.clear()
            await self.flush()
            if self._waiting:  # not written (storage unavailable), or queued during the write
                self._queued.set()

    async def flush(self) -> None:
        """Write the waiting outcomes (one batch per partition); on a storage error they wait for the next
        flush, their fires still in flight, so no minute closes over them."""
        if not self._waiting:
            return
        batch, self._waiting = self._waiting, []
        try:
            await self._store.record_outcomes([outcome for outcome, _ in batch])
        except StoreUnavailable as exc:
            self._log.warning("outcomes_not_written", rows=len(batch), error=str(exc))
            self._waiting = batch + self._waiting
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)
