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
from tickd.schema.memory import MemoryStore


def node_with(settings: PollerSettings) -> Node:
    return Node(settings, MemoryStore(lambda: datetime.now(UTC)), NoDelivery(), Metrics())  # type: ignore[arg-type]


async def test_a_renewal_after_a_lapse_does_not_cover_a_fire_begun_before_it() -> None:
    settings = PollerSettings(node_id="n1", node_ttl_s=2, fence_margin_s=1.5)  # a lease of 0.5 s
    node = node_with(settings)
    now = asyncio.get_running_loop().time()
    node._heartbeat_ok = node._lease_since = now - 3.0
    began = now - 2.9
    await node._heartbeat()  # 3 s silent: the lease had run out; this renewal starts a new one
    assert node.lease_held()
    assert not node.lease_held(began)
    assert node.lease_held(asyncio.get_running_loop().time())


async def test_renewals_within_the_lease_keep_it_continuous() -> None:
    settings = PollerSettings(node_id="n1", node_ttl_s=20, fence_margin_s=5)  # a lease of 15 s
    node = node_with(settings)
    now = asyncio.get_running_loop().time()
    node._heartbeat_ok = node._lease_since = now - 10.0
    began = now - 9.0
    await node._heartbeat()
    assert node.lease_held(began)
    assert not node.lease_held(now - 11.0)  # before the lease it holds began
