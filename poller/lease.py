"""The node's lease: a TTL'd row in ``nodes``, renewed by the heartbeat loop. If it cannot be renewed in
time the node fences itself (stops every instance) before anyone else may consider it dead.

Loop time (monotonic; virtual under the simulation) measures the lease: it counts from when a renewal was
*sent*, and a renewal after a lapse begins a new lease (``held(since)`` tells a fire begun under the old
one that it no longer holds it). A heartbeat the store does not answer is logged (``heartbeat_failed``)
and counted; the fence (``node_fenced``) is the only way this part stops anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tickd.poller.context import NodeContext
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import NodeInfo


class NodeLease:
    def __init__(self, node: NodeContext, fence: Callable[[], Awaitable[None]], idle: Callable[[], bool]) -> None:
        """``fence`` stops every instance (without releasing them) once the lease has lapsed; ``idle``:
        whether no instance runs here (a fenced node is unfenced only once every instance of before is
        stopped)."""
        self._s = node.settings
        self._node = node
        self._fence = fence
        self._idle = idle
        self._started_at = node.clock()
        self.fenced = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat_ok = 0.0  # loop time the last answered heartbeat was sent
        self._lease_since = 0.0  # loop time since which the lease has been held without a lapse

    def begin(self) -> None:
        """The node starts: its lease counts from now."""
        self._loop = asyncio.get_running_loop()
        self._heartbeat_ok = self._lease_since = self._loop.time()

    def age_s(self) -> float:
        """Since the last answered heartbeat was sent (0 before the node runs)."""
        return 0.0 if self._loop is None else max(0.0, self._loop.time() - self._heartbeat_ok)

    def held(self, since: float | None = None) -> bool:
        """True while no other node can have declared this one dead: the last heartbeat sent and answered
        is younger than the node TTL less the fence margin. Instances check it right before each fire,
        so a node that was paused (GC, SIGSTOP) past its TTL fires nothing when it resumes.

        ``since`` (loop time): and held without a lapse since then. A fire's writes check this: a node
        paused past its lease, then renewed, may have lost the fire's instance to another node meanwhile
        (simulation seed 1109: a durable retry finished after the next owner had delivered the fire)."""
        silent_s = asyncio.get_running_loop().time() - self._heartbeat_ok
        held = not self.fenced and silent_s <= self._s.node_ttl_s - self._s.fence_margin_s
        return held and (since is None or self._lease_since <= since)

    async def first_heartbeat(self, stop: asyncio.Event) -> None:
        """A node starts only once it is in the membership table; a store that is down is waited out."""
        delay = 0.2
        while not stop.is_set():
            try:
                await self.heartbeat()
                return
            except (StoreUnavailable, TimeoutError) as exc:
                self._node.metrics.store_error("heartbeat")
                self._node.log.warning("heartbeat_failed", error=str(exc) or type(exc).__name__, wait_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def heartbeat(self) -> None:
        """Renew the lease (a fenced node with no instance left may fire again)."""
        now = self._node.clock()
        info = NodeInfo(self._s.node_id, self._s.metrics_host, self._s.metrics_port, self._started_at, now)
        # A busy node's write may be slow to come back; give it half the time left before fencing.
        budget_s = max(self._s.heartbeat_interval_s * 2, (self._s.node_ttl_s - self._s.fence_margin_s) / 2)
        # The lease counts from when the write was *sent*: its TTL started no earlier, so others cannot
        # see this node gone before the lease ends, however late the answer comes back.
        loop = asyncio.get_running_loop()
        sent = loop.time()
        async with asyncio.timeout(budget_s):
            await self._node.store.heartbeat(info, self._s.node_ttl_s)
        # Answered after the lease ran out (sent in time, answered late): until the write landed, others may
        # have seen this node's row expire and taken its instances. That is a lapse like any other: the
        # instances of before stop (the fence) and a new lease begins at the answer, so no fire begun
        # under the old one writes under the new one (simulation seed 103286: a renewal answered 3.3 s late
        # covered the gap, and the node went on firing an instance another node had claimed).
        if not self._idle():
            await self._fence_if_lapsed()
        if loop.time() - self._heartbeat_ok > self._s.node_ttl_s - self._s.fence_margin_s:
            self._lease_since = loop.time()  # the lease had run out before this renewal: a new one begins
        self._heartbeat_ok = max(self._heartbeat_ok, sent)
        if self.fenced and self._idle():  # unfenced only once every instance of before is stopped
            self.fenced = False
            self._node.log.warning("node_unfenced")

    async def tick(self) -> None:
        """One turn of the heartbeat loop."""
        # Checked before renewing too: a node that was paused past its lease may have lost its instances
        # meanwhile, and a fresh heartbeat must not make its old instances look owned again.
        await self._fence_if_lapsed()
        try:
            await self.heartbeat()
        except (StoreUnavailable, TimeoutError) as exc:
            self._node.metrics.store_error("heartbeat")
            self._node.log.warning("heartbeat_failed", error=str(exc) or type(exc).__name__)
        await self._fence_if_lapsed()

    async def _fence_if_lapsed(self) -> None:
        """Others will think us dead at node_ttl_s: stop firing before they may start. The flag is set
        before anything awaits, so no instance fires once the lapse is seen."""
        if self.fenced or self.held():
            return
        self.fenced = True
        silent_s = asyncio.get_running_loop().time() - self._heartbeat_ok
        self._node.log.error("node_fenced", silent_s=round(silent_s, 2))
        await self._fence()
