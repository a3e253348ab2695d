"""Throttle policies and their tokens: slots taken by compare-and-set, freed by their holder or by TTL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.contract.conftest import Env
from tickd.schema.model import ThrottlePolicy, Token
from tickd.schema.store import Store


def policy(env: Env, client_id: str, name: str, max_in_flight: int = 2) -> ThrottlePolicy:
    now = env.later(0)
    return ThrottlePolicy(client_id, name, max_in_flight, 30, now, now)


async def test_policies_crud(env: Env, store: Store, client_id: str) -> None:
    assert await store.list_policies(client_id) == []
    b, a = policy(env, client_id, "b"), policy(env, client_id, "a")
    await store.put_policy(b)
    await store.put_policy(a)
    assert await store.get_policy(client_id, "a") == a
    assert await store.list_policies(client_id) == [a, b]  # by name

    resized = ThrottlePolicy(client_id, "a", 9, 60, a.created_at, env.later(1))
    await store.put_policy(resized)
    assert await store.get_policy(client_id, "a") == resized
    await store.delete_policy(client_id, "a")
    assert await store.get_policy(client_id, "a") is None
    assert await store.list_policies(client_id) == [b]
    assert await store.list_policies(f"{client_id}-other") == []
    await store.put_policy(a)  # a deleted policy can be created again
    assert await store.get_policy(client_id, "a") == a


async def test_a_slot_is_taken_once_and_released_by_its_holder(env: Env, store: Store, client_id: str) -> None:
    now = env.later(0)
    takers = [Token(client_id, "p", 0, f"event-{i}", f"node-{i}", now) for i in range(3)]
    won = await asyncio.gather(*(store.take_token(t, ttl_s=60) for t in takers))
    assert won.count(True) == 1
    winner = takers[won.index(True)]
    assert await store.tokens(client_id, "p") == [winner]

    assert not await store.release_token(client_id, "p", 0, "event-somebody-else")
    assert not await store.release_token(client_id, "p", 1, winner.event_id)  # a slot nobody holds
    assert await store.release_token(client_id, "p", 0, winner.event_id)
    assert not await store.release_token(client_id, "p", 0, winner.event_id)  # already released
    assert await store.tokens(client_id, "p") == []
    assert await store.take_token(takers[0], ttl_s=60)


async def test_tokens_in_slot_order(env: Env, store: Store, client_id: str) -> None:
    now = env.later(0)
    held = [Token(client_id, "q", slot, f"e{slot}", "node", now + timedelta(seconds=slot)) for slot in (2, 0, 1)]
    for token in held:
        assert await store.take_token(token, ttl_s=60)
    assert await store.tokens(client_id, "q") == sorted(held, key=lambda t: t.slot)
    assert await store.tokens(client_id, "other") == []


async def test_a_slot_whose_holder_died_frees_itself(env: Env, store: Store, client_id: str) -> None:
    token = Token(client_id, "p", 0, "event-1", "node-1", env.later(0))
    assert await store.take_token(token, ttl_s=1)
    await env.wait(2.0)
    assert await store.tokens(client_id, "p") == []
    assert not await store.release_token(client_id, "p", 0, "event-1")  # expired: nothing to release
    assert await store.take_token(Token(client_id, "p", 0, "event-2", "node-2", env.later(0)), ttl_s=60)
