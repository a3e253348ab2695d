"""Dead letters in the store: the listing with redrive marks, one by its key, the once-only redrive
mark, a redriven fire's own row (``add_redrive``), and ``schema.redrives`` on both adapters: a redriven
fire is a scheduled row a poller's minute read returns, with the original fire id."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

import pytest

from tests.contract.conftest import Env, FailOn, read_all
from tests.contract.test_recurring import chained
from tickd.schema import moves, redrives
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import DeadLetter, FireOutcome, Schedule, Status
from tickd.schema.store import Store

Factory = Callable[..., Schedule]


def letter_of(env: Env, s: Schedule, seconds_ago: float = 5) -> DeadLetter:
    failed_at = env.later(-seconds_ago)
    return DeadLetter(s.client_id, s.public_id, s.fire_id, failed_at, 3, "HTTP 500", s.callback, s.payload)


async def failed_once(env: Env, new_schedule: Factory) -> tuple[Schedule, DeadLetter]:
    """A one-time schedule whose fire failed for good, and its dead letter."""
    s = new_schedule(env.later(1), poller_id=2)
    store = env.store
    await store.create_schedule(s, env.now())
    outcome = FireOutcome(s.client_id, s.schedule_id, s.location, Status.FAILED, 3, env.later(0), "HTTP 500")
    await store.record_outcomes([outcome])
    letter = letter_of(env, s)
    await store.add_dead_letter(letter)
    return s, letter


async def test_list_and_get_dead_letters(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(env.later(60))
    older, newer = letter_of(env, s, 30), letter_of(env, s, 10)
    for letter in (older, newer):
        await store.add_dead_letter(letter)
    day = newer.failed_at.date()
    listed = [letter for letter in await store.list_dead_letters(client_id, day) if letter.failed_at.date() == day]
    assert [letter.failed_at for letter in listed] == sorted({older.failed_at, newer.failed_at}, reverse=True)[
        : len(listed)
    ]
    got = await store.get_dead_letter(client_id, newer.failed_at, s.schedule_id)
    assert got == newer and got.redriven_at is None
    assert await store.get_dead_letter("someone-else", newer.failed_at, s.schedule_id) is None
    assert await store.get_dead_letter(client_id, newer.failed_at, uuid.uuid4()) is None


async def test_mark_redriven_once(env: Env, store: Store, new_schedule: Factory) -> None:
    letter = letter_of(env, new_schedule(env.later(60)))
    await store.add_dead_letter(letter)
    at, due = env.later(0), env.later(10)
    first = await store.mark_redriven(letter, at, due)
    assert first is not None and first.redriven_at == at and first.redriven_due_at == due
    again = await store.mark_redriven(letter, env.later(1), env.later(20))
    assert again == first  # the earlier mark stands
    gone = dataclasses.replace(letter, schedule_id=uuid.uuid4())
    assert await store.mark_redriven(gone, env.later(0), env.later(10)) is None  # no row made for it


async def test_redrive_one_time_moves_its_fire(env: Env, store: Store, new_schedule: Factory) -> None:
    s, letter = await failed_once(env, new_schedule)
    due = env.later(30)
    marked = await redrives.redrive(store, letter, due, env.now(), late_s=3.0)
    assert marked.redriven_due_at == due
    current = await store.get_schedule(s.client_id, s.schedule_id)
    assert current is not None and current.status is Status.SCHEDULED
    assert current.fire_id == s.fire_id and current.location.due_at == due and current.attempts == 0
    rows = await read_all(store, s.instance, current.location.minute)
    assert [(r.fire_id, r.status) for r in rows if r.location == current.location] == [(s.fire_id, Status.SCHEDULED)]
    again = await redrives.redrive(store, letter, env.later(40), env.now(), late_s=3.0)
    assert again == marked
    assert await store.get_schedule(s.client_id, s.schedule_id) == current  # no second fire


async def test_redrive_recurring_writes_a_retry_row(env: Env, store: Store, new_schedule: Factory) -> None:
    first, _ = await chained(env, new_schedule)
    letter = letter_of(env, first)
    await store.add_dead_letter(letter)
    due = env.later(30)
    await redrives.redrive(store, letter, due, env.now(), late_s=3.0)
    expected = moves.retry_row(first, due, 1, "HTTP 500")
    rows = [r for r in await read_all(store, first.instance, expected.location.minute) if r.location.due_at == due]
    assert [(r.schedule_id, r.fire_id, r.status, r.attempts) for r in rows] == [
        (expected.schedule_id, first.fire_id, Status.SCHEDULED, 1)
    ]
    runs = await store.list_runs(first.client_id, first.schedule_id, None, 10)
    assert [(r.nominal_at, r.status) for r in runs] == [(first.fire_at, Status.SCHEDULED)]
    # It fires, then a repeated redrive writes nothing new and leaves its outcome alone.
    outcome = FireOutcome(
        first.client_id,
        rows[0].schedule_id,
        rows[0].location,
        Status.SUCCEEDED,
        2,
        env.later(0),
        nominal_at=first.fire_at,
        run_of=first.schedule_id,
    )
    await store.record_outcomes([outcome])
    await redrives.redrive(store, letter, env.later(50), env.now(), late_s=3.0)
    after = [
        r
        for r in await read_all(store, first.instance, expected.location.minute)
        if r.schedule_id == rows[0].schedule_id
    ]
    assert [(r.location.due_at, r.status) for r in after] == [(due, Status.SUCCEEDED)]


async def test_add_redrive_keeps_a_fired_rows_status(env: Env, store: Store, new_schedule: Factory) -> None:
    first, _ = await chained(env, new_schedule)
    row = moves.retry_row(first, env.later(20), 1, "x")
    await store.add_redrive(row, env.now())
    outcome = FireOutcome(row.client_id, row.schedule_id, row.location, Status.SUCCEEDED, 2, env.later(0))
    await store.record_outcomes([outcome])
    await store.add_redrive(row, env.now())
    rows = [r for r in await read_all(store, row.instance, row.location.minute) if r.schedule_id == row.schedule_id]
    assert [r.status for r in rows] == [Status.SUCCEEDED]
    assert rows[0].fire_id == first.fire_id


async def test_redrive_event_letter_is_refused(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(60))
    letter = dataclasses.replace(letter_of(env, s), fire_id=f"{s.fire_id}:3")
    await store.add_dead_letter(letter)
    try:
        await redrives.redrive(store, letter, env.later(0), env.now(), late_s=3.0)
    except Exception as exc:
        assert getattr(exc, "code", None) == "not_redrivable"
    else:
        raise AssertionError("redrove an event's dead letter")
    assert (await store.get_dead_letter(s.client_id, letter.failed_at, s.schedule_id)) == letter  # not marked


async def test_a_redrive_whose_write_was_lost_is_finished_once(env: Env, store: Store, new_schedule: Factory) -> None:
    first, _ = await chained(env, new_schedule)
    letter = letter_of(env, first)
    await store.add_dead_letter(letter)
    faulty = env.peer(FailOn(before=("batch:insert_retry",)))
    due = env.later(1)
    with pytest.raises(StoreUnavailable):
        await redrives.redrive(faulty, letter, due, env.now(), late_s=3.0)
    await env.wait(5)  # the retry comes after late_s: the marked due time is past, so it is due now
    called = env.later(0)
    moved = await redrives.redrive(store, letter, called, env.now(), late_s=3.0)
    assert moved.redriven_due_at is not None and moved.redriven_due_at >= called  # the mark moved to now
    await env.wait(0.5)  # a repeat later on: it finds the moved mark's row, and writes no second one at its now
    again = await redrives.redrive(store, letter, env.later(0), env.now(), late_s=3.0)
    assert again.redriven_due_at == moved.redriven_due_at
    retry_id = moves.retry_row(first, due, 1, "x").schedule_id
    minutes = {m.replace(second=0, microsecond=0) for m in (due, moved.redriven_due_at, env.now())}
    rows = [r for m in minutes for r in await read_all(store, first.instance, m) if r.schedule_id == retry_id]
    assert [(r.fire_id, r.status, r.location.due_at) for r in rows] == [
        (first.fire_id, Status.SCHEDULED, moved.redriven_due_at)
    ]
