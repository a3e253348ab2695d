"""Recurring schedules in the store: chaining to the next occurrence under a compare-and-set, the three
outcomes a poller acts on, durable retries of an occurrence, and the run history."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from schema import recurrence as rec
from schema.cassandra import CassandraStore
from schema.model import Chain, EventOf, FireOutcome, Location, Options, Repeat, Schedule, Status
from tests.integration.conftest import later, make_client

pytestmark = pytest.mark.integration
Factory = Callable[..., Schedule]
EVERY_MINUTE = Options(repeat=Repeat(every_s=60, start_at=later(0)))


def recurring(new_schedule: Factory, in_s: float = 600) -> Schedule:
    at = later(in_s)
    return new_schedule(at, poller_id=1, fire_at=at, options=EVERY_MINUTE, seq=1)


def following(s: Schedule, in_s: float = 60) -> Schedule:
    nominal = s.fire_at + timedelta(seconds=in_s)
    return dataclasses.replace(s, location=Location(s.location.poller_id, nominal), fire_at=nominal, seq=s.seq + 1)


async def chained(store: CassandraStore, new_schedule: Factory, in_s: float = 600) -> tuple[Schedule, Schedule]:
    """A recurring schedule created and chained once: (its first occurrence, its second)."""
    first = recurring(new_schedule, in_s)
    await store.create_schedule(first, datetime.now(UTC))
    second = following(first)
    assert await store.chain_schedule(first, second, datetime.now(UTC)) is Chain.CHAINED
    return first, second


async def test_chain_moves_the_pointer_to_the_next_occurrence(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    first = recurring(new_schedule)
    await store.create_schedule(first, datetime.now(UTC))
    assert await store.get_schedule(client_id, first.schedule_id) == first  # options and seq round-trip

    second = following(first)
    assert await store.chain_schedule(first, second, datetime.now(UTC)) is Chain.CHAINED
    got = await store.get_schedule(client_id, first.schedule_id)
    assert got == dataclasses.replace(second, version=2)
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.changed_version == 0  # a poller's move is not a client change


async def test_chain_again_finishes_its_own_move_and_a_takeover_finds_it_done(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(store, new_schedule)
    # The same call again (a retry after a timeout): it finds its own pointer move and rewrites the row.
    assert await store.chain_schedule(first, second, datetime.now(UTC)) is Chain.CHAINED
    # A new owner re-firing the first occurrence computes a different due time: already chained, fire it.
    moved = dataclasses.replace(second, location=Location(1, second.location.due_at + timedelta(seconds=1)))
    assert await store.chain_schedule(first, moved, datetime.now(UTC)) is Chain.ALREADY
    assert (await store.get_schedule(client_id, first.schedule_id)) == dataclasses.replace(second, version=2)


async def test_a_client_change_stops_queued_occurrences(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(store, new_schedule)
    head = await store.get_schedule(client_id, first.schedule_id)
    assert head is not None
    changed = await store.replace_schedule(head, dataclasses.replace(head, payload=b'{"v": 2}'), datetime.now(UTC))
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.changed_version == changed.version == 3

    # The occurrence queued before the change (version 2) must not fire, nor the one before it.
    assert await store.chain_schedule(head, following(head), datetime.now(UTC)) is Chain.CHANGED
    assert await store.chain_schedule(first, second, datetime.now(UTC)) is Chain.CHANGED
    # The changed schedule chains on.
    assert await store.chain_schedule(changed, following(changed), datetime.now(UTC)) is Chain.CHAINED


async def test_cancel_stops_the_timeline(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    first = recurring(new_schedule)
    await store.create_schedule(first, datetime.now(UTC))
    await store.cancel_schedule(first, datetime.now(UTC))
    second = following(first)
    assert await store.chain_schedule(first, second, datetime.now(UTC)) is Chain.CHANGED
    rows = [r async for page in store.read_minute(second.instance, second.location.minute) for r in page]
    assert second.schedule_id not in {r.schedule_id for r in rows}  # nothing was written for it


async def test_end_of_timeline_seals_the_version(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    last = recurring(new_schedule)
    await store.create_schedule(last, datetime.now(UTC))
    assert await store.chain_schedule(last, None, datetime.now(UTC)) is Chain.CHAINED
    ref = await store.get_ref(client_id, last.schedule_id)
    assert ref is not None and ref.version == 2 and ref.location == last.location
    assert await store.chain_schedule(last, None, datetime.now(UTC)) is Chain.ALREADY  # a re-fire still fires


async def test_retry_of_an_occurrence_keeps_the_pointer_and_shows_in_runs(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(store, new_schedule, in_s=30)
    retry_at = later(300)
    retried = await store.requeue_schedule(first, retry_at, 1, "HTTP 503", datetime.now(UTC))
    assert retried.fire_id == first.fire_id and retried.version == first.version and retried.attempts == 1
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.location == second.location  # the timeline is not held up
    rows = [r async for page in store.read_minute(first.instance, retried.location.minute) for r in page]
    assert [(r.fire_id, r.status) for r in rows if r.schedule_id == first.schedule_id] == [
        (first.fire_id, Status.SCHEDULED)
    ]
    [run] = await store.list_runs(client_id, first.schedule_id, None, 10)
    assert (run.nominal_at, run.status, run.attempts, run.last_error) == (
        first.fire_at,
        Status.SCHEDULED,
        1,
        "HTTP 503",
    )


async def test_runs_newest_first_and_paged(store: CassandraStore, new_schedule: Factory, client_id: str) -> None:
    s = recurring(new_schedule)
    base = later(0)
    outcomes = [
        FireOutcome(
            client_id,
            s.schedule_id,
            Location(1, base + timedelta(minutes=i)),
            Status.SUCCEEDED,
            1,
            base + timedelta(minutes=i, milliseconds=40),
            nominal_at=base + timedelta(minutes=i),
            seq=i + 1,
        )
        for i in range(3)
    ]
    await store.record_outcomes(outcomes)
    runs = await store.list_runs(client_id, s.schedule_id, None, 10)
    assert [r.seq for r in runs] == [3, 2, 1]
    assert runs[0].fired_at is not None and (runs[0].fired_at - runs[0].nominal_at) == timedelta(milliseconds=40)
    older = await store.list_runs(client_id, s.schedule_id, runs[0].nominal_at, 10)
    assert [r.seq for r in older] == [2, 1]


def test_stored_rules_round_trip_to_the_same_timeline() -> None:
    now = datetime(2026, 3, 7, 12, tzinfo=UTC)
    parsed = rec.parse_recurrence(now=now, cron="30 2 * * *", timezone="America/New_York", max_fires=5)
    stored = Repeat.from_recurrence(parsed)
    assert stored.recurrence() == parsed
    assert rec.preview(stored.recurrence(), now, 3) == rec.preview(parsed, now, 3)


async def test_event_rows_fire_but_are_not_listed_as_schedules(
    store: CassandraStore, new_schedule: Factory, client_id: str
) -> None:
    at = later(3600)
    trigger = new_schedule(at, poller_id=2, options=Options(events=3, window_ms=3000))
    await store.create_schedule(trigger, datetime.now(UTC))
    events = [
        dataclasses.replace(
            trigger,
            schedule_id=uuid.uuid5(trigger.schedule_id, f"{trigger.fire_id}:{i}"),
            location=Location(2, at + timedelta(seconds=i)),
            options=Options(event=EventOf(trigger.schedule_id, i, 3)),
        )
        for i in range(3)
    ]
    await store.add_events(events, datetime.now(UTC))
    await store.add_events(events, datetime.now(UTC))  # a re-expansion writes the same rows
    rows = [r async for page in store.read_minute(trigger.instance, trigger.location.minute) for r in page]
    assert sorted(r.event_id or "" for r in rows if r.schedule_id != trigger.schedule_id) == [
        f"{trigger.fire_id}:{i}" for i in range(3)
    ]
    page = await store.list_schedules(
        make_client(client_id), at - timedelta(minutes=1), at + timedelta(minutes=1), None, None, 100
    )
    assert [s.schedule_id for s in page.items] == [trigger.schedule_id]
