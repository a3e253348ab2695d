"""Business keys in the store, on both sessions: a key is claimed once (IF NOT EXISTS), moved only from
the schedule it still names (IF schedule_id = ...), and belongs to its client."""

from __future__ import annotations

import asyncio
import uuid

from tests.contract.conftest import Env
from tickd.schema.model import BusinessKey
from tickd.schema.store import Store


async def test_claim_once(env: Env, store: Store, client_id: str) -> None:
    at = env.later(0)
    first = BusinessKey(client_id, "order-42", uuid.uuid4(), at)
    assert await store.get_business_key(client_id, "order-42") is None
    assert await store.claim_business_key(first) == first
    second = BusinessKey(client_id, "order-42", uuid.uuid4(), env.later(1))
    assert await store.claim_business_key(second) == first  # taken: the holder stands
    assert await store.get_business_key(client_id, "order-42") == first
    assert await store.get_business_key("another-client", "order-42") is None


async def test_move_from_the_schedule_seen(env: Env, store: Store, client_id: str) -> None:
    first = BusinessKey(client_id, "k:1@x", uuid.uuid4(), env.later(0))
    await store.claim_business_key(first)
    moved = BusinessKey(client_id, "k:1@x", uuid.uuid4(), env.later(1))
    assert await store.move_business_key(first, moved) == moved
    stale = BusinessKey(client_id, "k:1@x", uuid.uuid4(), env.later(2))
    assert await store.move_business_key(first, stale) == moved  # it no longer names the one seen
    assert await store.get_business_key(client_id, "k:1@x") == moved


async def test_concurrent_claims_leave_one(env: Env, store: Store, client_id: str) -> None:
    claims = [BusinessKey(client_id, "race", uuid.uuid4(), env.later(0)) for _ in range(10)]
    results = await asyncio.gather(*(store.claim_business_key(c) for c in claims))
    winners = {r.schedule_id for r in results if r is not None}
    assert len(winners) == 1 and winners <= {c.schedule_id for c in claims}
