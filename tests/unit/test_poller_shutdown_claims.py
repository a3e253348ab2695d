"""A claim in flight when the node stops: the write may finish after its loop was cancelled (a store call
that completes what it began), and the instance it wins must not start behind the node's hand-over
(simulation seed 102673: an instance claimed during the stop ran on, never handed over, and the node's stop
never finished)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tests.unit.test_observability import NoDelivery
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema.memory import memory_store
from tickd.schema.model import Claim, Client, InstanceKey


async def test_a_claim_won_while_the_node_stops_is_given_back_not_run() -> None:
    store = memory_store(lambda: datetime.now(UTC))
    at = datetime.now(UTC)
    await store.create_client(Client("c0", 1, True, "hash", at, at))
    settings = PollerSettings(node_id="n1", ring_refresh_s=0.05, heartbeat_interval_s=0.2, shutdown_deadline_s=1.0)
    node = Node(settings, store, NoDelivery(), Metrics())  # type: ignore[arg-type]
    claiming, answer = asyncio.Event(), asyncio.Event()
    claim = store.claim

    async def claim_finishing_what_it_began(
        key: InstanceKey, node_id: str, seen: Claim | None, now: datetime
    ) -> Claim | None:
        claiming.set()
        write = asyncio.ensure_future(answer.wait())
        while not write.done():  # like a write that is sent: a cancel waits for its answer
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                continue
        return await claim(key, node_id, seen, now)

    store.claim = claim_finishing_what_it_began  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.create_task(node.run(stop))
    await asyncio.wait_for(claiming.wait(), 10)
    stop.set()  # the node stops with the claim in flight ...
    await asyncio.sleep(0.1)
    answer.set()  # ... and the claim lands afterwards
    await asyncio.wait_for(run, 10)  # the stop finishes
    assert node.running == {}
    held = await store.get_claim(InstanceKey("c0", 0))
    assert held is None or held.owner is None  # given back: the next owner need not wait
