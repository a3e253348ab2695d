"""A poller node: one process running many poller instances.

Loops (one TaskGroup, so a crashed loop stops the node loudly):
- heartbeat: a TTL'd row in ``nodes``; if it cannot be renewed in time the node fences itself (stops
  every instance) before anyone else may consider it dead;
- reconcile: live nodes + clients -> consistent-hash ring -> which instances belong here; stops the
  ones that moved away (drain, checkpoint, release) and claims the new ones with an LWT (epoch + 1),
  only when the previous owner released them or is dead;
- marks: polls the hot marks of the open minutes and tells local instances to re-read;
- verify: re-reads claims; an instance whose claim moved on is stopped at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from tickd.poller import ring
from tickd.poller.delivery import CallbackRouter
from tickd.poller.grants import TopicGuard
from tickd.poller.instance import InstanceDrained, PollerInstance
from tickd.poller.metrics import Metrics
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.stats import TenantStats
from tickd.poller.throttle import ThrottleGate
from tickd.schema import aio
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Claim, Client, InstanceKey, NodeInfo
from tickd.schema.store import Store
from tickd.schema.timing import minute_bucket

log = structlog.get_logger("tickd.poller")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _reserved(settings: PollerSettings) -> frozenset[str]:
    """Topics no fire is sent to: the configured ones and the ack topic (also when set directly)."""
    ack = frozenset({settings.ack_topic}) if settings.ack_topic else frozenset()
    return settings.reserved_topics | ack


class Running:
    __slots__ = ("instance", "stopped", "stopping", "task")

    def __init__(self, instance: PollerInstance, task: asyncio.Task[None]) -> None:
        self.instance = instance
        self.task = task
        self.stopping = False
        self.stopped = asyncio.Event()


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
        self._started_at = clock()
        self._running: dict[InstanceKey, Running] = {}
        self._clients: dict[str, Client] = {}
        self._clients_read_at = 0.0
        self._live: set[str] = set()
        # Drained instances, each with its client's resized_at when it was found drained.
        self._drained: dict[InstanceKey, datetime | None] = {}
        # Instances whose claim this node may hold without running them (a release that failed, a claim
        # whose answer was lost, a fence, an earlier process with this node id): others wait for a live
        # owner to release, so each is checked and released. None until the first client read fills it.
        self._maybe_held: set[InstanceKey] | None = None
        self._marks_polled_at: datetime | None = None  # when the last poll of hot marks began that succeeded
        self._fenced = False
        # Loop time (monotonic; virtual under the simulation), set when the node starts.
        self._heartbeat_ok = 0.0
        self._lease_since = 0.0  # loop time since which the lease has been held without a lapse
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rng = rng or random.Random()
        self._tg: asyncio.TaskGroup | None = None
        # Shared by all instances: a fire takes them only to go out, each client up to its share.
        self._send_slots = SendSlots.of(settings)
        self._gate = ThrottleGate(store, self.node_id, clock, metrics, poll_s=settings.throttle_poll_s)
        self._log = log.bind(node_id=self.node_id)
        self.stats = TenantStats(store, self.node_id, clock, self._log)
        if isinstance(router, CallbackRouter):  # test doubles deliver without one
            router.use_guard(TopicGuard(self._client, _reserved(settings), metrics))
        metrics.watch_node(
            fenced=lambda: self._fenced,
            heartbeat_age_s=self._heartbeat_age_s,
            open_minutes=self._open,
            oldest_open_minute_age_s=self._oldest_open_minute_age_s,
        )

    def status(self) -> dict[str, object]:
        now = self._now()
        return {
            "node_id": self.node_id,
            "fenced": self._fenced,
            "live_nodes": sorted(self._live),
            "instances": {str(k): r.instance.claim.epoch for k, r in sorted(self._running.items())},
            # Per instance: rows waiting, the first due time, the gates (lease, changes read), fires in
            # flight and outcomes unwritten: what a stalled instance waits on.
            "detail": {str(k): r.instance.describe(now) for k, r in sorted(self._running.items())},
            # The send slots (poller.slots): free, held and waited for per client; a tenant at its share shows here.
            "send_slots": self._send_slots.describe(),
        }

    @property
    def fenced(self) -> bool:
        return self._fenced

    def _client(self, client_id: str) -> Client | None:
        """The client as last read (``TICKD_CLIENTS_REFRESH_S``): what a fire's Kafka grant is checked on."""
        return self._clients.get(client_id)

    def _heartbeat_age_s(self) -> float:
        """Since the last answered heartbeat was sent (0 before the node runs)."""
        return 0.0 if self._loop is None else max(0.0, self._loop.time() - self._heartbeat_ok)

    def _open(self) -> int:
        return sum(r.instance.open_minutes for r in self._running.values())

    def _oldest_open_minute_age_s(self) -> float:
        """Grows while a minute stays open: the live side of tickd_checkpoint_lag_seconds (0 if none)."""
        oldest = min((m for r in self._running.values() if (m := r.instance.oldest_open_minute)), default=None)
        return 0.0 if oldest is None else max(0.0, (self._now() - oldest).total_seconds())

    def lease_held(self, since: float | None = None) -> bool:
        """True while no other node can have declared this one dead: the last heartbeat sent and answered
        is younger than the node TTL less the fence margin. Instances check it right before each fire,
        so a node that was paused (GC, SIGSTOP) past its TTL fires nothing when it resumes.

        ``since`` (loop time): and held without a lapse since then. A fire's writes check this: a node
        paused past its lease, then renewed, may have lost the fire's instance to another node meanwhile
        (simulation seed 1109: a durable retry finished after the next owner had delivered the fire)."""
        silent_s = asyncio.get_running_loop().time() - self._heartbeat_ok
        held = not self._fenced and silent_s <= self._s.node_ttl_s - self._s.fence_margin_s
        return held and (since is None or self._lease_since <= since)

    @property
    def running(self) -> dict[InstanceKey, PollerInstance]:
        """The instances this node runs now (stopping ones included), by key."""
        return {key: r.instance for key, r in self._running.items()}

    async def run(self, stop: asyncio.Event, services: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        """Run until ``stop`` is set, then hand every instance over. Every long-lived task of the node
        (its loops, its instances, their hand-overs, and ``services`` such as the ack consumer) runs in
        one task group: a task that crashes stops the node loudly instead of dying unnoticed."""
        self._loop = asyncio.get_running_loop()
        self._heartbeat_ok = self._lease_since = self._loop.time()
        await self._wait_for_first_heartbeat(stop)
        self._log.info("node_started", metrics_port=self._s.metrics_port)
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            loops = [
                tg.create_task(self._every(self._s.heartbeat_interval_s, self._heartbeat_tick)),
                tg.create_task(self._every(self._s.ring_refresh_s, self._reconcile)),
                tg.create_task(self._every(self._s.mark_poll_s, self._poll_marks)),
                tg.create_task(self._every(self._s.claim_verify_s, self._verify_claims)),
                tg.create_task(self.stats.run(self._s.stats_flush_s)),
                *(tg.create_task(_as_coroutine(service)) for service in services),
            ]
            await stop.wait()
            for task in loops:
                task.cancel()
            await self._shutdown()

    async def _wait_for_first_heartbeat(self, stop: asyncio.Event) -> None:
        """A node starts only once it is in the membership table; a store that is down is waited out."""
        delay = 0.2
        while not stop.is_set():
            try:
                await self._heartbeat()
                return
            except (StoreUnavailable, TimeoutError) as exc:
                self._metrics.store_error("heartbeat")
                self._log.warning("heartbeat_failed", error=str(exc) or type(exc).__name__, wait_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _every(self, interval_s: float, tick: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``tick`` forever; storage hiccups are logged and retried, anything else stops the node."""
        while True:
            try:
                await tick()
            except StoreUnavailable as exc:
                self._metrics.store_error(tick.__name__.lstrip("_"))
                self._log.warning("store_unavailable", loop=tick.__name__, error=str(exc))
            await asyncio.sleep(interval_s)

    # -- membership and fencing -----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        now = self._now()
        info = NodeInfo(self.node_id, self._s.metrics_host, self._s.metrics_port, self._started_at, now)
        # A busy node's write may be slow to come back; give it half the time left before fencing.
        budget_s = max(self._s.heartbeat_interval_s * 2, (self._s.node_ttl_s - self._s.fence_margin_s) / 2)
        # The lease counts from when the write was *sent*: its TTL started no earlier, so others cannot
        # see this node gone before the lease ends, however late the answer comes back.
        sent = asyncio.get_running_loop().time()
        async with asyncio.timeout(budget_s):
            await self._store.heartbeat(info, self._s.node_ttl_s)
        if sent - self._heartbeat_ok > self._s.node_ttl_s - self._s.fence_margin_s:
            self._lease_since = sent  # the lease had run out before this renewal: a new one begins
        self._heartbeat_ok = max(self._heartbeat_ok, sent)
        if self._fenced and not self._running:  # unfenced only once every instance of before is stopped
            self._fenced = False
            self._log.warning("node_unfenced")

    async def _heartbeat_tick(self) -> None:
        # Checked before renewing too: a node that was paused past its lease may have lost its instances
        # meanwhile, and a fresh heartbeat must not make its old instances look owned again.
        await self._fence_if_lapsed()
        try:
            await self._heartbeat()
        except (StoreUnavailable, TimeoutError) as exc:
            self._metrics.store_error("heartbeat")
            self._log.warning("heartbeat_failed", error=str(exc) or type(exc).__name__)
        await self._fence_if_lapsed()

    async def _fence_if_lapsed(self) -> None:
        """Others will think us dead at node_ttl_s: stop firing before they may start. The flag is set
        before anything awaits, so no instance fires once the lapse is seen."""
        if self._fenced or self.lease_held():
            return
        self._fenced = True
        silent_s = asyncio.get_running_loop().time() - self._heartbeat_ok
        self._log.error("node_fenced", silent_s=round(silent_s, 2))
        await asyncio.gather(*(self._stop(k, "fenced", drain_s=0, release=False) for k in list(self._running)))

    # -- ownership ------------------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        if self._fenced:
            return
        await self._refresh_clients()
        self._live = {n.node_id for n in await self._store.live_nodes()} | {self.node_id}
        self._forget_undrained()
        candidates = [i for i in ring.instances_of(self._clients.values()) if i not in self._drained]
        mine = ring.owned_by(self.node_id, candidates, self._live)
        for key, running in list(self._running.items()):
            if key not in mine and not running.stopping:
                self._spawn(self._stop(key, "rebalanced", drain_s=self._s.shutdown_deadline_s, release=True))
        await self._claim_new(sorted(k for k in mine if k not in self._running))

    def _forget_undrained(self) -> None:
        """A drained instance is left alone only while its client's quota stays below it and unchanged:
        after any later resize it is looked at again, because the quota may have been raised and lowered
        between two reads of the clients, with schedules placed on the instance in between."""
        self._drained = {
            key: resized_at
            for key, resized_at in self._drained.items()
            if (client := self._clients.get(key.client_id)) is not None
            and key.poller_id >= client.poller_count
            and client.resized_at == resized_at
        }

    async def _refresh_clients(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._clients_read_at < self._s.clients_refresh_s and self._clients:
            return
        self._clients = {c.client_id: c for c in await self._store.list_clients()}
        self._clients_read_at = now
        if self._maybe_held is None:  # at start, any instance may still be claimed under our node id
            self._maybe_held = set(ring.instances_of(self._clients.values()))
        for key, running in self._running.items():
            client = self._clients.get(key.client_id)
            if client is not None:
                running.instance.client = client

    async def _claim_new(self, keys: list[InstanceKey]) -> None:
        """Claim instances the ring gives us. Claims are read *before* membership: every node heartbeats
        before it claims, so an owner missing from a membership read made after its claim was read is
        really dead, while one missing from an older read may just be new (two owners at once)."""
        if not keys:
            return
        claims = await aio.gather(*(self._store.get_claim(k) for k in keys))
        if any(c is not None and c.owner not in (None, self.node_id) for c in claims):
            self._live = {n.node_id for n in await self._store.live_nodes()} | {self.node_id}
        await aio.gather(*(self._try_claim(k, seen) for k, seen in zip(keys, claims, strict=True)))

    async def _try_claim(self, key: InstanceKey, seen: Claim | None) -> None:
        if seen is not None and seen.owner not in (None, self.node_id) and seen.owner in self._live:
            return  # its owner is alive: it releases when it sees the ring moved
        client = self._clients[key.client_id]
        if await self._is_drained(key, client):
            return
        try:
            claim = await self._store.claim(key, self.node_id, seen, self._now())
        except StoreUnavailable:
            self._may_hold(key)  # the claim may have applied with its answer lost
            raise
        if claim is None:
            return
        if self._fenced:  # the fence came while the claim was in flight: run nothing, give it back later
            self._may_hold(key)
            return
        self._metrics.claims.labels("acquired").inc()
        self._log.info(
            "instance_claimed", instance=str(key), epoch=claim.epoch, previous_owner=seen.owner if seen else None
        )
        self._start(claim, client)

    async def _is_drained(self, key: InstanceKey, client: Client) -> bool:
        """Above a lowered quota, an instance with nothing left after its checkpoint is not run again."""
        if key.poller_id < client.poller_count or client.resized_at is None:
            return False
        if (self._now() - client.resized_at).total_seconds() < self._s.drain_grace_s:
            return False
        horizon = await self._store.get_horizon(key)
        checkpoint = await self._store.get_checkpoint(key)
        drained = horizon is None or (checkpoint is not None and checkpoint.minute >= horizon)
        if drained:
            self._drained[key] = client.resized_at
        return drained

    def _start(self, claim: Claim, client: Client) -> None:
        instance = PollerInstance(
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
        )
        task = self._task_group().create_task(self._run_instance(instance))
        self._running[claim.instance] = Running(instance, task)
        self._metrics.instances.set(len(self._running))

    async def _run_instance(self, instance: PollerInstance) -> None:
        key = instance.instance
        self._log.info("instance_started", instance=str(key), epoch=instance.claim.epoch)
        try:
            await instance.run()
        except* InstanceDrained:
            self._drained[key] = instance.client.resized_at
            self._spawn(self._stop(key, "drained", drain_s=self._s.shutdown_deadline_s, release=True))
        except* StoreUnavailable as group:
            self._metrics.store_error("instance")
            self._log.warning("instance_failed", instance=str(key), error=str(group.exceptions[0]))
            self._spawn(self._stop(key, "store_unavailable", drain_s=self._s.shutdown_deadline_s, release=True))
        except* Exception:
            # Pollers never die of one bad instance: log it, hand it back; the ring gives it out again.
            self._log.exception("instance_crashed", instance=str(key))
            self._spawn(self._stop(key, "crashed", drain_s=self._s.shutdown_deadline_s, release=True))

    async def _stop(self, key: InstanceKey, reason: str, *, drain_s: float, release: bool) -> None:
        running = self._running.get(key)
        if running is None:
            return
        if running.stopping:
            await running.stopped.wait()  # another stop is handing it over: wait for it to finish
            return
        running.stopping = True
        try:
            await self._hand_over(running, reason, drain_s=drain_s, release=release)
        finally:
            del self._running[key]
            self._metrics.instances.set(len(self._running))
            with contextlib.suppress(KeyError):  # its lag is the next owner's to report
                self._metrics.checkpoint_lag.remove(str(key))
            running.stopped.set()

    async def _hand_over(self, running: Running, reason: str, *, drain_s: float, release: bool) -> None:
        running.task.cancel()
        await asyncio.gather(running.task, return_exceptions=True)
        instance = running.instance
        try:
            await instance.drain(drain_s)
        except StoreUnavailable as exc:
            self._metrics.store_error("drain")
            self._log.warning("drain_incomplete", instance=str(instance.instance), error=str(exc))
        self._log.info("instance_stopped", instance=str(instance.instance), epoch=instance.claim.epoch, reason=reason)
        if release:
            await self._release(instance.claim)
        else:
            self._may_hold(instance.instance)

    def _may_hold(self, key: InstanceKey) -> None:
        if self._maybe_held is not None:
            self._maybe_held.add(key)

    async def _release(self, claim: Claim) -> bool:
        """Give the claim up (if still held at its epoch); False if storage did not answer (then the
        claim is remembered and released later)."""
        try:
            released = await self._store.release(claim)
        except StoreUnavailable as exc:
            self._metrics.store_error("release")
            self._log.warning("release_failed", instance=str(claim.instance), error=str(exc))
            self._may_hold(claim.instance)
            return False
        if released:
            self._metrics.claims.labels("released").inc()
            self._log.info("instance_released", instance=str(claim.instance), epoch=claim.epoch)
        return True

    async def _verify_claims(self) -> None:
        await self._release_stray_claims()
        for key, running in list(self._running.items()):
            current = await self._store.get_claim(key)
            mine = running.instance.claim
            if current is None or (current.owner, current.epoch) != (mine.owner, mine.epoch):
                self._log.error(
                    "claim_lost", instance=str(key), epoch=mine.epoch, now_owner=current.owner if current else None
                )
                await self._stop(key, "claim_lost", drain_s=0, release=False)

    async def _release_stray_claims(self) -> None:
        """Release claims held under this node id by no running instance (the epoch in the release
        keeps a claim taken again meanwhile safe)."""
        if not self._maybe_held or self._fenced:
            return
        for key in sorted(self._maybe_held):
            if key in self._running:
                self._maybe_held.discard(key)
                continue
            claim = await self._store.get_claim(key)
            if claim is not None and claim.owner == self.node_id and key not in self._running:
                self._log.info("stray_claim_released", instance=str(key), epoch=claim.epoch)
                if not await self._release(claim):
                    continue  # storage failed: next tick
            self._maybe_held.discard(key)

    # -- hot marks ------------------------------------------------------------------------------------

    async def _poll_marks(self) -> None:
        if not self._running:
            return
        now = self._now()
        current = minute_bucket(now)
        watched = [current]
        if (now - current).total_seconds() < self._s.minute_close_s + 1:
            watched.append(current - timedelta(minutes=1))
        if (current + timedelta(minutes=1) - now).total_seconds() < self._s.preload_s + 1:
            watched.append(current + timedelta(minutes=1))
        # And every minute still open anywhere: a node back from a pause (or an outage) holds minutes the
        # clock has left behind, and a poll that skipped their marks would tell them nothing changed. An
        # instance holds at most three minutes open, so a catch-up adds a few reads, not one per minute.
        watched += sorted({m for r in self._running.values() for m in r.instance.held_minutes} - set(watched))
        found = await aio.gather(*(self._store.hot_marks(m) for m in watched))
        # A mark keeps only its latest write: every write that changed it landed after our last good poll.
        since, self._marks_polled_at = self._marks_polled_at or now, now
        for minute, marks in zip(watched, found, strict=True):
            for mark in marks:
                running = self._running.get(mark.instance)
                if running is not None and not running.stopping:
                    running.instance.on_mark(minute, mark.touched_at, since)
        for running in self._running.values():
            running.instance.marks_polled(now)

    # -- shutdown -------------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop claiming (the loops are gone), drain and release every instance, then leave the ring.

        Releasing before leaving matters: while our heartbeat row exists nobody claims our instances,
        so no instance can run twice during the handover."""
        self._log.info("node_stopping", instances=len(self._running))
        await asyncio.gather(
            *(self._stop(k, "shutdown", drain_s=self._s.shutdown_deadline_s, release=True) for k in list(self._running))
        )
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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._task_group().create_task(coro)

    def _task_group(self) -> asyncio.TaskGroup:
        if self._tg is None:
            raise RuntimeError("the node is not running")
        return self._tg


async def _as_coroutine(service: Callable[[], Awaitable[None]]) -> None:
    await service()
