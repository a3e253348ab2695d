"""Which instances run on this node: placement on the ring, claims, and hand-overs.

- reconcile: live nodes + clients -> bounded placement (``ring.owned_by``, no node above
  ``TICKD_RING_LOAD_FACTOR`` x the average) -> which instances belong here; stops the
  ones that moved away (drain, checkpoint, release) and claims the new ones with an LWT (epoch + 1),
  only when the previous owner released them or is dead;
- verify: re-reads claims; an instance whose claim moved on is stopped at once (``claim_lost``), and a
  claim this node may hold without running it (a release that failed, a claim whose answer was lost, a
  fence) is released (``stray_claim_released``).
An instance that crashes is handed back (``instance_crashed``); the ring gives it out again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from tickd.poller import ring
from tickd.poller.context import NodeContext
from tickd.poller.instance import InstanceDrained, PollerInstance
from tickd.poller.lease import NodeLease
from tickd.schema import aio
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Claim, Client, InstanceKey

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class Running:
    __slots__ = ("instance", "stopped", "stopping", "task")

    def __init__(self, instance: PollerInstance, task: asyncio.Task[None]) -> None:
        self.instance = instance
        self.task = task
        self.stopping = False
        self.stopped = asyncio.Event()


class Placement:
    def __init__(self, node: NodeContext, lease: NodeLease, start: Callable[[Claim, Client], PollerInstance]) -> None:
        """``start`` makes the instance a claim gives this node (the node's shared parts wired in)."""
        self._s = node.settings
        self._node = node
        self._lease = lease
        self._start_instance = start
        self._spawn: Spawn | None = None  # the node's task group, once it runs
        self.node_id = node.settings.node_id
        self.running: dict[InstanceKey, Running] = {}
        self._clients: dict[str, Client] = {}
        self._clients_read_at = 0.0
        self.live: set[str] = set()
        # Drained instances, each with its client's resized_at when it was found drained.
        self._drained: dict[InstanceKey, datetime | None] = {}
        # Instances whose claim this node may hold without running them (a release that failed, a claim
        # whose answer was lost, a fence, an earlier process with this node id): others wait for a live
        # owner to release, so each is checked and released. None until the first client read fills it.
        self._maybe_held: set[InstanceKey] | None = None
        self._closed = False

    def run_in(self, spawn: Spawn) -> None:
        """Instances and hand-overs run as tasks of the node's task group (``spawn``)."""
        self._spawn = spawn

    def close(self) -> None:
        """Start no instance from now on: the node is stopping. A claim still in flight when its loop was
        cancelled (a store write that finishes what it began) is given back instead of run, since the
        hand-over of every running instance may already have begun (simulation seed 102673: an instance
        claimed during the stop ran on, never handed over)."""
        self._closed = True

    def client(self, client_id: str) -> Client | None:
        """The client as last read (``TICKD_CLIENTS_REFRESH_S``): what a fire's Kafka grant is checked on."""
        return self._clients.get(client_id)

    # -- ownership ------------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        if self._lease.fenced:
            return
        await self._refresh_clients()
        self.live = {n.node_id for n in await self._node.store.live_nodes()} | {self.node_id}
        self._forget_undrained()
        # Drained instances stay in the placement: the cap depends on the instance count, and which ones are
        # drained is this node's own finding, so leaving them out would make nodes place differently.
        everything = ring.instances_of(self._clients.values())
        mine = ring.owned_by(self.node_id, everything, self.live, self._s.ring_load_factor) - self._drained.keys()
        for key, running in list(self.running.items()):
            if key not in mine and not running.stopping:
                self._task(self.stop(key, "rebalanced", drain_s=self._s.shutdown_deadline_s, release=True))
        await self._claim_new(sorted(k for k in mine if k not in self.running))

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
        self._clients = {c.client_id: c for c in await self._node.store.list_clients()}
        self._clients_read_at = now
        if self._maybe_held is None:  # at start, any instance may still be claimed under our node id
            self._maybe_held = set(ring.instances_of(self._clients.values()))
        for key, running in self.running.items():
            client = self._clients.get(key.client_id)
            if client is not None:
                running.instance.client = client

    async def _claim_new(self, keys: list[InstanceKey]) -> None:
        """Claim instances the ring gives us. Claims are read *before* membership: every node heartbeats
        before it claims, so an owner missing from a membership read made after its claim was read is
        really dead, while one missing from an older read may just be new (two owners at once)."""
        if not keys:
            return
        claims = await aio.gather(*(self._node.store.get_claim(k) for k in keys))
        if any(c is not None and c.owner not in (None, self.node_id) for c in claims):
            self.live = {n.node_id for n in await self._node.store.live_nodes()} | {self.node_id}
        await aio.gather(*(self._try_claim(k, seen) for k, seen in zip(keys, claims, strict=True)))

    async def _try_claim(self, key: InstanceKey, seen: Claim | None) -> None:
        if seen is not None and seen.owner not in (None, self.node_id) and seen.owner in self.live:
            return  # its owner is alive: it releases when it sees the ring moved
        client = self._clients[key.client_id]
        if await self._is_drained(key, client):
            return
        try:
            claim = await self._node.store.claim(key, self.node_id, seen, self._node.clock())
        except StoreUnavailable:
            self._may_hold(key)  # the claim may have applied with its answer lost
            raise
        if claim is None:
            return
        if self._lease.fenced:  # the fence came while the claim was in flight: run nothing, give it back later
            self._may_hold(key)
            return
        if self._closed:  # the node began to stop while the claim was in flight
            self._may_hold(key)
            self._task(self._release_unrun(claim))
            return
        self._node.metrics.claims.labels("acquired").inc()
        self._node.log.info(
            "instance_claimed", instance=str(key), epoch=claim.epoch, previous_owner=seen.owner if seen else None
        )
        self._start(claim, client)

    async def _is_drained(self, key: InstanceKey, client: Client) -> bool:
        """Above a lowered quota, an instance with nothing left after its checkpoint is not run again."""
        if key.poller_id < client.poller_count or client.resized_at is None:
            return False
        if (self._node.clock() - client.resized_at).total_seconds() < self._s.drain_grace_s:
            return False
        horizon = await self._node.store.get_horizon(key)
        checkpoint = await self._node.store.get_checkpoint(key)
        drained = horizon is None or (checkpoint is not None and checkpoint.minute >= horizon)
        if drained:
            self._drained[key] = client.resized_at
        return drained

    def _start(self, claim: Claim, client: Client) -> None:
        instance = self._start_instance(claim, client)
        task = self._task(self._run_instance(instance))
        self.running[claim.instance] = Running(instance, task)
        self._node.metrics.instances.set(len(self.running))

    async def _run_instance(self, instance: PollerInstance) -> None:
        key = instance.instance
        self._node.log.info("instance_started", instance=str(key), epoch=instance.claim.epoch)
        try:
            await instance.run()
        except* InstanceDrained:
            self._drained[key] = instance.client.resized_at
            self._task(self.stop(key, "drained", drain_s=self._s.shutdown_deadline_s, release=True))
        except* StoreUnavailable as group:
            self._node.metrics.store_error("instance")
            self._node.log.warning("instance_failed", instance=str(key), error=str(group.exceptions[0]))
            self._task(self.stop(key, "store_unavailable", drain_s=self._s.shutdown_deadline_s, release=True))
        except* Exception:
            # Pollers never die of one bad instance: log it, hand it back; the ring gives it out again.
            self._node.log.exception("instance_crashed", instance=str(key))
            self._task(self.stop(key, "crashed", drain_s=self._s.shutdown_deadline_s, release=True))

    # -- hand-overs -----------------------------------------------------------------------------------

    async def stop_all(self, reason: str, *, drain_s: float, release: bool) -> None:
        await asyncio.gather(*(self.stop(k, reason, drain_s=drain_s, release=release) for k in list(self.running)))

    async def stop(self, key: InstanceKey, reason: str, *, drain_s: float, release: bool) -> None:
        running = self.running.get(key)
        if running is None:
            return
        if running.stopping:
            await running.stopped.wait()  # another stop is handing it over: wait for it to finish
            return
        running.stopping = True
        try:
            await self._hand_over(running, reason, drain_s=drain_s, release=release)
        finally:
            del self.running[key]
            self._node.metrics.instances.set(len(self.running))
            with contextlib.suppress(KeyError):  # its lag is the next owner's to report
                self._node.metrics.checkpoint_lag.remove(str(key))
            running.stopped.set()

    async def _hand_over(self, running: Running, reason: str, *, drain_s: float, release: bool) -> None:
        running.task.cancel()
        await asyncio.gather(running.task, return_exceptions=True)
        instance = running.instance
        try:
            await instance.drain(drain_s)
        except StoreUnavailable as exc:
            self._node.metrics.store_error("drain")
            self._node.log.warning("drain_incomplete", instance=str(instance.instance), error=str(exc))
        self._node.log.info(
            "instance_stopped", instance=str(instance.instance), epoch=instance.claim.epoch, reason=reason
        )
        if release:
            await self._release(instance.claim)
        else:
            self._may_hold(instance.instance)

    async def _release_unrun(self, claim: Claim) -> None:
        self._node.log.info("claim_returned", instance=str(claim.instance), epoch=claim.epoch, reason="stopping")
        if await self._release(claim) and self._maybe_held is not None:
            self._maybe_held.discard(claim.instance)

    def _may_hold(self, key: InstanceKey) -> None:
        if self._maybe_held is not None:
            self._maybe_held.add(key)

    async def _release(self, claim: Claim) -> bool:
        """Give the claim up (if still held at its epoch); False if storage did not answer (then the
        claim is remembered and released later)."""
        try:
            released = await self._node.store.release(claim)
        except StoreUnavailable as exc:
            self._node.metrics.store_error("release")
            self._node.log.warning("release_failed", instance=str(claim.instance), error=str(exc))
            self._may_hold(claim.instance)
            return False
        if released:
            self._node.metrics.claims.labels("released").inc()
            self._node.log.info("instance_released", instance=str(claim.instance), epoch=claim.epoch)
        return True

    # -- verification ---------------------------------------------------------------------------------

    async def verify(self) -> None:
        await self._release_stray_claims()
        for key, running in list(self.running.items()):
            current = await self._node.store.get_claim(key)
            mine = running.instance.claim
            if current is None or (current.owner, current.epoch) != (mine.owner, mine.epoch):
                self._node.log.error(
                    "claim_lost", instance=str(key), epoch=mine.epoch, now_owner=current.owner if current else None
                )
                await self.stop(key, "claim_lost", drain_s=0, release=False)

    async def _release_stray_claims(self) -> None:
        """Release claims held under this node id by no running instance (the epoch in the release
        keeps a claim taken again meanwhile safe)."""
        if not self._maybe_held or self._lease.fenced:
            return
        for key in sorted(self._maybe_held):
            if key in self.running:
                self._maybe_held.discard(key)
                continue
            claim = await self._node.store.get_claim(key)
            if claim is not None and claim.owner == self.node_id and key not in self.running:
                self._node.log.info("stray_claim_released", instance=str(key), epoch=claim.epoch)
                if not await self._release(claim):
                    continue  # storage failed: next tick
            self._maybe_held.discard(key)

    def _task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        if self._spawn is None:
            raise RuntimeError("the node is not running")
        return self._spawn(coro)
