from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cassandra.cluster import Session

from schema import timing
from schema.cassandra import CassandraStore
from schema.errors import Conflict
from schema.model import FireOutcome, InstanceKey, KafkaCallback, Location, Schedule, Status
from tests.integration.conftest import later

pytestmark = pytest.mark.integration
Factory = Callable[..., Schedule]


async def test_create_read_cancel(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(later(3600), poller_id=2, callback=KafkaCallback(topic="orders.fired"))
    await store.create_schedule(s, datetime.now(UTC))

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got == s

    cancelled = await store.cancel_schedule(got, datetime.now(UTC))
    assert cancelled.status is Status.CANCELLED and cancelled.version == 2
    again = await store.get_schedule(client_id, s.schedule_id)
    assert again is not None and again.status is Status.CANCELLED and again.version == 1
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.version == 2


async def test_create_schedules_writes_a_group(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    group = [new_schedule(later(60 * i), poller_id=i % 3) for i in range(1, 6)]
    await store.create_schedules(group, datetime.now(UTC))
    for s in group:
        assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_unknown_and_foreign_schedules_are_not_found(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(later(600))
    await store.create_schedule(s, datetime.now(UTC))
    assert await store.get_schedule("someone-else", s.schedule_id) is None
    assert await store.get_schedule(client_id, new_schedule(later(1)).schedule_id) is None


async def test_stale_change_conflicts(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(later(3600))
    await store.create_schedule(s, datetime.now(UTC))
    await store.cancel_schedule(s, datetime.now(UTC))
    with pytest.raises(Conflict):
        await store.cancel_schedule(s, datetime.now(UTC))  # still version 1: someone changed it since


async def test_replace_moves_the_row_and_leaves_no_live_copy(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(later(3600), poller_id=1)
    await store.create_schedule(s, datetime.now(UTC))
    new_due = later(7200)
    moved = await store.replace_schedule(
        s, dataclasses.replace(s, location=Location(3, new_due), fire_at=new_due, payload=b"{}"), datetime.now(UTC)
    )
    assert moved.version == 2

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location == Location(3, new_due) and got.payload == b"{}"
    old_rows = [r async for page in store.read_minute(s.instance, s.location.minute) for r in page]
    assert [r.status for r in old_rows if r.schedule_id == s.schedule_id] == [Status.MOVED]


async def test_concurrent_changes_only_one_wins(store: CassandraStore, new_schedule: Factory) -> None:
    s = new_schedule(later(3600))
    await store.create_schedule(s, datetime.now(UTC))
    moves = [
        store.replace_schedule(s, dataclasses.replace(s, location=Location(p, later(4000 + p))), datetime.now(UTC))
        for p in range(4)
    ]
    results = await asyncio.gather(*moves, return_exceptions=True)
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, BaseException))


async def test_read_minute_in_due_order_across_pages(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    minute = timing.minute_bucket(later(3 * 3600))
    total = 6200  # > the 5,000-row page
    limit = asyncio.Semaphore(128)
    rng = random.Random(7)

    async def create(i: int) -> None:
        due = minute + timedelta(milliseconds=rng.randrange(60_000))
        async with limit:
            await store.create_schedule(new_schedule(due, poller_id=1), datetime.now(UTC))

    await asyncio.gather(*(create(i) for i in range(total)))

    pages = [page async for page in store.read_minute(InstanceKey(client_id, 1), minute)]
    rows = [r for page in pages for r in page]
    assert len(pages) >= 2 and max(len(p) for p in pages) <= store.settings.page_size
    assert len(rows) == total and len({r.schedule_id for r in rows}) == total
    keys = [(r.location.due_at, r.schedule_id) for r in rows]
    assert keys == sorted(keys)
    assert all(timing.minute_bucket(r.location.due_at) == minute for r in rows)

    # The tail read a poller uses after a hot mark starts where it is told.
    cut = rows[4000].location.due_at
    tail = [r async for page in store.read_minute(InstanceKey(client_id, 1), minute, from_due=cut) for r in page]
    assert tail and all(r.location.due_at >= cut for r in tail)
    assert len(tail) == sum(r.location.due_at >= cut for r in rows)


async def test_fired_rows_carry_the_retention_ttl(
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
    assert retention - 60 < row.ttl <= retention
    assert row.payload_ttl is not None and row.payload_ttl <= retention + 31


async def test_hot_writes_leave_marks_and_raise_the_horizon(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    soon, far = new_schedule(later(5), poller_id=3), new_schedule(later(7200), poller_id=3)
    for s in (soon, far):
        await store.create_schedule(s, datetime.now(UTC))
    marks = await store.hot_marks(soon.location.minute)
    assert InstanceKey(client_id, 3) in {m.instance for m in marks}
    far_marks = await store.hot_marks(far.location.minute)
    assert InstanceKey(client_id, 3) not in {m.instance for m in far_marks}
    assert await store.get_horizon(InstanceKey(client_id, 3)) == far.location.minute
    # A later write of an earlier minute never lowers the horizon.
    await store.create_schedule(new_schedule(later(120), poller_id=3), datetime.now(UTC))
    assert await store.get_horizon(InstanceKey(client_id, 3)) == far.location.minute


async def test_idempotency_key_binds_once(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    first, second = new_schedule(later(60)).schedule_id, new_schedule(later(60)).schedule_id
    assert await store.claim_idempotency_key(client_id, "k1", first) == first
    assert await store.claim_idempotency_key(client_id, "k1", second) == first
    assert await store.claim_idempotency_key(f"{client_id}-other", "k1", second) == second


async def test_requeue_keeps_the_fire_id_and_moves_the_row(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(later(30), poller_id=2)
    await store.create_schedule(s, datetime.now(UTC))
    retry_at = later(600)
    retried = await store.requeue_schedule(s, retry_at, 2, "HTTP 503", datetime.now(UTC))
    assert retried.fire_id == s.fire_id and retried.attempts == 2 and retried.location.due_at == retry_at

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location.due_at == retry_at and got.attempts == 2
    assert got.last_error == "HTTP 503" and got.status is Status.SCHEDULED
    old = [r async for page in store.read_minute(s.instance, s.location.minute) for r in page]
    assert [(r.status, r.attempts) for r in old if r.schedule_id == s.schedule_id] == [(Status.MOVED, 2)]


async def test_requeue_finishes_its_own_half_done_move(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    """A requeue whose pointer bump landed but whose row batch did not (a timeout between the two) is
    finished by calling it again: the retried fire must not be dropped as a concurrent change."""
    s = new_schedule(later(30), poller_id=1)
    await store.create_schedule(s, datetime.now(UTC))
    retry_at = datetime.now(UTC) + timedelta(seconds=600, microseconds=123)  # sub-ms digits: dropped
    loc = Location(s.location.poller_id, timing.truncate_ms(retry_at))
    await store._bump_ref(s, loc, s.version + 1, datetime.now(UTC))  # the first call got this far
    assert await store.get_schedule(client_id, s.schedule_id) == s  # the pointer alone changes nothing

    retried = await store.requeue_schedule(s, retry_at, 3, "timeout", datetime.now(UTC))
    assert retried.location == loc and retried.version == s.version + 1 and retried.attempts == 3
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location == loc and got.status is Status.SCHEDULED and got.fire_id == s.fire_id

    elsewhere = later(900)  # a different move under the same old version is someone else's: a conflict
    with pytest.raises(Conflict):
        await store.requeue_schedule(s, elsewhere, 4, "timeout", datetime.now(UTC))


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
