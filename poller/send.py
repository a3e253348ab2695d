"""The sending steps of a fire: its throttle token, the node's send slots, the lease check, the delivery.

A fire holds the node's send slots (``poller.slots``: its client's channel slot, then the node's) only from
when it can go out, its throttle token in hand, until it is out: a fire waiting for a token or for its
client's turn holds nothing another tenant needs. A pass's group goes out together (``send_many``) with
the slots ``poller.pipeline`` took for it. Every send checks the node's lease right before: a fire whose
lease is gone raises ``LeaseLost`` and is left to the next owner (an unused token goes back first).

An exception a send raises that is not the instance's to stop on (a bug in a dispatcher, a value nobody
foresaw) is that fire's failed attempt, logged with its traceback (``fire_failed_unexpectedly``): see
``_ContainedRouter``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.errors import LeaseLost
from tickd.poller.fire import Fire, FireContext
from tickd.poller.slots import SendSlots
from tickd.poller.throttle import ThrottleGate
from tickd.schema.errors import TickdError
from tickd.schema.model import Schedule

# What still stops the instance when a fire's send or settle raises it: the node lost the instance, or
# storage failed past ``durably``'s retries. Any other error is that fire's own outcome.
STOPS = (LeaseLost, TickdError)


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
