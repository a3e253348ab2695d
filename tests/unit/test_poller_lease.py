"""The node's lease as a fire's writes see it: held *since* the fire began. A node paused past its lease
and renewed on waking holds a lease again, but not the one its fire began under: another node may have
taken the instance and delivered the fire meanwhile (simulation seed 1109)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tests.unit.test_observability import NoDelivery
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema.memory import memory_store


async def renewed(node_ttl_s: int, fence_margin_s: float, silent_s: float) -> tuple[Node, float]:
    """A node whose lease has been held since ``silent_s + 1`` s ago, last renewed ``silent_s`` ago,
    renewed now; (it, the loop time the renewal found)."""
    settings = PollerSettings(node_id="n1", node_ttl_s=node_ttl_s, fence_margin_s=fence_margin_s)
    node = Node(settings, memory_store(lambda: datetime.now(UTC)), NoDelivery(), Metrics())  # type: ignore[arg-type]
    now = asyncio.get_running_loop().time()
    node._lease._heartbeat_ok, node._lease._lease_since = now - silent_s, now - silent_s - 1.0
    await node._lease.heartbeat()
    return node, now


async def test_a_renewal_after_a_lapse_does_not_cover_a_fire_begun_before_it() -> None:
    node, now = await renewed(2, 1.5, silent_s=3.0)  # a lease of 0.5 s, silent 3 s: a new lease begins
    assert node.lease_held()
    assert not node.lease_held(now - 2.9)
    assert node.lease_held(asyncio.get_running_loop().time())


async def test_renewals_within_the_lease_keep_it_continuous() -> None:
    node, now = await renewed(20, 5, silent_s=10.0)  # a lease of 15 s, silent 10 s: the same lease
    assert node.lease_held(now - 9.0)
    assert not node.lease_held(now - 12.0)  # before the lease it holds began


async def test_a_renewal_answered_after_the_lease_ran_out_fences_the_instances_of_before() -> None:
    """Sent within the lease, answered after it (a slow store): others may have seen this node's row expire
    and taken its instances before the write landed, so the renewal does not carry the old lease on
    (simulation seed 103286: the node went on firing an instance another node had claimed)."""
    settings = PollerSettings(node_id="n1", node_ttl_s=3, fence_margin_s=1.0, heartbeat_interval_s=0.5)  # lease 2 s
    store = memory_store(lambda: datetime.now(UTC))
    node = Node(settings, store, NoDelivery(), Metrics())  # type: ignore[arg-type]
    lease = node._lease
    fenced: list[bool] = []

    async def fence() -> None:
        fenced.append(True)

    lease._fence, lease._idle = fence, lambda: bool(fenced)  # an instance runs until the fence stops it
    renew = store.heartbeat

    async def slow_heartbeat(info: object, ttl_s: int) -> None:
        await asyncio.sleep(0.8)  # answered 0.3 s after the old lease ran out
        await renew(info, ttl_s)  # type: ignore[arg-type]

    store.heartbeat = slow_heartbeat  # type: ignore[method-assign]
    now = asyncio.get_running_loop().time()
    lease._heartbeat_ok = lease._lease_since = now - 1.5  # the old lease runs out at now + 0.5
    fire_began = now - 1.0  # under the old lease
    await lease.heartbeat()
    assert fenced == [True]  # the instances of before were stopped
    assert not lease.fenced  # and, none left running, the node holds a new lease, counted from the send
    assert node.lease_held()
    assert not node.lease_held(fire_began)  # a fire begun under the old lease writes nothing under the new
