"""The node's throttle gate against the real Cassandra: tokens in due-time order, a given-back token
reused at once, timeouts release and count, and two gates (two nodes) never exceed the limit together."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from tickd.poller.metrics import Metrics
from tickd.poller.throttle import ThrottleGate
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import ThrottlePolicy

pytestmark = pytest.mark.integration
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)


async def policy(store: CassandraStore, client_id: str, limit: int, timeout_s: int) -> None:
    await store.put_policy(ThrottlePolicy(client_id, "p", limit, timeout_s, now(), now()))


async def test_waiters_get_tokens_in_due_order(store: CassandraStore, client_id: str) -> None:
    await policy(store, client_id, 1, 60)
    gate = ThrottleGate(store, "node-a", now, Metrics(), poll_s=0.05)
    order: list[str] = []

    async def wait(event_id: str, due_s: int) -> None:
        token = await gate.acquire(client_id, "p", event_id, T0 + timedelta(seconds=due_s))
        assert token is not None
        order.append(event_id)
        await asyncio.sleep(0.05)
        await gate.not_delivered(token)  # hand the only slot on

    # Queued latest-due first: the gate still serves them by due time (after whichever got in first).
    tasks = [asyncio.create_task(wait(f"e{due}", due)) for due in (5, 4, 3, 2, 1)]
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    await gate.close()
    assert order[1:] == sorted(order[1:], key=lambda e: int(e[1:]))
    assert await store.tokens(client_id, "p") == []


async def test_timeout_releases_and_counts(store: CassandraStore, client_id: str) -> None:
    await policy(store, client_id, 1, 1)
    metrics = Metrics()
    gate = ThrottleGate(store, "node-a", now, metrics, poll_s=0.05)
    first = await gate.acquire(client_id, "p", "e1", T0)
    assert first is not None
    gate.delivered(first)
    started = asyncio.get_running_loop().time()
    second = await asyncio.wait_for(gate.acquire(client_id, "p", "e2", T0), 10)  # waits for e1's timeout
    assert second is not None and second.slot == first.slot
    assert asyncio.get_running_loop().time() - started >= 0.5
    assert metrics.throttle_auto_released.labels(client_id, "p")._value.get() == 1
    await gate.not_delivered(second)
    await gate.close()


async def test_two_gates_share_the_limit(store: CassandraStore, client_id: str) -> None:
    """Two nodes' gates, 40 events, limit 3: at no moment more than 3 tokens held between them."""
    await policy(store, client_id, 3, 60)
    gates = [ThrottleGate(store, f"node-{i}", now, Metrics(), poll_s=0.02) for i in range(2)]
    holding = peak = 0

    async def event(i: int) -> None:
        nonlocal holding, peak
        token = await gates[i % 2].acquire(client_id, "p", f"e{i}", T0 + timedelta(milliseconds=i))
        assert token is not None
        holding += 1
        peak = max(peak, holding)
        await asyncio.sleep(0.02)
        holding -= 1
        await gates[i % 2].not_delivered(token)

    await asyncio.wait_for(asyncio.gather(*(event(i) for i in range(40))), 60)
    for gate in gates:
        await gate.close()
    assert peak == 3  # the limit is reached and never passed
