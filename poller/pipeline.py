"""The delivery pipeline of one instance: it takes each due row from the firing plan and fires it.

A fire goes through: chain (a recurring occurrence first writes its next one), expand (a batch
trigger writes its events instead of calling back), throttle (an event waits for its policy's token),
deliver (HTTP or Kafka, through the router), settle (outcome, durable retry, or dead letter). Each fire
runs in a task of its own (or an HTTP worker's turn), bounded by the instance's in-flight slots; it
holds the node's send slots (``poller.slots``: its client's share, fair between clients) only while it
goes out, never while it waits for a throttle token or its client's turn. Each fire ends in exactly one
of three ways:
- its outcome is recorded (through the ``OutcomeWriter``, which it waits on);
- it is durably requeued (a retry row in storage; or, when the schedule changed meanwhile, its row is
  recorded MOVED, or keeps the client's CANCELLED or PAUSED);
- it raises (``LeaseLost``, a storage error other than ``StoreUnavailable``, a bug outside sending and
  settling, a cancel at the drain deadline): its minute is poisoned in the plan and the plan keeps the
  error, on which the checkpointer stops the instance (``InstanceCrashed``) so the next owner fires it.
``StoreUnavailable`` is retried in place (``durably``), with the fire still in flight so its minute
cannot close.

A fire's fault stays with that fire: whatever its endpoint answers is clamped before it is used (a
Retry-After to the retry policy's cap), an unexpected error from a send is a failed attempt of that
fire (``fire_failed_unexpectedly``: retried, and dead-lettered after ``max_attempts``), and one while
settling it ends it as a dead letter naming the error (``fire_settle_failed``). Stopping the instance
there would make its next owner send the same row again, at the same attempt, in a loop; only
``LeaseLost`` and storage errors (``_STOPS``) still do. These are the only errors caught here to go on,
each logged with its traceback.

Before a durable retry of a one-time schedule is sent, its schedule is read again: a cancel, pause or
change accepted while the fire was in retry (the API takes them at any time then) drops the fire, its
row marked as the change left it. An attempt already on the wire when the change lands may still arrive.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from structlog.typing import FilteringBoundLogger

from tickd.poller import recurring, stats
from tickd.poller.callbacks.backoff import clamp_wait_s
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.durable import durably
from tickd.poller.errors import Lease, LeaseLost
from tickd.poller.loader import MinuteLoader
from tickd.poller.metrics import Metrics
from tickd.poller.outcomes import OutcomeWriter
from tickd.poller.plan import FiringPlan, OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.stats import TenantStats
from tickd.poller.throttle import ThrottleGate
from tickd.schema import guard, timing
from tickd.schema.errors import Conflict, TickdError
from tickd.schema.model import (
    Chain,
    Chained,
    Client,
    DeadLetter,
    EventOf,
    HttpCallback,
    KafkaCallback,
    Location,
    Options,
    Schedule,
    Status,
    Token,
    callback_type,
)
from tickd.schema.store import Store

# Events built between two yields to the event loop while a batch trigger's fire is expanded.
_EXPAND_SLICE = 256

Clock = Callable[[], datetime]
# What still stops the instance when a fire's send or settle raises it: the node lost the instance, or
# storage failed past ``durably``'s retries. Any other error is that fire's own outcome.
_STOPS = (LeaseLost, TickdError)


class DeliveryPipeline:
    def __init__(
        self,
        client: Callable[[], Client],
        store: Store,
        router: CallbackRouter,
        plan: FiringPlan,
        loader: MinuteLoader,
        outcomes: OutcomeWriter,
        *,
        settings: PollerSettings,
        metrics: Metrics,
        clock: Clock,
        slots: SendSlots,
        gate: ThrottleGate,
        rng: random.Random,
        lease: Lease,
        log: FilteringBoundLogger,
        stats: TenantStats | None = None,
    ) -> None:
        self._stats = stats  # the node's per-tenant statistics (GET /v1/stats); None: not counted
        self._event_letters: dict[UUID, datetime] = {}  # per batch schedule, its last event letter's time
        self._client = client  # read at each use: the node swaps in the client's latest settings
        self._store = store
        self._router = _ContainedRouter(router, settings.retry.max_attempts, log)
        self._plan = plan
        self._loader = loader
        self._outcomes = outcomes
        self._s = settings
        self._metrics = metrics
        self._now = clock
        self._inflight = 0  # fires of this instance in flight, at most settings.instance_max_inflight
        self._room = asyncio.Event()  # set when a fire ends
        self._slots = slots  # the node's send slots, taken by a fire only once it can go out
        self._gate = gate
        self._rng = rng
        self._lease = lease
        self._log = log
        self._deliveries: set[asyncio.Task[None]] = set()  # groups, and fires with a task of their own
        # The instance's HTTP workers and their queue: its HTTP fires go through them, one after another
        # per worker, not in a task each. As many as a client may have requests out per node, so a slow
        # endpoint holds back only this client's HTTP fires.
        self._queue: asyncio.Queue[tuple[Schedule, OpenMinute]] = asyncio.Queue()
        self._workers: set[asyncio.Task[None]] = set()
        self._worker_limit = settings.http.per_client_limit
        self._waiting_workers = 0  # workers waiting for a row
        self._idle = asyncio.Event()  # set when no fire is in flight

    # -- in flight ------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        return self._inflight > 0

    @property
    def inflight_count(self) -> int:
        """Fires taken off the plan and not ended yet (delivering, or waiting for their outcome write)."""
        return self._inflight

    async def wait(self, timeout_s: float) -> None:
        """Until the fires in flight have ended, or ``timeout_s`` passes."""
        if self._inflight == 0:
            return
        self._idle.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            pass

    def abandon(self) -> None:
        """Cancel the fires still in flight, and drop those queued for a worker: their minutes are
        poisoned, the next owner fires them."""
        for task in [*self._deliveries, *self._workers]:
            task.cancel()
        while not self._queue.empty():
            _, state = self._queue.get_nowait()
            self._release(1)
            self._plan.end_fire(state, settled=False)

    # -- firing ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fire the rows as they come due, until cancelled (fires in flight go on: see ``abandon``).

        Each pass takes every row due by now (up to the instance's free slots): the plain Kafka ones (no
        chain, expansion or throttle first) go out together as one group, HTTP ones that never wait long
        go to the instance's workers, and the rest (throttled events, batch triggers, Kafka fires with a
        chain first) each get a task of its own: a broker outage, retried in place for up to its budget,
        or a throttle's wait, then holds nothing else back.

        Only the group's rows take the node's send slots here (they go out at once); every other fire
        takes its own when it can go out (``_fire``), so a fire waiting holds none another tenant needs."""
        limit = self._s.instance_max_inflight
        while True:
            while self._inflight >= limit:
                await self._room.wait()
                self._room.clear()
            group: list[tuple[Schedule, OpenMinute]] = []
            try:
                for row in await self._plan.take_due(limit - self._inflight):
                    groupable = self._groupable(row)  # once: the slots taken below are the group's
                    if groupable and not self._slots.try_take(row):
                        # No slot free to this client now: the rows gathered go out first (they hold theirs),
                        # then this one waits holding none, so two groups never wait on each other's slots.
                        self._send_group(group)
                        group = []
                        await self._slots.take(row)
                    self._inflight += 1
                    state = self._plan.start_fire(row)
                    if groupable:
                        group.append((row, state))
                    elif isinstance(row.callback, HttpCallback) and not self._waits(row):
                        self._enqueue(row, state)
                    else:
                        self._spawn(self._deliver(row, state))
            except BaseException:
                # Cancelled while waiting for a send slot: the group never goes out. Its slots go back
                # (the node's are shared) and its minutes are poisoned: the next owner fires those rows.
                self._release(len(group))
                for row, state in group:
                    self._slots.give_back(row)
                    self._plan.end_fire(state, settled=False)
                raise
            self._send_group(group)

    def _send_group(self, group: list[tuple[Schedule, OpenMinute]]) -> None:
        if group:
            self._spawn(self._group_holding_slots(group))

    async def _group_holding_slots(self, group: list[tuple[Schedule, OpenMinute]]) -> None:
        """A group's send slots (taken in ``run``) go back once the group has ended."""
        try:
            await self._deliver_group(group)
        finally:
            for row, _ in group:
                self._slots.give_back(row)

    def _groupable(self, row: Schedule) -> bool:
        """Whether a due row goes out with the pass's group: a Kafka fire with nothing to do first."""
        if not isinstance(row.callback, KafkaCallback) or (row.repeat is not None and row.attempts == 0):
            return False
        return not self._waits(row) and not self._plan.delivered_before(row.event_id or row.fire_id)

    @staticmethod
    def _waits(row: Schedule) -> bool:
        """Whether a fire may wait long before it goes out (a throttled event waits for a token; a batch
        trigger writes its events): those get a task each, so they never hold a worker."""
        options = row.options
        return options is not None and (options.batch or options.throttle is not None)

    def _enqueue(self, row: Schedule, state: OpenMinute) -> None:
        self._queue.put_nowait((row, state))
        if self._queue.qsize() > self._waiting_workers and len(self._workers) < self._worker_limit:
            worker = asyncio.create_task(self._work())
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    async def _work(self) -> None:
        """One worker: fires queued rows one after another until cancelled (``abandon``). A fire that
        raises stops the instance (as a task of its own would, see ``_delivery_done``); the worker goes
        on with the next, which the instance's stop will poison or abandon."""
        while True:
            self._waiting_workers += 1
            try:
                row, state = await self._queue.get()
            finally:
                self._waiting_workers -= 1
            try:
                await self._deliver(row, state)
            except Exception as exc:
                self._plan.fire_crashed(exc)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._deliveries.add(task)
        task.add_done_callback(self._delivery_done)

    def _release(self, count: int) -> None:
        """``count`` fires of this instance ended (their send slots are given back where they were taken)."""
        self._inflight -= count
        self._room.set()
        if self._inflight == 0:
            self._idle.set()

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        """A delivery that raised stops the instance loudly (the checkpointer re-raises it): its minute is
        poisoned, so the next owner fires it again. Cancelled deliveries (a drain deadline) poison too."""
        self._deliveries.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._plan.fire_crashed(exc)

    async def _deliver(self, row: Schedule, state: OpenMinute) -> None:
        """Fire one row. It ends in exactly one of: its outcome stored, its retry stored (or the schedule
        changed under it), or an exception that poisons its minute and stops the instance."""
        settled = False
        guard.set_guard(self._lease_guard())  # this task's store requests only
        try:
            if await self._still_wanted(row):
                await self._fire(row)
            settled = True
        finally:
            if not settled:
                self._log.error("fire_not_settled", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            self._release(1)
            self._plan.end_fire(state, settled)

    async def _deliver_group(self, group: list[tuple[Schedule, OpenMinute]]) -> None:
        """Fire a pass's plain rows together. Each ends as a fire of its own does (``_deliver``): its
        outcome stored, its retry stored, or unsettled (its minute poisoned) when the group raises."""
        settled = [False] * len(group)
        check = self._lease_guard()
        guard.set_guard(check)
        try:
            kept = await self._wanted_of(group, settled)
            kept_settled = [False] * len(kept)
            try:
                await self._fire_group([group[i][0] for i in kept], kept_settled, check)
            finally:
                for i, done in zip(kept, kept_settled, strict=True):
                    settled[i] = done
        finally:
            if not all(settled):
                first = group[settled.index(False)][0]
                self._log.error("fires_not_settled", fires=settled.count(False), first_fire_id=first.fire_id)
            self._release(len(group))
            for (_, state), done in zip(group, settled, strict=True):
                self._plan.end_fire(state, done)

    async def _fire_group(self, rows: list[Schedule], settled: list[bool], check: Callable[[], None]) -> None:
        fired_at = self._now()
        lateness: list[float | None] = []
        for row in rows:
            late = max(0.0, (fired_at - row.fire_at).total_seconds()) if row.attempts == 0 else None
            if late is not None:
                self._metrics.lateness.labels(row.client_id).observe(late)
            lateness.append(late)
        if not self._lease():
            raise LeaseLost(f"the node's lease ran out before {len(rows)} fires went out")
        results = await self._router.deliver_many(rows, fired_at)
        delivered: list[int] = []
        for i, (row, result) in enumerate(zip(rows, results, strict=True)):
            if result.ok:
                self._plan.note_delivered(row.event_id or row.fire_id)
                delivered.append(i)
            self._metrics.callbacks.labels(row.client_id, callback_type(row.callback), _outcome(result)).inc()
        if delivered:
            await self._outcomes.record_many([(rows[i], Status.SUCCEEDED, results[i], fired_at) for i in delivered])
            for i in delivered:
                settled[i] = True
        failed = [i for i, result in enumerate(results) if not result.ok]
        if failed:

            async def settle(i: int) -> None:
                # A task of its own (gather): its writes are the fire's too, under the same guard (seed
                # 1109: unguarded, a paused node's durable retry landed after the next owner's delivery).
                guard.set_guard(check)
                await self._settle(rows[i], results[i], fired_at)
                settled[i] = True

            # Each failure settles on its own (a retry row, a dead letter); one that raises leaves only
            # its own fire unsettled, and the first such error stops the instance (see _deliver).
            errors = await asyncio.gather(*(settle(i) for i in failed), return_exceptions=True)
            first_error = next((e for e in errors if isinstance(e, BaseException)), None)
            if first_error is not None:
                raise first_error
        if self._stats is not None:
            for row, result, late in zip(rows, results, lateness, strict=True):
                outcome = stats.DELIVERED if result.ok else stats.RETRIED if result.retriable else stats.FAILED
                self._stats.attempt(row.client_id, fired_at, outcome, late)

    def _lease_guard(self) -> Callable[[], None]:
        """The check before each store request of a fire (``schema.guard``): none once the node's lease
        is gone, nor once it has lapsed since the fire began, even if renewed since (the instance may be
        another node's by then, its fire delivered)."""
        began = asyncio.get_running_loop().time()

        def check() -> None:
            if not self._lease(began):
                raise LeaseLost("the node's lease ran out in the middle of a fire's writes; left to the next owner")

        return check

    async def _fire(self, row: Schedule) -> None:
        if row.repeat is not None and row.attempts == 0 and not await self._chain(row):
            return
        if row.options is not None and row.options.batch:
            await self._expand(row)
            return
        key = row.event_id or row.fire_id
        if self._plan.delivered_before(key):
            # Delivered by this owner already; this row of it is a stale owner's retry that landed late
            # (simulation seed 8702). Recorded as the success it was, not delivered twice.
            self._log.info("fire_already_delivered", schedule_id=str(row.schedule_id), fire_id=key)
            await self._outcomes.record(row, Status.SUCCEEDED, DeliveryResult.delivered(row.attempts), self._now())
            return
        token = await self._throttle(row)
        result, fired_at, lateness_s = await self._send(row, token)
        if token is not None:
            if result.ok or result.maybe_received:
                # Out, or maybe out (a timeout): the subscriber may be working on it, so the token stays
                # held until released or timed out (a retry of the event waits for a slot of its own).
                self._gate.delivered(token)
            else:
                await self._gate.not_delivered(token)
        if result.ok:
            self._plan.note_delivered(key)
        self._metrics.callbacks.labels(row.client_id, callback_type(row.callback), _outcome(result)).inc()
        await self._settle(row, result, fired_at)
        if self._stats is not None:
            outcome = stats.DELIVERED if result.ok else stats.RETRIED if result.retriable else stats.FAILED
            self._stats.attempt(row.client_id, fired_at, outcome, lateness_s)

    async def _send(self, row: Schedule, token: Token | None) -> tuple[DeliveryResult, datetime, float | None]:
        """Send one fire: the result, when it went out, and its lateness (a first attempt's). It holds the
        node's send slots (its client's channel slot, then the node's) only from when it can go out, its
        throttle token in hand, until it is out: a fire waiting for a token or for its client's turn
        holds nothing another tenant needs."""
        await self._take_slots(row, token)
        try:
            fired_at = self._now()
            lateness_s = max(0.0, (fired_at - row.fire_at).total_seconds()) if row.attempts == 0 else None
            if lateness_s is not None:
                self._metrics.lateness.labels(row.client_id).observe(lateness_s)
            if not self._lease():
                if token is not None:
                    await self._gate.not_delivered(token)
                raise LeaseLost(f"the node's lease ran out before {row.fire_id} went out")
            return await self._router.deliver(row, row.attempts + 1, fired_at), fired_at, lateness_s
        finally:
            self._slots.give_back(row)

    async def _take_slots(self, row: Schedule, token: Token | None) -> None:
        """Wait for the fire's send slots; cancelled meanwhile (a drain deadline), its unused token goes back."""
        try:
            await self._slots.take(row)
        except asyncio.CancelledError:
            if token is not None:
                await asyncio.shield(self._gate.not_delivered(token))
            raise

    # -- recurring schedules ----------------------------------------------------------------------------

    async def _chain(self, row: Schedule) -> bool:
        """Before a recurring occurrence's first attempt: move the schedule on to its next occurrence
        (computed from this one's nominal time, so a late fire never shifts the timeline). False if the
        client changed or cancelled the schedule since this row was written: then it must not fire."""
        assert row.repeat is not None
        following = recurring.following(row, row.repeat, row.fire_at, self._now(), self._client().poller_count)
        outcome: list[Chained] = []

        async def write() -> None:
            outcome.append(await self._store.chain_schedule(row, following, self._now()))

        await durably(self._log, "chain", write, self._metrics)
        chained = outcome[-1]
        if chained.outcome is Chain.CHANGED:
            self._log.info("occurrence_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            await self._superseded(row)
            return False
        if chained.following is not None:
            self._plan.consider(chained.following)
        return True

    async def _superseded(self, row: Schedule, result: DeliveryResult | None = None) -> None:
        """A fire dropped because the client changed the schedule ends with its row MOVED, unless the
        change already marked it (a cancel keeps the row CANCELLED, a pause PAUSED). A change that half-landed
        (its pointer swapped, its rows not written) marks nothing, and the row must not stay "scheduled"."""
        await self._mark_superseded(row, await self._current(row), result)

    async def _current(self, row: Schedule) -> Schedule | None:
        """The schedule's current row as stored (through its pointer), read durably."""
        found: list[Schedule | None] = []

        async def read() -> None:
            found.append(await self._store.get_schedule(row.client_id, row.schedule_id))

        await durably(self._log, "read_schedule", read, self._metrics)
        return found[-1]

    async def _mark_superseded(self, row: Schedule, current: Schedule | None, result: DeliveryResult | None) -> None:
        if current is not None and current.location == row.location and current.status is not Status.SCHEDULED:
            return
        if result is None:
            result = DeliveryResult.failed(row.attempts, "superseded: the schedule was changed", retriable=False)
        await self._outcomes.record(row, Status.MOVED, result, self._now())

    # -- retries a client stopped -----------------------------------------------------------------------

    async def _still_wanted(self, row: Schedule) -> bool:
        """Before a durable retry's attempt of a one-time schedule: whether the schedule still stands as
        this row. A cancel, pause or change of a schedule in retry is accepted at any time (the API's
        mutation guard does not apply to it), so it may land after the plan's last re-read of hot marks;
        this read is what honours it. The dropped fire is recorded as ``_superseded`` records it. An
        attempt already on the wire when the change lands may still arrive (at-least-once), and its
        outcome is then recorded as it ended."""
        if not _rechecked(row):
            return True
        current = await self._current(row)
        if current is not None and current.location == row.location and current.status is Status.SCHEDULED:
            return True
        self._log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
        await self._mark_superseded(row, current, None)
        return False

    async def _wanted_of(self, group: list[tuple[Schedule, OpenMinute]], settled: list[bool]) -> list[int]:
        """The indexes of a group's rows still wanted (``_still_wanted``); those dropped are settled."""
        rechecked = [i for i, (row, _) in enumerate(group) if _rechecked(row)]
        if not rechecked:
            return list(range(len(group)))
        wanted = await asyncio.gather(*(self._still_wanted(group[i][0]) for i in rechecked))
        for i, keep in zip(rechecked, wanted, strict=True):
            settled[i] = not keep
        return [i for i, done in enumerate(settled) if not done]

    # -- batch triggers -------------------------------------------------------------------------------

    async def _throttle(self, row: Schedule) -> Token | None:
        """An event of a throttled schedule waits here for a token of its policy (in due-time order)."""
        options = row.options
        if options is None or options.throttle is None or options.event is None:
            return None
        event_id = row.event_id
        assert event_id is not None
        return await self._gate.acquire(row.client_id, options.throttle, event_id, row.location.due_at)

    async def _expand(self, row: Schedule) -> None:
        """A fire of a batch trigger produces its events: ``events`` rows of their own, spread over the
        window, each then fired (and retried, and dead-lettered) like any row. The fire itself counts
        as succeeded once its events are stored."""
        options = row.options
        assert options is not None
        fired_at = self._now()
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
                )
            )
        await durably(self._log, "events", lambda: self._store.add_events(events, self._now()), self._metrics)
        # Planned from storage, not from memory: if this fire was expanded before (its outcome was lost
        # in a crash), some events went out already and their rows say so.
        earliest: dict[datetime, datetime] = {}
        for event in events:
            minute, due = event.location.minute, event.location.due_at
            earliest[minute] = min(due, earliest.get(minute, due))
        for minute, due in sorted(earliest.items()):
            await self._loader.read(minute, due)
        self._log.info("fire_expanded", fire_id=fire_id, events=len(events), window_ms=options.window_ms)
        await self._outcomes.record(row, Status.SUCCEEDED, DeliveryResult.delivered(row.attempts + 1), fired_at)

    # -- settling -------------------------------------------------------------------------------------

    async def _settle(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> None:
        """Make the fire's outcome durable. Storage errors are retried here, with the fire still in flight
        so its minute cannot close: a fire whose outcome was never written must not be checkpointed past.

        Any other error while settling (a bug, a value nobody foresaw) ends this fire as a dead letter
        naming it, logged with its traceback: stopping the instance would have its next owner fire the row
        again and fail the same way, in a loop. ``LeaseLost`` and storage errors still stop it."""
        try:
            await self._settle_as_told(row, result, fired_at)
        except _STOPS:
            raise
        except Exception as exc:
            self._log.exception("fire_settle_failed", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            reason = f"internal error while settling: {type(exc).__name__}"
            await self._bury(row, DeliveryResult.failed(result.attempts, reason, retriable=False), fired_at)

    async def _settle_as_told(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> None:
        if result.ok:
            await self._outcomes.record(row, Status.SUCCEEDED, result, fired_at)
        elif not self._lease():
            # Paused or cut off while delivering: the next owner may have fired it by now. A retry or a
            # dead letter written from here would repeat (or bury) that fire; it is left to the next owner.
            raise LeaseLost(
                f"the node's lease ran out while {row.fire_id} was out; its retry is left to the next owner"
            )
        elif result.retriable:
            # The dispatcher owns the give-up rule (HTTP ends at max_attempts; Kafka outages never do).
            due = self._now() + timedelta(seconds=self._retry_wait_s(result))
            retried: list[bool] = []
            await durably(self._log, "requeue", lambda: self._retry_later(row, result, due, retried), self._metrics)
            if not retried[-1]:
                # The client changed the schedule since (or a change of theirs half-landed): this fire
                # of the old version ends here, and its row must say so, not stay "scheduled" (a cancel
                # or pause keeps its own mark).
                await self._superseded(row, result)
        else:
            await self._bury(row, result, fired_at)

    def _retry_wait_s(self, result: DeliveryResult) -> float:
        """Seconds until a durable retry: the server's wait clamped to the policy's cap (whoever read it,
        a value beyond it would park the fire for years, or overflow the due time), else the backoff."""
        policy = self._s.retry
        asked = None if result.retry_after_s is None else clamp_wait_s(result.retry_after_s, policy.cap_s)
        return max(asked or policy.delay_s(result.attempts, self._rng), 0.05)

    async def _bury(self, row: Schedule, result: DeliveryResult, fired_at: datetime) -> None:
        """A fire that failed for good: its row FAILED, and a dead letter."""
        await self._outcomes.record(row, Status.FAILED, result, fired_at)
        failed_at = self._letter_time(row, fired_at)
        await durably(self._log, "dead_letter", lambda: self._dead_letter(row, result, failed_at), self._metrics)

    async def _retry_later(self, row: Schedule, result: DeliveryResult, due: datetime, retried: list[bool]) -> None:
        """A durable retry: the fire moves to a later due time in storage, surviving this node. Calling
        it again with the same ``due`` after a storage error is safe (the store finishes its own move).
        Appends to ``retried`` whether a retry was stored (False: the schedule changed meanwhile)."""
        try:
            retry = await self._store.requeue_schedule(row, due, result.attempts, result.error or "retry", self._now())
        except Conflict:
            self._log.info("retry_dropped_schedule_changed", schedule_id=str(row.schedule_id))
            retried.append(False)
            return
        retried.append(True)
        self._plan.consider(retry)  # planned at once if its minute is open here (else read when it opens)
        self._log.info(
            "callback_retry_scheduled",
            schedule_id=str(row.schedule_id),
            attempts=result.attempts,
            due_at=due.isoformat(),
            error=result.error,
        )

    def _letter_time(self, row: Schedule, fired_at: datetime) -> datetime:
        """A dead letter's key is (failed_at in ms, schedule id): the events of one batch fire share the
        schedule id, so an event's letter is moved on by a millisecond past the last one this instance
        wrote for the same schedule, rather than overwrite it (found by the SDK's tests)."""
        at = timing.truncate_ms(fired_at)
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
        )
        await self._store.add_dead_letter(letter)
        self._metrics.dead_letters.labels(callback_type(row.callback)).inc()
        self._log.warning(
            "callback_dead_lettered",
            schedule_id=str(row.schedule_id),
            fire_id=letter.fire_id,
            attempts=result.attempts,
            error=result.error,
        )


def _rechecked(row: Schedule) -> bool:
    """Whether a row is read again before it fires: a durable retry of a one-time schedule (the rows a
    client's pointer names; a recurring schedule's occurrences and events are kept by the chain's
    compare-and-set and their parent instead)."""
    return row.attempts > 0 and row.repeat is None and row.event_id is None


class _ContainedRouter:
    """The router as the pipeline sends through it: an exception a send raises that is not the instance's
    to stop on (a bug in a dispatcher, a value nobody foresaw) is that fire's failed attempt, logged with
    its traceback (``fire_failed_unexpectedly``). It is retriable until ``max_attempts``, then final: a
    bug neither stops the instance (whose next owner would send the row again at the same attempt, in a
    loop) nor retries for ever."""

    def __init__(self, router: CallbackRouter, max_attempts: int, log: FilteringBoundLogger) -> None:
        self._router = router
        self._max_attempts = max_attempts
        self._log = log

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        try:
            return await self._router.deliver(schedule, attempt, fired_at)
        except _STOPS:
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
        except _STOPS:
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


def _outcome(result: DeliveryResult) -> str:
    if result.ok:
        return "succeeded"
    return "retry" if result.retriable else "failed"
