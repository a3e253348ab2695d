"""Idempotency keys and ack secrets in the store: both are compare-and-set, so the first writer wins and
every later (or concurrent) caller is told what it won with."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from tests.contract.conftest import Env, make_client
from tickd.schema.model import IdempotencyKey
from tickd.schema.store import Store


def _reservation(env: Env, client_id: str, key: str = "k1", digest: str = "d1") -> IdempotencyKey:
    return IdempotencyKey(client_id, key, uuid.uuid4(), digest, env.later(0))


async def test_a_key_is_reserved_once_and_tells_who_holds_it(env: Env, store: Store, client_id: str) -> None:
    first = _reservation(env, client_id)
    assert await store.reserve_idempotency_key(first) is first  # identity: the caller's own reservation
    second = dataclasses.replace(_reservation(env, client_id, digest="d2"), created_at=env.later(5))
    held_by_first = await store.reserve_idempotency_key(second)
    assert held_by_first == first and held_by_first is not second  # its id, digest and time: not the caller's
    other_client = _reservation(env, f"{client_id}-other")
    assert await store.reserve_idempotency_key(other_client) == other_client
    other_key = _reservation(env, client_id, key="k2")
    assert await store.reserve_idempotency_key(other_key) == other_key


async def test_concurrent_reservations_of_one_key_agree_on_one_winner(env: Env, store: Store, client_id: str) -> None:
    tries = [_reservation(env, client_id) for _ in range(20)]
    held = await asyncio.gather(*(store.reserve_idempotency_key(r) for r in tries))
    assert len({h.schedule_id for h in held}) == 1
    assert held[0] in tries and all(h == held[0] for h in held)


async def test_a_key_without_a_digest_reads_back_as_none(env: Env, store: Store, client_id: str) -> None:
    legacy = IdempotencyKey(client_id, "old", uuid.uuid4(), None, None)
    assert await store.reserve_idempotency_key(legacy) == legacy
    assert await store.reserve_idempotency_key(_reservation(env, client_id, key="old")) == legacy


async def test_the_first_ack_secret_wins_and_updates_keep_it(env: Env, store: Store, client_id: str) -> None:
    assert await store.ensure_ack_secret(client_id, "s1") is None  # unknown client: nothing written
    assert await store.get_client(client_id) is None
    client = make_client(env, client_id)
    assert await store.create_client(client)
    found = await asyncio.gather(*(store.ensure_ack_secret(client_id, f"s{i}") for i in range(5)))
    assert len(set(found)) == 1 and found[0] in {f"s{i}" for i in range(5)}
    assert await store.ensure_ack_secret(client_id, "late") == found[0]
    await store.update_client(dataclasses.replace(client, poller_count=2))
    stored = await store.get_client(client_id)
    assert stored is not None and stored.ack_secret == found[0] and stored.poller_count == 2


async def test_a_client_registered_with_a_secret_keeps_it(env: Env, store: Store, client_id: str) -> None:
    assert await store.create_client(dataclasses.replace(make_client(env, client_id), ack_secret="mine"))
    assert await store.ensure_ack_secret(client_id, "other") == "mine"
    assert [c.ack_secret for c in await store.list_clients() if c.client_id == client_id] == ["mine"]
