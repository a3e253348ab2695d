"""The fire pipeline of one instance: it takes each due row off the firing plan as a ``Fire`` and moves it
through fixed steps, in this order:

    take (row -> fire)  ->  before it goes out: re-read (a durable retry), chain (a recurring
    occurrence writes its next one), expand (a batch trigger writes its events and ends there)
    ->  throttle  ->  send (one, or a pass's group)  ->  settle  ->  end (in the plan)

The pipeline conducts: each step returns what it made, and the pipeline hands it on: a chained next
occurrence or a stored retry to the plan (``_consider``), a batch trigger's event minutes to the loader,
which reads them into the plan from storage. A pass's plain Kafka rows (nothing to do before they go out)
take the same steps together: ``_fire_group`` is ``_fire`` for many, the steps they skip being those such
rows have none of. The parts, each with one job: ``slots.FireLanes`` (fires in flight, the instance's HTTP
workers), and in ``poller.fire``, beside the fire itself, ``Sender`` (throttle token, the node's send
slots, lease check, delivery) and ``Settler`` (what a fire writes). A fire's store requests are checked
against the lease it began under: the pipeline sets that check on the fire's task (``schema.guard``).

A paused row due where its timed pause ends (``Schedule.wakes``) is no fire: taken like one (it holds its
place in the minute until it ends), it resumes the schedule (``poller.wakes``) and nothing is sent.

Each fire ends in exactly one of three ways, all written by the settler: delivered (its outcome recorded),
retried later (a retry row stored; or, when the schedule changed meanwhile, its row MOVED, CANCELLED or
PAUSED), or dead-lettered. A fire whose steps raise (``LeaseLost``, a storage error other than
``StoreUnavailable``, a bug outside sending and settling, a cancel at the drain deadline) is not settled:
its minute is poisoned in the plan and the plan keeps the error, on which the checkpointer stops the
instance (``InstanceCrashed``) so the next owner fires it. ``StoreUnavailable`` is retried in place
(``fire.durably``), with the fire still in flight so its minute cannot close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from tickd.poller.fire import Fire, FireContext, Sender, Settler
from tickd.poller.loader import MinuteLoader
from tickd.poller.plan import FiringPlan
from tickd.poller.slots import FireLanes, SendSlots
from tickd.poller.wakes import Waker
from tickd.schema import guard
from tickd.schema.model import Chain, HttpCallback, KafkaCallback, Schedule


class FirePipeline:
    def __init__(
        self,
        ctx: FireContext,
        plan: FiringPlan,
        loader: MinuteLoader,
        slots: SendSlots,
        sender: Sender,
        settler: Settler,
        waker: Waker,
    ) -> None:
        self._ctx = ctx
        self._plan = plan
        self._loader = loader  # reads a batch trigger's events into the plan
        self._slots = slots  # the node's send slots: taken here only for a group (a fire takes its own)
        self._sender = sender
        self._settler = settler
        self._waker = waker  # a timed pause parked in these minutes ends: its schedule resumed
        settings = ctx.settings
        self._lanes: FireLanes[Fire] = FireLanes(
            settings.instance_max_inflight, settings.http.per_client_limit, self._deliver, plan.fire_crashed
        )

    # -- in flight ------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> bool:
        return self._lanes.count > 0

    @property
    def inflight_count(self) -> int:
        """Fires taken off the plan and not ended yet (delivering, or waiting for their outcome write)."""
        return self._lanes.count

    async def wait(self, timeout_s: float) -> None:
        """Until the fires in flight have ended, or ``timeout_s`` passes."""
        await self._lanes.wait(timeout_s)

    def abandon(self) -> None:
        """Cancel the fires still in flight, and drop those queued for a worker: their minutes are
        poisoned, the next owner fires them."""
        for fire in self._lanes.abandon():
            self._plan.end_fire(fire.minute, settled=False)

    # -- taking fires ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fire the rows as they come due, until cancelled (fires in flight go on: see ``abandon``).

        Each pass takes every row due by now (up to the instance's free slots): the plain Kafka ones (no
        chain, expansion or throttle first) go out together as one group, HTTP ones that never wait long
        go to the instance's workers, and the rest (throttled events, batch triggers, Kafka fires with a
        chain first) each get a task of its own: a broker outage, retried in place for up to its budget,
        or a throttle's wait, then holds nothing else back.

        Only the group's rows take the node's send slots here (they go out at once); every other fire
        takes its own when it can go out (``Sender.send``), so a fire waiting holds none another tenant
        needs."""
        while True:
            free = await self._lanes.room()
            group: list[Fire] = []
            try:
                for row in await self._plan.take_due(free):
                    groupable = self._groupable(row)  # once: the slots taken below are the group's
                    if groupable and not self._slots.try_take(row):
                        # No slot free to this client now: the rows gathered go out first (they hold theirs),
                        # then this one waits holding none, so two groups never wait on each other's slots.
                        self._send_group(group)
                        group = []
                        await self._slots.take(row)
                    self._lanes.taken()
                    fire = Fire(row, self._plan.start_fire(row))
                    if row.wakes:
                        self._lanes.spawn(self._wake(fire))
                    elif groupable:
                        group.append(fire)
                    elif isinstance(row.callback, HttpCallback) and not _waits(row):
                        self._lanes.queue(fire)
                    else:
                        self._lanes.spawn(self._deliver(fire))
            except BaseException:
                # Cancelled while waiting for a send slot: the group never goes out. Its slots go back
                # (the node's are shared) and its minutes are poisoned: the next owner fires those rows.
                self._lanes.release(len(group))
                for fire in group:
                    self._slots.give_back(fire.row)
                    self._plan.end_fire(fire.minute, settled=False)
                raise
            self._send_group(group)

    def _send_group(self, group: list[Fire]) -> None:
        if group:
            self._lanes.spawn(self._group_holding_slots(group))

    async def _group_holding_slots(self, group: list[Fire]) -> None:
        """A group's send slots (taken in ``run``) go back once the group has ended."""
        try:
            await self._deliver_group(group)
        finally:
            for fire in group:
                self._slots.give_back(fire.row)

    def _groupable(self, row: Schedule) -> bool:
        """Whether a due row goes out with the pass's group: a Kafka fire with nothing to do first."""
        if row.wakes or not isinstance(row.callback, KafkaCallback) or (row.repeat is not None and row.attempts == 0):
            return False
        return not _waits(row) and not self._plan.delivered_before(row.event_id or row.fire_id)

    # -- one fire, or a group, from taken to ended ----------------------------------------------------

    async def _deliver(self, fire: Fire) -> None:
        """Fire one row. It ends in exactly one of: its outcome stored, its retry stored (or the schedule
        changed under it), or an exception that poisons its minute and stops the instance."""
        guard.set_guard(self._ctx.lease_guard())  # this task's store requests only
        try:
            if await self._settler.still_wanted(fire):
                await self._fire(fire)
            fire.settled = True
        finally:
            if not fire.settled:
                row = fire.row
                self._ctx.log.error("fire_not_settled", schedule_id=str(row.schedule_id), fire_id=row.fire_id)
            self._end([fire])

    async def _wake(self, fire: Fire) -> None:
        """A paused row due where its pause ends (``poller.wakes``): the schedule resumed, its next fire
        planned. It ends as a fire does: settled, or its minute poisoned if it raised."""
        guard.set_guard(self._ctx.lease_guard())
        try:
            self._consider(await self._waker.wake(fire.row))
            fire.settled = True
        finally:
            self._end([fire])

    async def _deliver_group(self, group: list[Fire]) -> None:
        """Fire a pass's plain rows together. Each ends as a fire of its own does (``_deliver``): its
        outcome stored, its retry stored, or unsettled (its minute poisoned) when the group raises."""
        check = self._ctx.lease_guard()
        guard.set_guard(check)
        try:
            await self._fire_group(await self._wanted_of(group), check)
        finally:
            unsettled = [fire for fire in group if not fire.settled]
            if unsettled:
                self._ctx.log.error("fires_not_settled", fires=len(unsettled), first_fire_id=unsettled[0].row.fire_id)
            self._end(group)

    async def _fire(self, fire: Fire) -> None:
        chained = await self._settler.chain(fire)
        if chained is not None:
            if chained.outcome is Chain.CHANGED:
                return  # the client changed the schedule: this occurrence was dropped, its row marked
            self._consider(chained.following)
            if chained.outcome is Chain.SKIPPED:
                return  # a calendar excludes it, or it missed its deadline: recorded skipped, never sent
        row = fire.row
        if row.options is not None and row.options.batch:
            # Its events fire as rows of their own, read into the plan from storage; then it has succeeded.
            for minute, due in await self._settler.expand(fire):
                await self._loader.read(minute, due)
            await self._settler.settle_expanded(fire)
            return
        if self._plan.delivered_before(fire.key):
            await self._settler.settle_delivered_before(fire)
            return
        await self._sender.throttle(fire)
        await self._sender.send(fire)
        if fire.skipped:
            await self._settler.skip_late(fire)  # its start deadline passed while it waited to go out
            return
        self._sent(fire)
        self._consider(await self._settler.settle(fire))
        self._ctx.count_in_stats(fire)

    async def _fire_group(self, fires: Sequence[Fire], check: Callable[[], None]) -> None:
        """``_fire`` for a group's fires (plain Kafka rows: nothing to chain, expand or throttle). The
        delivered ones settle in one write, each other fire on its own, in a task each under the group's
        lease ``check``: one that raises leaves only its own fire unsettled, and the first such error is
        raised once every fire has ended."""
        await self._sender.send_many(fires)
        for fire in fires:
            self._sent(fire)
        delivered = [fire for fire in fires if fire.delivery.ok]
        await self._settler.settle_delivered(delivered)
        for fire in delivered:
            fire.settled = True
        failed = [fire for fire in fires if not fire.delivery.ok]
        errors = await asyncio.gather(*(self._settle_alone(fire, check) for fire in failed), return_exceptions=True)
        first_error = next((e for e in errors if isinstance(e, BaseException)), None)
        if first_error is not None:
            raise first_error
        for fire in fires:
            self._ctx.count_in_stats(fire)

    async def _settle_alone(self, fire: Fire, check: Callable[[], None]) -> None:
        # A task of its own (gather): its writes are the fire's too, under the group's guard (seed
        # 1109: unguarded, a paused node's durable retry landed after the next owner's delivery).
        guard.set_guard(check)
        self._consider(await self._settler.settle(fire))
        fire.settled = True

    def _consider(self, row: Schedule | None) -> None:
        """A row a step wrote (a retry, a next occurrence): planned at once if its minute is open here,
        else read when it opens."""
        if row is not None:
            self._plan.consider(row)

    async def _wanted_of(self, group: list[Fire]) -> list[Fire]:
        """A group's fires still wanted (``Settler.still_wanted``); those dropped are settled."""
        recheck = [fire for fire in group if fire.row.rechecked]
        if recheck:
            wanted = await asyncio.gather(*(self._settler.still_wanted(fire) for fire in recheck))
            for fire, keep in zip(recheck, wanted, strict=True):
                fire.settled = not keep
        return [fire for fire in group if not fire.settled]

    def _sent(self, fire: Fire) -> None:
        """A fire is out (or failed to go): remembered as delivered, counted."""
        if fire.delivery.ok:
            self._plan.note_delivered(fire.key)
        self._ctx.count_attempt(fire)

    def _end(self, fires: Sequence[Fire]) -> None:
        self._lanes.release(len(fires))
        for fire in fires:
            self._plan.end_fire(fire.minute, fire.settled)


def _waits(row: Schedule) -> bool:
    """Whether a fire may wait long before it goes out (a throttled event waits for a token; a batch
    trigger writes its events): those get a task each, so they never hold a worker."""
    options = row.options
    return options is not None and (options.batch or options.throttle is not None)
