"""Reads for the simulation's checkers, straight from the memory tables: at once, no request, so no fault
point and no yield to the loop."""

from __future__ import annotations

from typing import Any

from tickd.schema.cassandra.bridge import utc
from tickd.schema.memory import Tables, cql_schema
from tickd.schema.memory.engine import Table
from tickd.schema.model import Claim, InstanceKey, Token


def table(name: str) -> Table:
    """A table's key, as the migrations declare it (``cql_schema``)."""
    return cql_schema.load()[name].table


def claim(tables: Tables, instance: InstanceKey) -> Claim | None:
    row = tables.row(table("instance_claims"), {"client_id": instance.client_id, "poller_id": instance.poller_id})
    return Claim(instance, row.owner, row.epoch) if row is not None else None


def tokens(tables: Tables, client_id: str, policy: str) -> list[Token]:
    rows = tables.partition(table("throttle_tokens"), {"client_id": client_id, "policy": policy})
    return [Token(client_id, policy, r.slot, r.event_id, r.holder, utc(r.taken_at)) for _, r in rows]


def written_us(tables: Tables, table_name: str, key: dict[str, Any]) -> int | None:
    """The highest write timestamp among the cells (and marker) stored at the row's full primary key,
    live or not (None: nothing stored there)."""
    t = table(table_name)
    partition, clustering = t.split(key)
    row = tables._data.get(t.name, {}).get(partition, {}).get(clustering)
    return max((cell.ts for cell in row.cells.values()), default=None) if row is not None else None
