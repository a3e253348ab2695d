"""Coordination in the store: claims under compare-and-set with an epoch, checkpoints fenced by write
timestamp, heartbeats that expire by TTL, horizons that only go up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tests.contract.conftest import Env
from tickd.schema.model import InstanceKey, NodeInfo
from tickd.schema.store import Store

MINUTE = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


async def test_two_concurrent_claimers_one_wins(env: Env, store: Store, client_id: str) -> None:
    instance = InstanceKey(client_id, 0)
    now = env.now()
    assert await store.get_claim(instance) is None
    first = await asyncio.gather(*(store.claim(instance, f"node-{i}", None, now) for i in range(2)))
    winners = [c for c in first if c is not None]
    assert len(winners) == 1 and winners[0].epoch == 1
    current = await store.get_claim(instance)
    assert current == winners[0]

    # A takeover from the same seen claim: again exactly one wins, and the epoch goes up.
    second = await asyncio.gather(*(store.claim(instance, f"node-{i}", current, now) for i in range(2, 5)))
    winners = [c for c in second if c is not None]
    assert len(winners) == 1 and winners[0].epoch == 2
    assert await store.get_claim(instance) == winners[0]
    # The loser of an old epoch cannot release the new owner's claim.
    assert not await store.release(first[0] or first[1])  # type: ignore[arg-type]
    assert await store.release(winners[0])
    assert not await store.release(winners[0])  # already released
    released = await store.get_claim(instance)
    assert released is not None and released.owner is None and released.epoch == 2


async def test_a_claim_is_taken_from_what_was_seen(env: Env, store: Store, client_id: str) -> None:
    instance = InstanceKey(client_id, 3)
    first = await store.claim(instance, "node-a", None, env.now())
    assert first is not None
    assert await store.claim(instance, "node-b", None, env.now()) is None  # it exists now
    taken = await store.claim(instance, "node-b", first, env.now())
    assert taken is not None and (taken.owner, taken.epoch) == ("node-b", 2)
    assert await store.claim(instance, "node-c", first, env.now()) is None  # a stale epoch
    assert await store.release(taken)
    again = await store.claim(instance, "node-a", await store.get_claim(instance), env.now())
    assert again is not None and (again.owner, again.epoch) == ("node-a", 3)


async def test_list_claims_reads_every_claim_over_pages(env: Env, client_id: str) -> None:
    store = await env.store_with(page_size=2)
    held = [await store.claim(InstanceKey(client_id, p), f"node-{p}", None, env.now()) for p in range(5)]
    assert all(c is not None for c in held)
    assert await store.release(held[1])
    mine = sorted((c for c in await store.list_claims() if c.instance.client_id == client_id), key=lambda c: c.instance)
    assert [(c.instance.poller_id, c.owner, c.epoch) for c in mine] == [
        (0, "node-0", 1),
        (1, None, 1),
        (2, "node-2", 1),
        (3, "node-3", 1),
        (4, "node-4", 1),
    ]


async def test_checkpoints_advance_only_for_the_current_epoch(env: Env, store: Store, client_id: str) -> None:
    instance = InstanceKey(client_id, 1)
    now = env.now()
    assert await store.get_checkpoint(instance) is None
    old = await store.claim(instance, "node-a", None, now)
    assert old is not None
    await store.write_checkpoint(old, MINUTE)
    await store.write_checkpoint(old, MINUTE + timedelta(minutes=1))
    await store.write_checkpoint(old, MINUTE)  # never moves backwards within an epoch
    cp = await store.get_checkpoint(instance)
    assert cp is not None and (cp.minute, cp.epoch) == (MINUTE + timedelta(minutes=1), 1)

    new = await store.claim(instance, "node-b", old, now)
    assert new is not None and new.epoch == 2
    await store.write_checkpoint(new, cp.minute)  # the new owner adopts the checkpoint under its epoch
    await store.write_checkpoint(old, MINUTE + timedelta(minutes=5))  # the stale owner keeps going
    cp = await store.get_checkpoint(instance)
    assert cp is not None and (cp.minute, cp.epoch) == (MINUTE + timedelta(minutes=1), 2)

    await store.write_checkpoint(new, MINUTE + timedelta(minutes=2))
    cp = await store.get_checkpoint(instance)
    assert cp is not None and (cp.minute, cp.epoch) == (MINUTE + timedelta(minutes=2), 2)


async def test_heartbeats_expire(env: Env, store: Store, client_id: str) -> None:
    now = env.now().replace(microsecond=0)
    node = NodeInfo(f"node-{client_id}", "127.0.0.1", 9100, now, now)
    await store.heartbeat(node, ttl_s=1)
    assert node in await store.live_nodes()
    await env.wait(2.0)
    assert node.node_id not in {n.node_id for n in await store.live_nodes()}

    await store.heartbeat(node, ttl_s=30)
    beat = NodeInfo(node.node_id, "127.0.0.2", 9101, now, now + timedelta(seconds=5))
    await store.heartbeat(beat, ttl_s=30)  # a heartbeat overwrites the node's row
    assert [n for n in await store.live_nodes() if n.node_id == node.node_id] == [beat]
    await store.leave(node.node_id)
    assert node.node_id not in {n.node_id for n in await store.live_nodes()}
    await store.heartbeat(node, ttl_s=30)  # a node that left may come back
    assert node in await store.live_nodes()
    await store.leave(node.node_id)


async def test_live_nodes_in_node_id_order(env: Env, store: Store, client_id: str) -> None:
    now = env.now().replace(microsecond=0)
    nodes = [NodeInfo(f"{client_id}-{c}", "10.0.0.1", 9100, now, now) for c in "cab"]
    for node in nodes:
        await store.heartbeat(node, ttl_s=30)
    ours = [n.node_id for n in await store.live_nodes() if n.node_id.startswith(client_id)]
    assert ours == sorted(n.node_id for n in nodes)
    for node in nodes:
        await store.leave(node.node_id)


async def test_skipped_minutes_are_kept_newest_first_per_instance(env: Env, store: Store, client_id: str) -> None:
    instance = InstanceKey(client_id, 0)
    await store.record_skipped(instance, MINUTE, "older than catch-up window", 12)
    await store.record_skipped(instance, MINUTE + timedelta(minutes=1), "older than catch-up window", 3)
    await store.record_skipped(InstanceKey(client_id, 1), MINUTE, "another instance's", 1)
    found = await store.skipped_minutes(instance, 10)
    assert [(s.minute, s.reason, s.rows) for s in found] == [
        (MINUTE + timedelta(minutes=1), "older than catch-up window", 3),
        (MINUTE, "older than catch-up window", 12),
    ]
    assert [s.minute for s in await store.skipped_minutes(instance, 1)] == [MINUTE + timedelta(minutes=1)]
    assert await store.skipped_minutes(InstanceKey(client_id, 2), 10) == []


async def test_ping(store: Store) -> None:
    assert await store.ping() is None  # its statement runs and answers (a broken one raises)
