"""A ``clients`` row that no ``insert_client`` wrote is not a client. Cassandra applies ``UPDATE ... IF col =
null`` on a missing row (checked on the server, issue 26), so such a row can exist; the adapter read it as a
client and failed on its missing ``created_at``, and with it every ``list_clients`` (every poller's client
refresh, the admin's list) for every tenant. Run on the Cassandra adapter's own code over the memory
connection, which executes the same statement."""

from __future__ import annotations

from datetime import UTC, datetime

from tickd.schema.memory import memory_store
from tickd.schema.model import Client


async def test_a_row_no_insert_wrote_is_not_listed_and_not_found() -> None:
    store = memory_store(lambda: datetime.now(UTC))
    at = datetime.now(UTC)
    assert await store.create_client(Client("real", 2, True, "hash", at, at))
    applied, _ = await store._db.applied("set_ack_secret", {"client_id": "ghost", "ack_secret": "s"})
    assert applied  # as on Cassandra: the condition holds on a missing row, and a partial row is written
    assert [c.client_id for c in await store.list_clients()] == ["real"]
    assert await store.get_client("ghost") is None
    assert (await store.get_client("real")) is not None
