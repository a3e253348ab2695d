from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from cassandra.cluster import Session

from schema.cassandra import CassandraStore
from schema.model import Client, DeadLetter, HttpCallback, InstanceKey, NodeInfo
from tests.integration.conftest import make_client

pytestmark = pytest.mark.integration
MINUTE = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


async def test_clients_create_once_update_list(store: CassandraStore, client_id: str) -> None:
    client = make_client(client_id, pollers=4)
    assert await store.create_client(client)
    assert not await store.create_client(make_client(client_id, pollers=9))
    got = await store.get_client(client_id)
    assert got is not None and got.poller_count == 4 and got.poller_span == 4

    shrunk = Client(
        client_id,
        2,
        False,
        "h2",
        got.created_at,
        datetime.now(UTC),
        poller_span=4,
        kafka_topics=frozenset({"orders."}),
        resized_at=datetime.now(UTC),
    )
    await store.update_client(shrunk)
    got = await store.get_client(client_id)
    assert got is not None and (got.poller_count, got.poller_span, got.active) == (2, 4, False)
    assert got.kafka_topics == {"orders."} and got.api_key_hash == "h2"
    assert client_id in {c.client_id for c in await store.list_clients()}
    assert await store.get_client("nobody-" + client_id) is None


async def test_two_concurrent_claimers_one_wins(store: CassandraStore, client_id: str) -> None:
    instance = InstanceKey(client_id, 0)
    now = datetime.now(UTC)
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
    released = await store.get_claim(instance)
    assert released is not None and released.owner is None and released.epoch == 2


async def test_checkpoints_advance_only_for_the_current_epoch(store: CassandraStore, client_id: str) -> None:
    instance = InstanceKey(client_id, 1)
    now = datetime.now(UTC)
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


async def test_heartbeats_expire(store: CassandraStore, client_id: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    node = NodeInfo(f"node-{client_id}", "127.0.0.1", 9100, now, now)
    await store.heartbeat(node, ttl_s=2)
    assert node in await store.live_nodes()
    await asyncio.sleep(3.0)
    assert node.node_id not in {n.node_id for n in await store.live_nodes()}
    await store.heartbeat(node, ttl_s=30)
    await store.leave(node.node_id)
    assert node.node_id not in {n.node_id for n in await store.live_nodes()}


async def test_dead_letters_round_trip(store: CassandraStore, client_id: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    letter = DeadLetter(client_id, uuid.uuid4(), "fid", now, 5, "HTTP 500", HttpCallback(url="http://x/"), b"{}")
    await store.add_dead_letter(letter)
    assert await store.dead_letters(client_id, now.date()) == [letter]


async def test_skipped_minutes_are_recorded(store: CassandraStore, cql: Session, client_id: str) -> None:
    await store.record_skipped(InstanceKey(client_id, 0), MINUTE, "older than catch-up window", 12)
    row = cql.execute(
        "SELECT reason, rows, TTL(reason) AS ttl FROM skipped_minutes WHERE client_id=%s AND poller_id=0", (client_id,)
    ).one()
    assert row.reason == "older than catch-up window" and row.rows == 12 and row.ttl > 0
