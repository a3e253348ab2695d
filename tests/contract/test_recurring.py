"""Recurring schedules in the store: chaining to the next occurrence under a compare-and-set, the three
outcomes a poller acts on, durable retries of an occurrence, and the run history."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from tests.contract.conftest import START, Env, FailOn, read_all
from tickd.schema import backfills
from tickd.schema import recurrence as rec
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Chain, Client, EventOf, FireOutcome, Location, Options, Repeat, Run, Schedule, Status
from tickd.schema.store import Store

Factory = Callable[..., Schedule]
EVERY_MINUTE = Options(repeat=Repeat(every_s=60, start_at=START))


def recurring(env: Env, new_schedule: Factory, in_s: float = 600) -> Schedule:
    at = env.later(in_s)
    return new_schedule(at, poller_id=1, fire_at=at, options=EVERY_MINUTE, seq=1)


def following(s: Schedule, in_s: float = 60) -> Schedule:
    nominal = s.fire_at + timedelta(seconds=in_s)
    return dataclasses.replace(s, location=Location(s.location.poller_id, nominal), fire_at=nominal, seq=s.seq + 1)


async def chained(env: Env, new_schedule: Factory, in_s: float = 600) -> tuple[Schedule, Schedule]:
    """A recurring schedule created and chained once: (its first occurrence, its second)."""
    first = recurring(env, new_schedule, in_s)
    await env.store.create_schedule(first, env.now())
    second = following(first)
    assert (await env.store.chain_schedule(first, second, env.now())).outcome is Chain.CHAINED
    return first, second


async def test_chain_moves_the_pointer_to_the_next_occurrence(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    assert await store.get_schedule(client_id, first.schedule_id) == first  # options and seq round-trip

    second = following(first)
    assert (await store.chain_schedule(first, second, env.now())).outcome is Chain.CHAINED
    got = await store.get_schedule(client_id, first.schedule_id)
    assert got == dataclasses.replace(second, version=2)
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.changed_version == 0  # a poller's move is not a client change


async def test_chain_again_after_it_landed_finds_it_done(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(env, new_schedule)
    # The same call again (a retry after an unknown outcome): its rows landed, so the occurrence fires,
    # and the landed next row comes back for the caller to plan (its due time may be past by then).
    again = await store.chain_schedule(first, second, env.now())
    assert again.outcome is Chain.ALREADY and again.following == dataclasses.replace(second, version=2)
    # A new owner re-firing the first occurrence computes a different due time: already chained, fire it,
    # and plan the next row where it really is.
    moved = dataclasses.replace(second, location=Location(1, second.location.due_at + timedelta(seconds=1)))
    retried = await store.chain_schedule(first, moved, env.now())
    assert retried.outcome is Chain.ALREADY and retried.following == dataclasses.replace(second, version=2)
    assert (await store.get_schedule(client_id, first.schedule_id)) == dataclasses.replace(second, version=2)


async def test_a_takeover_finishes_a_crashed_owners_chain_where_it_pointed(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """The owner that crashed moved the pointer to its own next due time; the next owner computes
    another one, writes the row where the pointer says (still ahead), and fires the occurrence."""
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    theirs = following(first)
    if env.memory:
        env.inject(FailOn(before=("batch:insert_schedule",)))
        with pytest.raises(StoreUnavailable):
            await store.chain_schedule(first, theirs, env.now())
    else:
        await store._bump_ref(first, theirs.location, 2, env.now(), by_client=False)  # type: ignore[attr-defined]
    ours = dataclasses.replace(theirs, location=Location(1, theirs.location.due_at + timedelta(seconds=1)))
    chained = await store.chain_schedule(first, ours, env.now())
    assert chained.outcome is Chain.CHAINED
    got = await store.get_schedule(client_id, first.schedule_id)
    assert got == chained.following == dataclasses.replace(ours, location=theirs.location, version=2)


async def test_a_crashed_owners_chain_to_a_time_now_past_is_moved_again_to_now(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A row written where the stopped move pointed, if that time is past by now, would land behind
    every poller's re-reads (maybe in a minute already closed) and never fire: the move is made again
    from where it stopped, to now."""
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    past = dataclasses.replace(following(first), location=Location(0, env.now() - timedelta(seconds=30)))
    await store._bump_ref(first, past.location, 2, env.now(), by_client=False)  # type: ignore[attr-defined]
    chained = await store.chain_schedule(first, following(first), env.now())
    assert chained.outcome is Chain.CHAINED and chained.following is not None
    assert chained.following.version == 3 and chained.following.location.due_at >= env.now() - timedelta(seconds=1)
    assert await store.get_schedule(client_id, first.schedule_id) == chained.following


async def test_a_move_made_again_whose_row_did_not_land_either_is_finished(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Simulation seed 11393: a chain's row write failed, its retry found the target past and moved the
    pointer again to now (version 3), and that row write failed too. The next try must still finish
    the move from this occurrence, not take it for another owner's finished chain and end the timeline."""
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    stopped = Location(0, env.now() - timedelta(seconds=40))
    again = Location(0, env.now() - timedelta(seconds=20))
    await store._bump_ref(first, stopped, 2, env.now(), by_client=False)  # type: ignore[attr-defined]
    moved_once = dataclasses.replace(first, version=2)
    await store._bump_ref(moved_once, again, 3, env.now(), by_client=False)  # type: ignore[attr-defined]
    chained = await store.chain_schedule(first, following(first), env.now())
    assert chained.outcome is Chain.CHAINED and chained.following is not None
    assert chained.following.version >= 3 and chained.following.location.due_at >= env.now() - timedelta(seconds=1)
    assert await store.get_schedule(client_id, first.schedule_id) == chained.following
    # Once the next occurrence chains on in turn, a stale try from the first finds nothing to finish.
    third = following(chained.following)
    assert (await store.chain_schedule(chained.following, third, env.now())).outcome is Chain.CHAINED
    stale = await store.chain_schedule(first, following(first), env.now())
    assert stale.outcome is Chain.ALREADY and stale.following is None
    assert await store.get_schedule(client_id, first.schedule_id) == dataclasses.replace(
        third, version=chained.following.version + 1
    )


async def test_a_client_change_stops_queued_occurrences(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(env, new_schedule)
    head = await store.get_schedule(client_id, first.schedule_id)
    assert head is not None
    changed = await store.replace_schedule(head, dataclasses.replace(head, payload=b'{"v": 2}'), env.now())
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.changed_version == changed.version == 3

    # The occurrence queued before the change (version 2) must not fire, nor the one before it.
    assert (await store.chain_schedule(head, following(head), env.now())).outcome is Chain.CHANGED
    assert (await store.chain_schedule(first, second, env.now())).outcome is Chain.CHANGED
    # The changed schedule chains on.
    assert (await store.chain_schedule(changed, following(changed), env.now())).outcome is Chain.CHAINED


async def test_cancel_stops_the_timeline(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    await store.cancel_schedule(first, env.now())
    second = following(first)
    assert (await store.chain_schedule(first, second, env.now())).outcome is Chain.CHANGED
    rows = await read_all(store, second.instance, second.location.minute)
    assert second.schedule_id not in {r.schedule_id for r in rows}  # nothing was written for it


async def test_end_of_timeline_seals_the_version(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    last = recurring(env, new_schedule)
    await store.create_schedule(last, env.now())
    assert (await store.chain_schedule(last, None, env.now())).outcome is Chain.CHAINED
    ref = await store.get_ref(client_id, last.schedule_id)
    assert ref is not None and ref.version == 2 and ref.location == last.location
    assert (await store.chain_schedule(last, None, env.now())).outcome is Chain.ALREADY  # a re-fire still fires


async def test_retry_of_an_occurrence_keeps_the_pointer_and_shows_in_runs(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first, second = await chained(env, new_schedule, in_s=30)
    retry_at = env.later(300)
    retried = await store.requeue_schedule(first, retry_at, 1, "HTTP 503", env.now())
    assert retried.fire_id == first.fire_id and retried.version == first.version and retried.attempts == 1
    ref = await store.get_ref(client_id, first.schedule_id)
    assert ref is not None and ref.location == second.location  # the timeline is not held up
    rows = await read_all(store, first.instance, retried.location.minute)
    assert [(r.fire_id, r.status) for r in rows if r.public_id == first.schedule_id] == [
        (first.fire_id, Status.SCHEDULED)
    ]
    [run] = await store.list_runs(client_id, first.schedule_id, None, 10)
    assert (run.nominal_at, run.status, run.attempts, run.last_error) == (
        first.fire_at,
        Status.SCHEDULED,
        1,
        "HTTP 503",
    )


async def test_runs_newest_first_and_paged(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = recurring(env, new_schedule)
    base = env.later(0)
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


async def test_chain_again_finishes_a_half_done_chain(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """The pointer moved on but the next occurrence's row did not land: the same call again writes it."""
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    second = following(first)
    if env.memory:
        env.inject(FailOn(before=("batch:insert_schedule",)))
        with pytest.raises(StoreUnavailable):
            await store.chain_schedule(first, second, env.now())
    else:
        await store._bump_ref(first, second.location, 2, env.now(), by_client=False)  # type: ignore[attr-defined]
    assert await read_all(store, second.instance, second.location.minute) == []
    assert await store.get_schedule(client_id, first.schedule_id) == first  # the old row is still the truth

    assert (await store.chain_schedule(first, second, env.now())).outcome is Chain.CHAINED
    assert await store.get_schedule(client_id, first.schedule_id) == dataclasses.replace(second, version=2)


async def test_event_outcomes_count_in_their_run(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    trigger = new_schedule(env.later(60), options=Options(events=3, window_ms=3000))
    nominal = trigger.fire_at
    fired = env.later(61)
    run = FireOutcome(
        client_id,
        trigger.schedule_id,
        trigger.location,
        Status.SUCCEEDED,
        1,
        fired,
        nominal_at=nominal,
        events=3,
        window_ms=3000,
    )
    events = [
        FireOutcome(
            client_id,
            uuid.uuid5(trigger.schedule_id, str(i)),
            Location(0, nominal + timedelta(seconds=i)),
            status,
            1,
            fired + timedelta(seconds=i),
            nominal_at=nominal,
            event=EventOf(trigger.schedule_id, i, 3),
        )
        for i, status in enumerate((Status.SUCCEEDED, Status.FAILED, Status.SUCCEEDED))
    ]
    await store.record_outcomes([run, *events])
    [got] = await store.list_runs(client_id, trigger.schedule_id, None, 10)
    assert (got.nominal_at, got.status, got.events, got.events_done) == (nominal, Status.SUCCEEDED, 3, 2)
    assert got.last_event_at == fired + timedelta(seconds=2)
    assert got.window_end == nominal + timedelta(milliseconds=3000)
    assert await store.list_runs(client_id, trigger.schedule_id, nominal, 10) == []


async def test_runs_page_to_the_limit(env: Env, new_schedule: Factory, client_id: str) -> None:
    """A run listing reads page after page (a page holds 3 here) until its limit or the end."""
    store = await env.store_with(page_size=3)
    s = recurring(env, new_schedule)
    base = env.later(0)
    await store.record_outcomes(
        [
            FireOutcome(
                client_id,
                s.schedule_id,
                s.location,
                Status.SUCCEEDED,
                1,
                base,
                nominal_at=base + timedelta(minutes=i),
                seq=i + 1,
            )
            for i in range(5)
        ]
    )
    assert [r.seq for r in await store.list_runs(client_id, s.schedule_id, None, 10)] == [5, 4, 3, 2, 1]
    assert [r.seq for r in await store.list_runs(client_id, s.schedule_id, None, 3)] == [5, 4, 3]
    assert [r.seq for r in await store.list_runs(client_id, s.schedule_id, None, 4)] == [5, 4, 3, 2]


async def test_retries_of_two_occurrences_due_in_the_same_millisecond_both_stay(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Rows are keyed by due time and id: two occurrences' retries coming due in the same millisecond once
    shared a key, and one overwrote the other (found by the simulation). Each retry row has its own id."""
    first, second = await chained(env, new_schedule, in_s=30)
    due = env.later(300)
    a = await store.requeue_schedule(first, due, 1, "HTTP 503", env.now())
    b = await store.requeue_schedule(second, due, 1, "HTTP 503", env.now())
    assert a.location == b.location and a.schedule_id != b.schedule_id
    assert a.public_id == b.public_id == first.schedule_id
    rows = await read_all(store, first.instance, a.location.minute)
    waiting = sorted(r.fire_id for r in rows if r.public_id == first.schedule_id and r.status is Status.SCHEDULED)
    assert waiting == sorted([first.fire_id, second.fire_id])


async def test_a_backfill_s_fire_is_its_occurrence_s_run_marked_so(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A backfill's row (``schema.backfills``): created as a one-time row of its own, retried under its own
    pointer with the same fire id, and its outcome recorded as the parent's run of that occurrence, marked
    a backfill's, over the run the timeline left (it skipped the occurrence)."""
    parent = recurring(env, new_schedule)
    await store.create_schedule(parent, env.now())
    nominal = parent.fire_at - timedelta(hours=2)
    skipped = Run(nominal, Status.SKIPPED, 0, None, "skipped: paused")
    await store.add_runs(client_id, parent.schedule_id, [skipped])
    client = Client(client_id, 4, True, "h", START, START)
    row = backfills.backfill_row(client, parent, nominal, env.later(5))
    await store.create_schedule(row, env.now())
    stored = await store.get_schedule(client_id, row.schedule_id)
    assert stored is not None and stored.fire_id == row.fire_id and stored.options == row.options
    retried = await store.requeue_schedule(stored, env.later(65), 1, "HTTP 503", env.now())
    assert retried.fire_id == row.fire_id and retried.fire_at == nominal
    outcome = FireOutcome(
        client_id,
        retried.schedule_id,
        retried.location,
        Status.SUCCEEDED,
        2,
        env.later(66),
        nominal_at=nominal,
        run_of=parent.schedule_id,
        backfill=True,
    )
    await store.record_outcomes([outcome])
    [run] = await store.list_runs(client_id, parent.schedule_id, None, 10)
    assert (run.nominal_at, run.status, run.attempts, run.backfill) == (nominal, Status.SUCCEEDED, 2, True)
    assert not backfills.sent(skipped) and backfills.sent(run)
    live = FireOutcome(
        client_id, parent.schedule_id, parent.location, Status.SUCCEEDED, 1, env.later(1), nominal_at=parent.fire_at
    )
    await store.record_outcomes([live])
    newest, _ = await store.list_runs(client_id, parent.schedule_id, None, 10)
    assert (newest.nominal_at, newest.backfill) == (parent.fire_at, False)
