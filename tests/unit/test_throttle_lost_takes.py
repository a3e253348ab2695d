"""The throttle gate and tokens whose answers were lost or read late (in-memory store, faults injected)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tests.contract.conftest import FailOn
from tickd.poller.metrics import Metrics
from tickd.poller.throttle import ThrottleGate
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import MemoryConnection, memory_store
from tickd.schema.model import ThrottlePolicy, Token

NOW = datetime(2030, 1, 1, tzinfo=UTC)


async def _store(limit: int) -> CassandraStore:
    store = memory_store(lambda: NOW)
    await store.put_policy(ThrottlePolicy("c0", "p", limit, 60, NOW, NOW))
    return store


async def test_a_take_applied_with_its_answer_lost_is_handed_to_its_event() -> None:
    store = await _store(limit=1)
    assert isinstance(store.connection, MemoryConnection)
    store.connection.faults = FailOn(after=("take_token",))
    gate = ThrottleGate(store, "n0", lambda: NOW, Metrics(), poll_s=0.01)
    token = await asyncio.wait_for(gate.acquire("c0", "p", "e1", NOW), 5)
    assert token is not None and token.event_id == "e1" and token.slot == 0
    assert [t.event_id for t in await store.tokens("c0", "p")] == ["e1"]  # one slot, not a second take
    await gate.close()


class StaleTokens(CassandraStore):
    """A tokens read that answers with what it saw when the test froze it (a read answered late)."""

    frozen: list[Token] | None = None

    async def tokens(self, client_id: str, policy: str) -> list[Token]:
        fresh = await super().tokens(client_id, policy)
        return list(self.frozen) if self.frozen is not None else fresh


async def test_a_token_released_since_a_late_read_is_not_handed_out() -> None:
    """Seed 7173: a read sent while this node held a token for e1, answered after e1's delivery failed
    and gave the token back; e1's retry must take a slot, not be handed the token that no longer is."""
    store = memory_store(lambda: NOW, kind=StaleTokens)
    await store.put_policy(ThrottlePolicy("c0", "p", 2, 60, NOW, NOW))
    gate = ThrottleGate(store, "n0", lambda: NOW, Metrics(), poll_s=0.01)
    first = await gate.acquire("c0", "p", "e1", NOW)
    assert first is not None
    store.frozen = await store.tokens("c0", "p")  # shows e1 holding a slot ...
    await gate.not_delivered(first)  # ... which it gave back
    retry = await asyncio.wait_for(gate.acquire("c0", "p", "e1", NOW), 5)
    store.frozen = None
    assert retry is not None
    assert retry.event_id in {t.event_id for t in await store.tokens("c0", "p")}  # it holds what it was given
    await gate.close()
