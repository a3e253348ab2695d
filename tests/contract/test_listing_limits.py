"""Listings push their limit into the store read, on both sessions: ``page_dead_letters`` returns at
most ``max_rows`` rows of one client-day, in [since, until], newest first, and no payloads."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from tests.contract.conftest import Env
from tickd.schema import timing
from tickd.schema.model import DeadLetter, ListCursor, Schedule
from tickd.schema.store import Store

Factory = Callable[..., Schedule]
BIG = b'"' + b"x" * 60_000 + b'"'


async def _letters(env: Env, store: Store, new_schedule: Factory, count: int) -> list[DeadLetter]:
    """``count`` dead letters of one client, each with a 60 KB payload, failed a second apart today."""
    s = new_schedule(env.later(60))
    base = timing.truncate_ms(env.now().astimezone(UTC).replace(hour=12, minute=0, second=0))
    letters = [
        DeadLetter(s.client_id, uuid.uuid4(), s.fire_id, base - timedelta(seconds=i), 3, "HTTP 500", s.callback, BIG)
        for i in range(count)
    ]
    for letter in letters:
        await store.add_dead_letter(letter)
    return letters


async def test_a_dead_letter_page_reads_at_most_its_rows_without_payloads(
    env: Env, store: Store, new_schedule: Factory
) -> None:
    letters = await _letters(env, store, new_schedule, 12)
    first = letters[0]
    day = first.failed_at.date()
    start = datetime.combine(day, datetime.min.time(), UTC)
    page = await store.page_dead_letters(first.client_id, day, start, first.failed_at, 5)
    assert [p.schedule_id for p in page] == [letter.schedule_id for letter in letters[:5]]
    assert all(p.payload == b"" for p in page)
    assert [dataclasses.replace(p, payload=BIG) for p in page] == letters[:5]
    # [since, until] both inclusive; rows outside are not read
    middle = await store.page_dead_letters(first.client_id, day, letters[7].failed_at, letters[3].failed_at, 100)
    assert [p.schedule_id for p in middle] == [letter.schedule_id for letter in letters[3:8]]
    # the single-item read still has the payload
    got = await store.get_dead_letter(first.client_id, first.failed_at, first.schedule_id)
    assert got is not None and got.payload == BIG


async def test_an_empty_day_reads_nothing(env: Env, store: Store, new_schedule: Factory) -> None:
    letters = await _letters(env, store, new_schedule, 1)
    day = letters[0].failed_at.date() - timedelta(days=3)
    start = datetime.combine(day, datetime.min.time(), UTC)
    assert await store.page_dead_letters(letters[0].client_id, day, start, start + timedelta(days=1), 10) == []


async def test_a_minute_read_for_a_listing_is_bounded_and_resumes_after_a_row(
    env: Env, store: Store, new_schedule: Factory
) -> None:
    """``list_minute``: at most ``max_rows`` rows, no payloads, and resuming after a row (not at its due
    time) neither reads its ties in the same millisecond again nor skips them."""
    due = timing.minute_bucket(env.later(3600)) + timedelta(seconds=10)
    made = [new_schedule(due + timedelta(seconds=i // 3), poller_id=1, payload=BIG) for i in range(9)]
    await store.create_schedules(made[:4], env.now())
    await store.create_schedules(made[4:], env.now())
    order = sorted(made, key=lambda s: (s.location.due_at, s.schedule_id))
    instance, minute = made[0].instance, made[0].location.minute
    first, read, last = await store.list_minute(instance, minute, ListCursor(due), 4)
    assert [s.schedule_id for s in first] == [s.schedule_id for s in order[:4]] and read == 4
    assert all(s.payload == b"" for s in first)
    assert last == ListCursor(order[3].location.due_at, order[3].schedule_id)
    rest, read, last = await store.list_minute(instance, minute, last, 100)
    assert [s.schedule_id for s in rest] == [s.schedule_id for s in order[4:]] and read == 5
    assert await store.list_minute(instance, minute, last, 100) == ([], 0, None)
