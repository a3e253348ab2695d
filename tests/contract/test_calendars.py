"""A tenant's calendars in the store: versions from 1, each change a compare-and-set on the version read
(so of two concurrent changes one lands), a save whose answer was lost found landed when made again, a
delete of a version since changed refused, and one tenant's calendars invisible to another."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from tests.contract.conftest import Env, FailOn
from tickd.schema import calendars as cal
from tickd.schema.errors import StoreUnavailable
from tickd.schema.store import Store

HOLIDAYS = cal.parse_calendar("holidays", timezone="Europe/Berlin", dates=["2026-12-25", "2026-12-26"])


async def test_a_calendar_is_stored_read_back_and_listed_by_name(env: Env, store: Store, client_id: str) -> None:
    blackout = cal.parse_calendar("blackout", ranges=[("2026-06-01T00:00", "2026-06-08T00:00")], business_days=True)
    made = env.now()
    assert await store.save_calendar(client_id, HOLIDAYS, made)
    assert await store.save_calendar(client_id, blackout, made)
    got = await store.get_calendar(client_id, "holidays")
    assert got is not None and got.calendar == HOLIDAYS and got.created_at == got.updated_at
    assert [s.calendar.name for s in await store.list_calendars(client_id)] == ["blackout", "holidays"]
    assert await store.get_calendar(client_id, "nope") is None
    assert await store.list_calendars(client_id + "-other") == []  # another tenant sees none


async def test_each_change_builds_on_the_version_it_read(env: Env, store: Store, client_id: str) -> None:
    assert await store.save_calendar(client_id, HOLIDAYS, env.now())
    assert await store.save_calendar(client_id, HOLIDAYS, env.now())  # the same again: idempotent
    utc_one = msgspec.structs.replace(HOLIDAYS, timezone="UTC")
    assert not await store.save_calendar(client_id, utc_one, env.now())  # another version 1: the name is taken
    more = msgspec.structs.replace(
        HOLIDAYS, dates=(*HOLIDAYS.dates, *cal.parse_calendar("x", dates=["2027-01-01"]).dates)
    )
    second = msgspec.structs.replace(more, version=2)
    assert await store.save_calendar(client_id, second, env.now())
    stale = msgspec.structs.replace(HOLIDAYS, version=2, timezone="UTC")  # also built on version 1
    assert not await store.save_calendar(client_id, stale, env.now())
    got = await store.get_calendar(client_id, "holidays")
    assert got is not None and got.calendar == second and got.updated_at >= got.created_at
    skipped = msgspec.structs.replace(HOLIDAYS, version=4)  # no version 3 to build on
    assert not await store.save_calendar(client_id, skipped, env.now())
    missing = msgspec.structs.replace(cal.parse_calendar("missing"), version=2)
    assert not await store.save_calendar(client_id, missing, env.now())  # an update makes no row
    assert await store.get_calendar(client_id, "missing") is None


async def test_of_two_concurrent_changes_one_lands(env: Env, store: Store, client_id: str) -> None:
    assert await store.save_calendar(client_id, HOLIDAYS, env.now())
    changes = [msgspec.structs.replace(HOLIDAYS, version=2, timezone=zone) for zone in ("UTC", "Asia/Tokyo")]
    landed = await asyncio.gather(*(store.save_calendar(client_id, c, env.now()) for c in changes))
    assert sorted(landed) == [False, True]
    got = await store.get_calendar(client_id, "holidays")
    assert got is not None and got.calendar == changes[landed.index(True)]


async def test_a_save_whose_answer_was_lost_is_found_landed(env: Env, store: Store, client_id: str) -> None:
    lossy = env.peer(FailOn(after=("insert_calendar",)))  # applied, and the caller told it failed
    with pytest.raises(StoreUnavailable):
        await lossy.save_calendar(client_id, HOLIDAYS, env.now())
    assert await lossy.save_calendar(client_id, HOLIDAYS, env.now())  # made again: it is there, as sent
    other = msgspec.structs.replace(HOLIDAYS, timezone="UTC")
    assert not await store.save_calendar(client_id, other, env.now())  # a different version 1 is not


async def test_a_delete_applies_to_the_version_it_read(env: Env, store: Store, client_id: str) -> None:
    assert await store.save_calendar(client_id, HOLIDAYS, env.now())
    assert await store.save_calendar(client_id, msgspec.structs.replace(HOLIDAYS, version=2), env.now())
    assert not await store.delete_calendar(client_id, "holidays", 1)  # changed since
    assert await store.get_calendar(client_id, "holidays") is not None
    assert await store.delete_calendar(client_id, "holidays", 2)
    assert await store.get_calendar(client_id, "holidays") is None
    assert not await store.delete_calendar(client_id, "holidays", 2)  # gone
    assert await store.save_calendar(client_id, HOLIDAYS, env.now())  # the name is free again
