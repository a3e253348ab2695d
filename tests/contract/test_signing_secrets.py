"""Webhook signing secrets in the store: made at registration or lazily (compare-and-set, the first
writer wins), rotated only from the secret the rotation read, never touched by ``update_client``."""

from __future__ import annotations

import asyncio
import dataclasses

from tests.contract.conftest import Env, make_client
from tickd.schema.model import Client
from tickd.schema.store import Store


async def _stored(store: Store, client_id: str) -> Client:
    client = await store.get_client(client_id)
    assert client is not None
    return client


async def test_a_registered_secret_is_read_back_and_kept_by_updates(env: Env, store: Store, client_id: str) -> None:
    client = dataclasses.replace(make_client(env, client_id), signing_secret="whsec_first")
    assert await store.create_client(client)
    await store.update_client(dataclasses.replace(client, poller_count=2))
    stored = await _stored(store, client_id)
    assert (stored.signing_secret, stored.signing_secret_previous, stored.signing_previous_until) == (
        "whsec_first",
        "",
        None,
    )
    assert stored.poller_count == 2
    assert await store.ensure_signing_secret(client_id, "whsec_other") == "whsec_first"
    assert [c.signing_secret for c in await store.list_clients() if c.client_id == client_id] == ["whsec_first"]


async def test_a_client_without_a_secret_gets_the_first_candidate(env: Env, store: Store, client_id: str) -> None:
    assert await store.ensure_signing_secret(client_id, "whsec_x") is None  # unknown client: nothing written
    assert await store.get_client(client_id) is None
    assert await store.create_client(make_client(env, client_id))  # as registered before migration 006
    found = await asyncio.gather(*(store.ensure_signing_secret(client_id, f"whsec_{i}") for i in range(5)))
    assert len(set(found)) == 1 and found[0] in {f"whsec_{i}" for i in range(5)}
    assert (await _stored(store, client_id)).signing_secret == found[0]
    assert (await _stored(store, client_id)).ack_secret == ""  # the two secrets are separate cells


async def test_a_rotation_keeps_the_previous_secret_until_its_expiry(env: Env, store: Store, client_id: str) -> None:
    assert await store.create_client(dataclasses.replace(make_client(env, client_id), signing_secret="whsec_a"))
    until = env.later(3600)
    assert await store.rotate_signing_secret(client_id, "whsec_a", "whsec_b", until)
    stored = await _stored(store, client_id)
    assert (stored.signing_secret, stored.signing_secret_previous, stored.signing_previous_until) == (
        "whsec_b",
        "whsec_a",
        until,
    )
    assert stored.signing_secrets(env.later(0)) == ("whsec_b", "whsec_a")
    assert stored.signing_secrets(until) == ("whsec_b",)


async def test_a_rotation_from_a_stale_secret_is_refused(env: Env, store: Store, client_id: str) -> None:
    assert not await store.rotate_signing_secret(client_id, "whsec_a", "whsec_b", env.later(60))  # no client
    assert await store.create_client(dataclasses.replace(make_client(env, client_id), signing_secret="whsec_a"))
    tries = [store.rotate_signing_secret(client_id, "whsec_a", f"whsec_n{i}", env.later(60)) for i in range(4)]
    landed = await asyncio.gather(*tries)
    assert landed.count(True) == 1
    stored = await _stored(store, client_id)
    assert stored.signing_secret == f"whsec_n{landed.index(True)}" and stored.signing_secret_previous == "whsec_a"
    assert not await store.rotate_signing_secret(client_id, "whsec_a", "whsec_late", env.later(60))
    assert (await _stored(store, client_id)).signing_secret == stored.signing_secret
