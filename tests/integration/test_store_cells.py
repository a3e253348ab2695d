"""What the Cassandra adapter leaves in Cassandra itself (TTL cells, tombstones, raw rows): the part of
the store's behaviour the port cannot show, so it is not in the contract suite (tests/contract)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cassandra.cluster import Session

from tests.integration.conftest import later
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import FireOutcome, InstanceKey, Schedule, Status

pytestmark = pytest.mark.integration
Factory = Callable[..., Schedule]
MINUTE = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


async def test_fired_rows_expire_with_their_row(
    store: CassandraStore, new_schedule: Factory, cql: Session, client_id: str
) -> None:
    s = new_schedule(later(30))
    await store.create_schedule(s, datetime.now(UTC))
    await store.record_outcomes(
        [FireOutcome(client_id, s.schedule_id, s.location, Status.SUCCEEDED, 1, datetime.now(UTC))]
    )
    loc = s.location
    row = cql.execute(
        "SELECT status, TTL(status) AS ttl, TTL(payload) AS payload_ttl, attempts FROM schedules "
        "WHERE client_id=%s AND poller_id=%s AND minute=%s AND due_at=%s AND schedule_id=%s",
        (client_id, loc.poller_id, loc.minute, loc.due_at, s.schedule_id),
    ).one()
    retention = store.settings.retention_s
    assert row.status == "succeeded" and row.attempts == 1
    assert row.payload_ttl is not None and retention < row.payload_ttl <= retention + 31
    # The outcome expires with the row: never first (the row would read as scheduled again), never after
    # (cells without a row would read as a row missing its callback).
    assert abs(row.ttl - row.payload_ttl) <= 2


async def test_minute_partitions_hold_no_tombstones(
    store: CassandraStore, new_schedule: Factory, cql: Session, client_id: str
) -> None:
    """Creates, outcomes and cancels must not write null cells: a poller's read would wade through them."""
    minute = timing.minute_bucket(later(7200))
    made = [new_schedule(minute + timedelta(seconds=i), poller_id=3) for i in range(6)]
    for s in made:
        await store.create_schedule(s, datetime.now(UTC))
    await store.record_outcomes(
        [FireOutcome(client_id, s.schedule_id, s.location, Status.SUCCEEDED, 1, datetime.now(UTC)) for s in made[:3]]
    )
    await store.cancel_schedule(made[3], datetime.now(UTC))
    result = cql.execute(
        "SELECT * FROM schedules WHERE client_id=%s AND poller_id=3 AND minute=%s", (client_id, minute), trace=True
    )
    assert len(result.current_rows) == 6
    events = [e.description for e in result.get_query_trace(max_wait_sec=10).events]
    reads = [e for e in events if "tombstone cells" in e]
    assert reads, events
    assert all(" 0 tombstone cells" in e for e in reads), reads


async def test_skipped_minutes_are_recorded(store: CassandraStore, cql: Session, client_id: str) -> None:
    await store.record_skipped(InstanceKey(client_id, 0), MINUTE, "older than catch-up window", 12)
    row = cql.execute(
        "SELECT reason, rows, TTL(reason) AS ttl FROM skipped_minutes WHERE client_id=%s AND poller_id=0", (client_id,)
    ).one()
    assert row.reason == "older than catch-up window" and row.rows == 12 and row.ttl > 0
