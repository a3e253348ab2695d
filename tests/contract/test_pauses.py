"""Pause and resume in the store (client changes, ``schema.changes``) and skipped runs, on both sessions:
a paused row is not scheduled (pollers fire only scheduled rows) and takes a new version, so a poller's
chain from it loses; a resume writes the next fire as a scheduled row; a lost pause is adopted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from tests.contract.conftest import Env, FailOn, read_all
from tests.contract.test_recurring import following, recurring
from tickd.schema.errors import Conflict, StoreUnavailable
from tickd.schema.model import Chain, Location, Run, Schedule, Status
from tickd.schema.store import Store

Factory = Callable[..., Schedule]


async def rows_of(store: Store, s: Schedule, loc: Location) -> list[Schedule]:
    instance = dataclasses.replace(s, location=loc).instance
    return [r for r in await read_all(store, instance, loc.minute) if r.schedule_id == s.schedule_id]


async def test_pause_then_resume_one_time(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(600), poller_id=1)
    await store.create_schedule(s, env.now())
    paused = await store.pause_schedule(s, env.now())
    assert paused.status is Status.PAUSED and paused.version == s.version + 1
    assert await store.get_schedule(s.client_id, s.schedule_id) == paused
    assert [r.status for r in await rows_of(store, s, s.location)] == [Status.PAUSED]
    with pytest.raises(Conflict):
        await store.resume_schedule(s, s, env.now())  # not paused (the stale read)
    resumed = dataclasses.replace(paused, location=Location(1, env.later(30)), status=Status.SCHEDULED)
    done = await store.resume_schedule(paused, resumed, env.now())
    assert done.status is Status.SCHEDULED and done.version == paused.version + 1
    assert await store.get_schedule(s.client_id, s.schedule_id) == done
    assert [(r.status, r.fire_id) for r in await rows_of(store, s, done.location)] == [(Status.SCHEDULED, s.fire_id)]
    assert [r.status for r in await rows_of(store, s, s.location)] == [Status.MOVED]


async def test_resume_in_place(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(600))
    await store.create_schedule(s, env.now())
    paused = await store.pause_schedule(s, env.now())
    done = await store.resume_schedule(paused, dataclasses.replace(paused, status=Status.SCHEDULED), env.now())
    assert [(r.status, r.version) for r in await rows_of(store, s, s.location)] == [(Status.SCHEDULED, done.version)]


async def test_a_paused_occurrence_does_not_chain(env: Env, store: Store, new_schedule: Factory) -> None:
    first = recurring(env, new_schedule)
    await store.create_schedule(first, env.now())
    await store.pause_schedule(first, env.now())
    chained = await store.chain_schedule(first, following(first), env.now())
    assert chained.outcome is Chain.CHANGED  # the poller fires nothing of a paused schedule


async def test_a_lost_pause_is_adopted(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(600))
    await store.create_schedule(s, env.now())
    faulty = env.peer(FailOn(before=("batch:set_status_version", "set_status_version")))
    with pytest.raises(StoreUnavailable):
        await faulty.pause_schedule(s, env.now())
    paused = await store.pause_schedule(s, env.now())  # from the row as it is: the pointer is ahead
    assert paused.status is Status.PAUSED
    assert [r.status for r in await rows_of(store, s, s.location)] == [Status.PAUSED]


async def test_add_runs(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(env.later(600))
    runs = [Run(env.later(-120), Status.SKIPPED, 0, None, seq=3), Run(env.later(-60), Status.SKIPPED, 0, None, seq=4)]
    await store.add_runs(client_id, s.schedule_id, runs)
    listed = await store.list_runs(client_id, s.schedule_id, None, 10)
    assert [(r.nominal_at, r.status, r.seq) for r in listed] == [
        (x.nominal_at, x.status, x.seq) for x in reversed(runs)
    ]
    await store.add_runs(client_id, s.schedule_id, [])  # nothing to add: accepted, and nothing changes
    assert await store.list_runs(client_id, s.schedule_id, None, 10) == listed
