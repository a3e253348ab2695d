"""Reads for the simulation's checkers, straight from the memory tables: at once, no request, so no fault
point and no yield to the loop."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from tickd.schema import timing
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


def auto_pauses(tables: Tables, client_id: str, schedule_id: UUID) -> list[tuple[datetime, str]]:
    """The schedule's auto-pauses in its audit trail: (when, the fire id whose dead letter set it off)."""
    rows = tables.partition(table("audit_by_schedule"), {"client_id": client_id, "schedule_id": schedule_id})
    return [(utc(r.at), json.loads(r.changes)["fire_id"]) for _, r in rows if r.action == "schedule.auto_pause"]


def bulk_changes(tables: Tables, client_id: str, request_id: str) -> list[tuple[str, datetime]]:
    """The schedules a bulk job changed (its audit records: request id ``bulk:<job id>``), with when."""
    rows = tables.scan(table("audit_by_client"))
    return sorted(
        (r.target, utc(r.at))
        for _, r in rows
        if r.client_id == client_id and r.request_id == request_id and r.action in ("schedule.pause", "schedule.cancel")
    )


def notices(tables: Tables, client_id: str, kind: str, target: str) -> int:
    """How many of the client's notices of ``kind`` name ``target``, over all its days."""
    rows = tables.scan(table("notices"))
    return sum(1 for _, r in rows if r.client_id == client_id and r.action == kind and r.target == target)


def current_status(tables: Tables, client_id: str, schedule_id: UUID) -> tuple[str, datetime] | None:
    """The status of the schedule's current row and when its pointer was last written (store clock);
    None if either is gone."""
    key = {"client_id": client_id, "schedule_id": schedule_id}
    ref = tables.row(table("schedule_refs"), key)
    written = written_us(tables, "schedule_refs", key)
    if ref is None or written is None:
        return None
    due = utc(ref.due_at)
    row_key = {"client_id": client_id, "poller_id": ref.poller_id, "minute": timing.minute_bucket(due), "due_at": due}
    row = tables.row(table("schedules"), {**row_key, "schedule_id": schedule_id})
    if row is None:
        return None
    return str(row.status), datetime.fromtimestamp(written / 1e6, UTC)


def skipped_runs(tables: Tables, client_id: str, schedule_id: UUID) -> dict[int, str]:
    """The schedule's runs recorded skipped: nominal time (epoch ms) and the reason."""
    rows = tables.partition(table("runs"), {"client_id": client_id, "schedule_id": schedule_id})
    return {timing.to_epoch_ms(utc(r.nominal_at)): str(r.last_error) for _, r in rows if r.status == "skipped"}


def superseded_runs(tables: Tables, client_id: str, schedule_id: UUID) -> set[int]:
    """The schedule's occurrences recorded superseded (dropped for a client's change): nominal epoch ms."""
    rows = tables.partition(table("runs"), {"client_id": client_id, "schedule_id": schedule_id})
    return {timing.to_epoch_ms(utc(r.nominal_at)) for _, r in rows if r.status == "moved"}


def skipped_at(tables: Tables, client_id: str, schedule_id: UUID, nominal_at: datetime) -> int | None:
    """When the occurrence's run was written, if it is recorded skipped (a missed-fire policy gave it up):
    the write timestamp (µs); None if it is not."""
    key = {"client_id": client_id, "schedule_id": schedule_id, "nominal_at": nominal_at}
    run = tables.row(table("runs"), key)
    if run is None or run.status != "skipped":
        return None
    return written_us(tables, "runs", key)


def paused_since(tables: Tables, client_id: str, schedule_id: UUID) -> datetime | None:
    """If the schedule's current row is paused: when its pointer was last written (the pause's write,
    store clock); else None."""
    key = {"client_id": client_id, "schedule_id": schedule_id}
    ref = tables.row(table("schedule_refs"), key)
    if ref is None:
        return None
    due = utc(ref.due_at)
    row_key = {"client_id": client_id, "poller_id": ref.poller_id, "minute": timing.minute_bucket(due), "due_at": due}
    row = tables.row(table("schedules"), {**row_key, "schedule_id": schedule_id})
    written = written_us(tables, "schedule_refs", key)
    if row is None or row.status != "paused" or written is None:
        return None
    return datetime.fromtimestamp(written / 1e6, UTC)
