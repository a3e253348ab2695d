"""A poller node: one process running many poller instances, composed of parts with one job each.

- ``lease.NodeLease``: the heartbeat loop; if the node's row cannot be renewed in time the node fences
  itself (stops every instance) before anyone else may consider it dead;
- ``claims.Placement``: the reconcile loop (the ring says which instances belong here: claim the new ones,
  hand over the ones that moved away) and the verify loop (re-read claims; an instance whose claim moved
  on is stopped at once);
- ``marks.MarkPoll``: the marks loop, which polls the hot marks of the open minutes and tells local
  instances to re-read;
- ``stats.TenantStats``: per-tenant statistics, flushed on their own loop.
The node shares its send slots and throttle gate between its instances, and runs every loop in one
TaskGroup, so a crashed loop stops the node loudly.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from tickd.poller.calendars import CalendarBook
from tickd.poller.claims import Placement
from tickd.poller.context import NodeContext
from tickd.poller.delivery import CallbackRouter
from tickd.poller.grants import TopicGuard
from tickd.poller.instance import PollerInstance
from tickd.poller.lease import NodeLease
from tickd.poller.marks import MarkPoll
from tickd.poller.metrics import Metrics
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.stats import TenantStats
from tickd.poller.throttle import ThrottleGate
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Claim, Client, InstanceKey
from tickd.schema.store import Store

log = structlog.get_logger("tickd.poller")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _reserved(settings: PollerSettings) -> frozenset[str]:
    """Topics no fire is sent to: the configured ones and the ack topic (also when set directly)."""
    ack = frozenset({settings.ack_topic}) if settings.ack_topic else frozenset()
    return settings.reserved_topics | ack


class Node:
    def __init__(
        self,
        settings: PollerSettings,
        store: Store,
        router: CallbackRouter,
        metrics: Metrics,
        clock: Clock = utc_now,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._s = settings
        self._store = store
        self._router = router
        self._metrics = metrics
        self._now = clock
        self.node_id = settings.node_id
        self._rng = rng or random.Random()
        # Shared by all instances: a fire takes them only to go out, each client up to its share.
        self._send_slots = SendSlots.of(settings)
        self._gate = ThrottleGate(store, self.node_id, clock, metrics, poll_s=settings.throttle_poll_s)
        self._calendars = CalendarBook(store, settings.clients_refresh_s)  # shared by the node's instances
        self._log = log.bind(node_id=self.node_id)
        self.stats = TenantStats(store, self.node_id, clock, self._log)
        node = NodeContext(settings, store, metrics, clock, self._log)
        self._lease = NodeLease(node, self._fence, lambda: not self._running)
        self._placement = Placement(node, self._lease, self._new_instance)
        self._running = self._placement.running
        self._marks = MarkPoll(node, self._running)
        if isinstance(router, CallbackRouter):  # test doubles deliver without one
            router.use_guard(TopicGuard(self._placement.client, _reserved(settings), metrics))
        metrics.watch_node(
            fenced=lambda: self._lease.fenced,
            heartbeat_age_s=self._lease.age_s,
            open_minutes=self._open,
            oldest_open_minute_age_s=self._oldest_open_minute_age_s,
        )

    def status(self) -> dict[str, object]:
        now = self._now()
        return {
            "node_id": self.node_id,
            "fenced": self._lease.fenced,
            "live_nodes": sorted(self._placement.live),
            "instances": {str(k): r.instance.claim.epoch for k, r in sorted(self._running.items())},
            # Per instance: rows waiting, the first due time, the gates (lease, changes read), fires in
            # flight and outcomes unwritten: what a stalled instance waits on.
            "detail": {str(k): r.instance.describe(now) for k, r in sorted(self._running.items())},
            # The send slots (poller.slots): free, held and waited for per client; a tenant at its share shows here.
            "send_slots": self._send_slots.describe(),
        }

    @property
    def fenced(self) -> bool:
        return self._lease.fenced

    def _open(self) -> int:
        return sum(r.instance.open_minutes for r in self._running.values())

    def _oldest_open_minute_age_s(self) -> float:
        """Grows while a minute stays open: the live side of tickd_checkpoint_lag_seconds (0 if none)."""
        oldest = min((m for r in self._running.values() if (m := r.instance.oldest_open_minute)), default=None)
        return 0.0 if oldest is None else max(0.0, (self._now() - oldest).total_seconds())

    def lease_held(self, since: float | None = None) -> bool:
        """Whether the node holds its lease (and, with ``since``, has held it without a lapse since then):
        see ``NodeLease.held``."""
        return self._lease.held(since)

    @property
    def running(self) -> dict[InstanceKey, PollerInstance]:
        """The instances this node runs now (stopping ones included), by key."""
        return {key: r.instance for key, r in self._running.items()}

    async def run(self, stop: asyncio.Event, services: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        """Run until ``stop`` is set, then hand every instance over. Every long-lived task of the node
        (its loops, its instances, their hand-overs, and ``services`` such as the ack consumer) runs in
        one task group: a task that crashes stops the node loudly instead of dying unnoticed."""
        self._lease.begin()
        await self._lease.first_heartbeat(stop)
        self._log.info("node_started", metrics_port=self._s.metrics_port)
        async with asyncio.TaskGroup() as tg:
            self._placement.run_in(tg.create_task)
            loops = [
                tg.create_task(self._every(self._s.heartbeat_interval_s, "_heartbeat_tick", self._lease.tick)),
                tg.create_task(self._every(self._s.ring_refresh_s, "_reconcile", self._placement.reconcile)),
                tg.create_task(self._every(self._s.mark_poll_s, "_poll_marks", self._marks.poll)),
                tg.create_task(self._every(self._s.claim_verify_s, "_verify_claims", self._placement.verify)),
                tg.create_task(self.stats.run(self._s.stats_flush_s)),
                *(tg.create_task(_as_coroutine(service)) for service in services),
            ]
            await stop.wait()
            for task in loops:
                task.cancel()
            await self._shutdown()

    async def _every(self, interval_s: float, name: str, tick: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``tick`` forever; storage hiccups are logged and retried, anything else stops the node."""
        while True:
            try:
                await tick()
            except StoreUnavailable as exc:
                self._metrics.store_error(name.lstrip("_"))
                self._log.warning("store_unavailable", loop=name, error=str(exc))
            await asyncio.sleep(interval_s)

    def _new_instance(self, claim: Claim, client: Client) -> PollerInstance:
        """The instance a claim gives this node, wired to the node's shared parts."""
        return PollerInstance(
            claim,
            client,
            self._store,
            self._router,
            self._s,
            self._metrics,
            self._now,
            self._send_slots,
            self._gate,
            rng=random.Random(self._rng.getrandbits(64)),
            lease=self.lease_held,
            stats=self.stats,
            calendars=self._calendars,
        )

    async def _fence(self) -> None:
        await self._placement.stop_all("fenced", drain_s=0, release=False)

    # -- shutdown -------------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop claiming (the loops are gone), drain and release every instance, then leave the ring.

        Releasing before leaving matters: while our heartbeat row exists nobody claims our instances,
        so no instance can run twice during the handover."""
        self._log.info("node_stopping", instances=len(self._running))
        self._placement.close()
        await self._placement.stop_all("shutdown", drain_s=self._s.shutdown_deadline_s, release=True)
        await self._gate.close()
        try:  # the last statistics of this run, if the store takes them soon; never holds the stop up
            await asyncio.wait_for(self.stats.flush(), timeout=2.0)
        except Exception as exc:
            self._log.warning("stats_write_failed", error=str(exc) or type(exc).__name__)
        try:
            await self._store.leave(self.node_id)
        except StoreUnavailable as exc:
            self._metrics.store_error("leave")
            self._log.warning("leave_failed", error=str(exc))
        self._log.info("node_stopped")


async def _as_coroutine(service: Callable[[], Awaitable[None]]) -> None:
    await service()
