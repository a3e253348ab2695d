"""Schedules in the store: create, read, cancel and move under compare-and-set, durable retries (and
finishing a half-done one), minute reads in clustering order a page at a time, listings, outcomes."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from datetime import timedelta
from typing import cast

import pytest

from tests.contract.conftest import Env, Factory, FailOn, make_client, read_all
from tickd.schema import changes, deadline, timing
from tickd.schema.changes import ClientChanges
from tickd.schema.errors import Conflict, StoreUnavailable
from tickd.schema.model import (
    Client,
    DeadLetter,
    EventOf,
    FireOutcome,
    HttpCallback,
    InstanceKey,
    KafkaCallback,
    ListCursor,
    Location,
    Options,
    RowStamp,
    Schedule,
    Status,
)
from tickd.schema.store import Store


async def test_create_read_cancel(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(env.later(3600), poller_id=2, callback=KafkaCallback(topic="orders.fired"))
    await store.create_schedule(s, env.now())

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got == s

    cancelled = await store.cancel_schedule(got, env.now())
    assert cancelled.status is Status.CANCELLED and cancelled.version == 2
    again = await store.get_schedule(client_id, s.schedule_id)
    assert again is not None and again.status is Status.CANCELLED and again.version == 1
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.version == 2 and ref.changed_version == 2 and ref.previous is None


async def test_a_change_in_the_millisecond_of_the_create_lands(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A change is a compare-and-set, stamped with its Paxos ballot's millisecond clock, and the create's
    pointer a plain write: stamped by the driver's microseconds, a pointer written earlier in the same
    millisecond won over the change that read it (13% of changes made right after a create were lost on
    a real node, acknowledged, the schedule firing as created). Many tries, since timing decides."""
    later = env.later(3600)
    for i in range(40):
        s = new_schedule(later, poller_id=i % 3)
        await store.create_schedule(s, env.now())
        if i % 2:
            changed = await store.cancel_schedule(s, env.now())
        else:
            moved = Location(s.location.poller_id, later + timedelta(seconds=60))
            updated = dataclasses.replace(s, location=moved, fire_at=moved.due_at)
            changed = await store.replace_schedule(s, updated, env.now())
        ref = await store.get_ref(client_id, s.schedule_id)
        assert ref is not None and (ref.version, ref.location) == (2, changed.location), f"try {i}"
        got = await store.get_schedule(client_id, s.schedule_id)
        assert got is not None and got.status is changed.status, f"try {i}"


async def test_create_schedules_writes_a_group(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    group = [new_schedule(env.later(60 * i), poller_id=i % 3) for i in range(1, 6)]
    await store.create_schedules(group, env.now())
    for s in group:
        assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_stored_times_keep_milliseconds(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    due = env.now() + timedelta(seconds=600, microseconds=456_789)
    s = new_schedule(due, last_error="", payload=b"")
    await store.create_schedule(s, env.now())
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location.due_at == timing.truncate_ms(due) and got.fire_at == timing.truncate_ms(due)
    assert got.last_error == "" and got.payload == b""


async def test_unknown_and_foreign_schedules_are_not_found(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(600))
    await store.create_schedule(s, env.now())
    assert await store.get_schedule("someone-else", s.schedule_id) is None
    assert await store.get_schedule(client_id, new_schedule(env.later(1)).schedule_id) is None
    assert await store.get_ref(client_id, uuid.uuid4()) is None


async def test_stale_change_conflicts(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(3600))
    await store.create_schedule(s, env.now())
    await store.cancel_schedule(s, env.now())
    with pytest.raises(Conflict):
        await store.cancel_schedule(s, env.now())  # still version 1: someone changed it since
    with pytest.raises(Conflict):
        await store.replace_schedule(s, dataclasses.replace(s, payload=b"{}"), env.now())


async def test_a_change_adopts_one_whose_rows_never_landed_and_fences_them(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A reschedule whose pointer moved and whose rows were lost (its process died after the
    compare-and-set): the next change adopts the pointer's version instead of answering 409 for good,
    and its fence wins over the lost batch even when that lands afterwards (a replayed batchlog)."""
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    changes = cast(ClientChanges, store)
    lost = dataclasses.replace(s, location=Location(2, env.later(5400)), version=2)
    lost_base = await changes._change_base(s)
    await changes._bump_ref(s, lost.location, 2, env.now(), base=lost_base)  # ... and the process died

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got == s
    final = await store.replace_schedule(
        got, dataclasses.replace(s, location=Location(0, env.later(7200)), payload=b"{}"), env.now()
    )
    assert final.version == 3
    await changes._write_replacement(s, lost, env.now(), base=lost_base)  # the lost batch lands late

    assert await store.get_schedule(client_id, s.schedule_id) == final
    assert [r.status for r in await read_all(store, s.instance, s.location.minute)] == [Status.MOVED]
    assert await read_all(store, lost.instance, lost.location.minute) in (
        [],
        [dataclasses.replace(lost, status=Status.MOVED)],
    )
    assert [r.schedule_id for r in await read_all(store, final.instance, final.location.minute)] == [s.schedule_id]


async def test_a_slow_change_taken_for_lost_by_a_later_one_answers_conflict(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Acceptance O5: change A moved the pointer, and before its rows landed change B read the schedule,
    took A for lost, fenced it and answered. A's rows then land (fenced): A must not answer 200 after B,
    since B's version is the live one."""
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    changes = cast(ClientChanges, store)
    slow = dataclasses.replace(s, location=Location(2, env.later(5400)), version=2)
    slow_base = await changes._change_base(s)
    await changes._bump_ref(s, slow.location, 2, env.now(), base=slow_base)
    later = await store.replace_schedule(s, dataclasses.replace(s, location=Location(0, env.later(7200))), env.now())
    await changes._write_replacement(s, slow, env.now(), base=slow_base)  # A's rows land after B
    with pytest.raises(Conflict):
        await changes._still_last(s, slow.version)
    assert await store.get_schedule(client_id, s.schedule_id) == later
    await changes._still_last(s, later.version)  # B is the last client change: it stands


async def test_a_cancel_adopts_a_lost_cancel(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(env.later(3600))
    await store.create_schedule(s, env.now())
    changes = cast(ClientChanges, store)
    await changes._bump_ref(s, s.location, 2, env.now(), base=await changes._change_base(s))  # rows lost
    with pytest.raises(Conflict):
        await store.cancel_schedule(dataclasses.replace(s, version=0), env.now())  # not the stored row
    cancelled = await store.cancel_schedule(s, env.now())
    assert cancelled.version == 3
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.status is Status.CANCELLED
    with pytest.raises(Conflict):
        await store.cancel_schedule(s, env.now())  # landed: the stale copy no longer matches the row


async def test_a_cancel_of_a_row_its_pointer_lists_as_stale_stands(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A change lost after its pointer moved to ``to``; the next change adopts it and writes its row at that
    very place (a timed pause's end places its resumed row where the lost try did: simulation seed 601702),
    so the pointer lists ``to`` as stale while the live row is there. A cancel of that row must not fence
    its own row: written at one timestamp, moved and cancelled tie and moved wins, and the cancelled
    schedule reads as a lost change the next one takes over (the seed's wake undid the cancel)."""
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    changes = cast(ClientChanges, store)
    to = Location(1, env.later(5400))
    await changes._bump_ref(s, to, 2, env.now(), base=await changes._change_base(s))  # its rows lost
    live = await store.replace_schedule(s, dataclasses.replace(s, location=to, fire_at=to.due_at), env.now())
    assert live.version == 3 and live.location == to
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and to in ref.stale  # the lost change's target, fenced by every later change
    cancelled = await store.cancel_schedule(live, env.now())
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.status is Status.CANCELLED, got
    assert [r.status for r in await read_all(store, live.instance, to.minute) if r.location == to] == [Status.CANCELLED]
    with pytest.raises(Conflict):  # and no change of the row as it stood takes the cancel for lost
        await store.replace_schedule(live, dataclasses.replace(live, payload=b"{}"), env.now())
    assert cancelled.status is Status.CANCELLED


async def test_changing_an_unknown_schedule_conflicts(env: Env, store: Store, new_schedule: Factory) -> None:
    ghost = new_schedule(env.later(3600))
    with pytest.raises(Conflict):
        await store.cancel_schedule(ghost, env.now())
    assert await read_all(store, ghost.instance, ghost.location.minute) == []  # nothing was written


async def test_replace_moves_the_row_and_leaves_no_live_copy(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    new_due = env.later(7200)
    moved = await store.replace_schedule(
        s, dataclasses.replace(s, location=Location(3, new_due), fire_at=new_due, payload=b"{}"), env.now()
    )
    assert moved.version == 2

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location == Location(3, new_due) and got.payload == b"{}"
    old_rows = await read_all(store, s.instance, s.location.minute)
    assert [r.status for r in old_rows if r.schedule_id == s.schedule_id] == [Status.MOVED]
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.previous == s.location and ref.location == Location(3, new_due)


async def test_replace_in_place_clears_what_the_change_removes(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A write binds "unset" for absent values (a plain create writes no null), but a change rewriting the
    row in place writes null where it removes a value: options a PATCH dropped, an error it cleared. (It
    used to keep them: PATCH throttle: null left the policy applying.)"""
    s = new_schedule(env.later(3600), options=Options(jitter_ms=500, tags=(("a", "b"),)), last_error="HTTP 500")
    await store.create_schedule(s, env.now())
    plain = dataclasses.replace(s, options=None, last_error=None, payload=b"{}")
    await store.replace_schedule(s, plain, env.now())
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.payload == b"{}" and got.version == 2
    assert got.options is None and got.last_error is None
    # A change that keeps them writes them as they are.
    kept = dataclasses.replace(got, options=Options(throttle="p"), last_error="HTTP 503", payload=b"[]")
    await store.replace_schedule(got, kept, env.now())
    again = await store.get_schedule(client_id, s.schedule_id)
    assert again is not None and again.options == Options(throttle="p") and again.last_error == "HTTP 503"


async def test_a_half_done_move_leaves_the_old_row_live(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """The pointer moved but the rows of the move did not land: the old row is still the schedule."""
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    target = dataclasses.replace(s, location=Location(2, env.later(5400)))
    if env.memory:
        env.inject(FailOn(before=("batch:insert_schedule",)))
        with pytest.raises(StoreUnavailable):
            await store.replace_schedule(s, target, env.now())
    else:
        await store._bump_ref(s, target.location, 2, env.now())  # type: ignore[attr-defined]
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.location == target.location and ref.previous == s.location
    assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_concurrent_changes_only_one_wins(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(3600))
    await store.create_schedule(s, env.now())
    moves = [
        store.replace_schedule(s, dataclasses.replace(s, location=Location(p, env.later(4000 + p))), env.now())
        for p in range(4)
    ]
    results = await asyncio.gather(*moves, return_exceptions=True)
    assert sum(not isinstance(r, BaseException) for r in results) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, BaseException))


async def test_read_minute_in_due_order_across_pages(env: Env, new_schedule: Factory, client_id: str) -> None:
    store = await env.store_with(page_size=7)
    minute = timing.minute_bucket(env.later(3 * 3600))
    rng = random.Random(7)
    made = [new_schedule(minute + timedelta(milliseconds=rng.randrange(60_000)), poller_id=1) for _ in range(40)]
    made += [new_schedule(minute + timedelta(seconds=30), poller_id=1) for _ in range(5)]  # equal due times
    for i in range(0, len(made), 5):
        await store.create_schedules(made[i : i + 5], env.now())

    pages = [page async for page in store.read_minute(InstanceKey(client_id, 1), minute)]
    rows = [r for page in pages for r in page]
    assert [len(p) for p in pages] == [7] * 6 + [3]
    assert len(rows) == 45 and {r.schedule_id for r in rows} == {s.schedule_id for s in made}
    keys = [(r.location.due_at, r.schedule_id) for r in rows]
    assert keys == sorted(keys)

    # The tail read a poller uses after a hot mark starts where it is told.
    cut = rows[20].location.due_at
    tail = await read_all(store, InstanceKey(client_id, 1), minute, from_due=cut)
    assert tail == [r for r in rows if r.location.due_at >= cut]

    # A slice (a poller streams a minute so) ends before ``until_due``; slices side by side are the minute.
    end = rows[33].location.due_at
    assert end > cut
    middle = await read_all(store, InstanceKey(client_id, 1), minute, from_due=cut, until_due=end)
    assert middle == [r for r in rows if cut <= r.location.due_at < end]
    slices = [
        await read_all(
            store,
            InstanceKey(client_id, 1),
            minute,
            from_due=minute + timedelta(seconds=s),
            until_due=minute + timedelta(seconds=s + 10),
        )
        for s in range(0, 60, 10)
    ]
    assert [r for part in slices for r in part] == rows


async def test_minute_stamps_are_the_rows_as_read_whole(env: Env, new_schedule: Factory, client_id: str) -> None:
    """A poller's cheap re-read (``read_minute_stamps``) sees what ``read_minute`` sees, page by page and
    from a due time on: the same rows in the same order, with their version, status and attempts as
    they stand after outcomes, a cancel and a reschedule (the moved row stays, marked)."""
    store = await env.store_with(page_size=7)
    minute = timing.minute_bucket(env.later(3 * 3600))
    rng = random.Random(11)
    made = [new_schedule(minute + timedelta(milliseconds=rng.randrange(60_000)), poller_id=2) for _ in range(30)]
    await store.create_schedules(made, env.now())
    fired = env.later(3 * 3600 + 61)
    await store.record_outcomes(
        [
            FireOutcome(client_id, made[0].schedule_id, made[0].location, Status.SUCCEEDED, 1, fired),
            FireOutcome(client_id, made[1].schedule_id, made[1].location, Status.FAILED, 5, fired, "HTTP 500"),
        ]
    )
    await store.cancel_schedule(made[2], env.now())
    later = dataclasses.replace(made[3], location=Location(2, made[3].location.due_at + timedelta(milliseconds=1)))
    await store.replace_schedule(made[3], dataclasses.replace(later, fire_at=later.location.due_at), env.now())

    instance = InstanceKey(client_id, 2)
    rows = await read_all(store, instance, minute)
    pages = [page async for page in store.read_minute_stamps(instance, minute)]
    assert [len(p) for p in pages] == [7] * 4 + [3]  # 31 rows: the reschedule's new one beside the moved one
    expected = [RowStamp(r.location.due_at, r.schedule_id, r.version, r.status, r.attempts) for r in rows]
    assert [s for page in pages for s in page] == expected
    by_id = {s.schedule_id: s for s in expected if s.status is not Status.MOVED}
    assert (by_id[made[0].schedule_id].status, by_id[made[0].schedule_id].attempts) == (Status.SUCCEEDED, 1)
    assert (by_id[made[1].schedule_id].status, by_id[made[1].schedule_id].attempts) == (Status.FAILED, 5)
    assert by_id[made[2].schedule_id].status is Status.CANCELLED
    assert by_id[made[3].schedule_id].version == 2
    assert any(s.schedule_id == made[3].schedule_id and s.status is Status.MOVED for s in expected)

    cut = expected[12].due_at
    tail = [s async for page in store.read_minute_stamps(instance, minute, from_due=cut) for s in page]
    assert tail == [s for s in expected if s.due_at >= cut]
    end = expected[25].due_at
    part = [s async for page in store.read_minute_stamps(instance, minute, from_due=cut, until_due=end) for s in page]
    assert part == [s for s in expected if cut <= s.due_at < end] and len(part) >= 10


async def test_a_full_last_page_is_followed_by_an_empty_one(env: Env, new_schedule: Factory, client_id: str) -> None:
    store = await env.store_with(page_size=7)
    minute = timing.minute_bucket(env.later(3 * 3600))
    await store.create_schedules([new_schedule(minute + timedelta(seconds=i)) for i in range(7)], env.now())
    assert [len(p) async for p in store.read_minute(InstanceKey(client_id, 0), minute)] == [7, 0]
    assert [len(p) async for p in store.read_minute(InstanceKey(client_id, 5), minute)] == [0]


async def test_equal_due_times_sort_by_cassandra_uuid_order(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Cassandra orders uuids by version first: a v5 id (an event row's) after every v4 id."""
    due = env.later(3600)
    v5 = new_schedule(due, schedule_id=uuid.UUID("00000000-0000-5000-8000-000000000000"))
    v4 = new_schedule(due, schedule_id=uuid.UUID("ffffffff-ffff-4fff-bfff-ffffffffffff"))
    await store.create_schedules([v5, v4], env.now())
    assert [r.schedule_id for r in await read_all(store, v4.instance, v4.location.minute)] == [
        v4.schedule_id,
        v5.schedule_id,
    ]


async def test_hot_writes_leave_marks_and_raise_the_horizon(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    soon, far = new_schedule(env.later(5), poller_id=3), new_schedule(env.later(7200), poller_id=3)
    for s in (soon, far):
        await store.create_schedule(s, env.now())
    marks = await store.hot_marks(soon.location.minute)
    mark = next(m for m in marks if m.instance == InstanceKey(client_id, 3))
    assert mark.minute == soon.location.minute
    far_marks = await store.hot_marks(far.location.minute)
    assert InstanceKey(client_id, 3) not in {m.instance for m in far_marks}
    assert await store.get_horizon(InstanceKey(client_id, 3)) == far.location.minute
    # A later write of an earlier minute never lowers the horizon, not even from another process.
    await store.create_schedule(new_schedule(env.later(120), poller_id=3), env.now())
    other = await env.store_with(page_size=11)
    await other.create_schedule(new_schedule(env.later(180), poller_id=3), env.now())
    assert await store.get_horizon(InstanceKey(client_id, 3)) == far.location.minute
    assert await store.get_horizon(InstanceKey(client_id, 2)) is None


async def test_a_cancel_inside_the_hot_window_leaves_a_mark(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    assert InstanceKey(client_id, 1) not in {m.instance for m in await store.hot_marks(s.location.minute)}
    await store.cancel_schedule(s, s.location.due_at - timedelta(seconds=30))  # the API's now, near the fire
    assert InstanceKey(client_id, 1) in {m.instance for m in await store.hot_marks(s.location.minute)}


async def test_two_hot_writes_in_one_millisecond_leave_marks_a_poller_tells_apart(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A create and its cancel at the same API time (one millisecond: what a mark's time keeps) each leave
    a mark of their own, so a poller that saw the create's mark still sees the cancel's (seed 102070)."""
    s = new_schedule(env.later(5), poller_id=2)
    at = env.now()
    await store.create_schedule(s, at)
    first = next(m for m in await store.hot_marks(s.location.minute) if m.instance == InstanceKey(client_id, 2))
    await store.cancel_schedule(s, at)
    second = next(m for m in await store.hot_marks(s.location.minute) if m.instance == InstanceKey(client_id, 2))
    assert second.touched_at == first.touched_at  # the same time ...
    assert second.write_id is not None and second.write_id != first.write_id  # ... another write


async def test_requeue_keeps_the_fire_id_and_moves_the_row(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(30), poller_id=2)
    await store.create_schedule(s, env.now())
    retry_at = env.later(600)
    retried = await store.requeue_schedule(s, retry_at, 2, "HTTP 503", env.now())
    assert retried.fire_id == s.fire_id and retried.attempts == 2 and retried.location.due_at == retry_at

    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location.due_at == retry_at and got.attempts == 2
    assert got.last_error == "HTTP 503" and got.status is Status.SCHEDULED
    old = await read_all(store, s.instance, s.location.minute)
    assert [(r.status, r.attempts) for r in old if r.schedule_id == s.schedule_id] == [(Status.MOVED, 2)]
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.changed_version == 0  # a retry is not the client's change


async def test_requeue_finishes_its_own_half_done_move(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A requeue whose pointer move landed but whose row batch did not (a failure between the two) is
    finished by calling it again: the retried fire must not be dropped as a concurrent change."""
    s = new_schedule(env.later(30), poller_id=1)
    await store.create_schedule(s, env.now())
    retry_at = env.now() + timedelta(seconds=600, microseconds=123)  # sub-ms digits: dropped
    loc = Location(s.location.poller_id, timing.truncate_ms(retry_at))
    if env.memory:
        env.inject(FailOn(before=("batch:insert_schedule",)))
        with pytest.raises(StoreUnavailable):
            await store.requeue_schedule(s, retry_at, 3, "timeout", env.now())
    else:
        await store._bump_ref(s, loc, s.version + 1, env.now(), by_client=False)  # type: ignore[attr-defined]
    assert await store.get_schedule(client_id, s.schedule_id) == s  # the pointer alone changes nothing

    retried = await store.requeue_schedule(s, retry_at, 3, "timeout", env.now())
    assert retried.location == loc and retried.version == s.version + 1 and retried.attempts == 3
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location == loc and got.status is Status.SCHEDULED and got.fire_id == s.fire_id
    old = await read_all(store, s.instance, s.location.minute)
    assert [r.status for r in old if r.schedule_id == s.schedule_id] == [Status.MOVED]

    # Called once more (a retry after an unknown outcome), even with another due time: the row is there.
    assert await store.requeue_schedule(s, env.later(900), 3, "timeout", env.now()) == got


async def test_a_takeover_finishes_a_crashed_requeue_where_it_pointed(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(env.later(30), poller_id=1)
    await store.create_schedule(s, env.now())
    theirs = env.later(600)
    if env.memory:
        env.inject(FailOn(before=("batch:insert_schedule",)))
        with pytest.raises(StoreUnavailable):
            await store.requeue_schedule(s, theirs, 2, "HTTP 503", env.now())
    else:
        await store._bump_ref(s, Location(1, theirs), 2, env.now(), by_client=False)  # type: ignore[attr-defined]
    retried = await store.requeue_schedule(s, env.later(700), 2, "HTTP 503", env.now())
    assert retried.location == Location(1, theirs) and retried.version == 2
    assert await store.get_schedule(client_id, s.schedule_id) == retried


async def test_a_client_change_beats_a_requeue(env: Env, store: Store, new_schedule: Factory) -> None:
    s = new_schedule(env.later(30), poller_id=1)
    await store.create_schedule(s, env.now())
    await store.replace_schedule(s, dataclasses.replace(s, payload=b"{}"), env.now())
    with pytest.raises(Conflict):
        await store.requeue_schedule(s, env.later(600), 2, "HTTP 503", env.now())


async def test_outcomes_update_the_rows_of_a_minute(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    minute = timing.minute_bucket(env.later(600))
    made = [new_schedule(minute + timedelta(seconds=i), poller_id=i % 2) for i in range(4)]
    await store.create_schedules(made, env.now())
    fired = env.later(0)
    await store.record_outcomes(
        [
            FireOutcome(client_id, made[0].schedule_id, made[0].location, Status.SUCCEEDED, 1, fired),
            FireOutcome(client_id, made[1].schedule_id, made[1].location, Status.FAILED, 5, fired, "HTTP 500"),
            FireOutcome(client_id, made[2].schedule_id, made[2].location, Status.SUCCEEDED, 2, fired),
        ]
    )
    got = [await store.get_schedule(client_id, s.schedule_id) for s in made]
    assert [(g.status, g.attempts, g.fired_at, g.last_error) for g in got if g is not None] == [
        (Status.SUCCEEDED, 1, fired, None),
        (Status.FAILED, 5, fired, "HTTP 500"),
        (Status.SUCCEEDED, 2, fired, None),
        (Status.SCHEDULED, 0, None, None),
    ]
    await store.record_outcomes([])


async def test_listing_pages_with_cursors(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    client = make_client(env, client_id, pollers=3)
    start = timing.minute_bucket(env.later(7200))
    made = [new_schedule(start + timedelta(seconds=20 * i), poller_id=i % 3) for i in range(12)]
    await store.create_schedules(made[:6], env.now())
    await store.create_schedules(made[6:], env.now())
    await store.cancel_schedule(made[4], env.now())
    moved = await store.replace_schedule(
        made[5], dataclasses.replace(made[5], location=Location(2, start + timedelta(seconds=230))), env.now()
    )
    end = start + timedelta(minutes=10)

    seen: list[Schedule] = []
    cursor: str | None = None
    for _ in range(20):
        after = ListCursor.decode(cursor) if cursor is not None else None
        page = await store.list_schedules(client, start, end, None, after, 5)
        seen += page.items
        cursor = page.cursor
        if cursor is None:
            break
    expected = sorted([*(s for s in made if s is not made[5]), moved], key=lambda s: (s.location.due_at, s.schedule_id))
    assert [s.schedule_id for s in seen] == [s.schedule_id for s in expected]
    assert [s.status for s in seen].count(Status.CANCELLED) == 1

    cancelled = await store.list_schedules(client, start, end, Status.CANCELLED, None, 100)
    assert [s.schedule_id for s in cancelled.items] == [made[4].schedule_id] and cancelled.cursor is None
    narrow = await store.list_schedules(client, start, start + timedelta(seconds=40), None, None, 100)
    assert [s.schedule_id for s in narrow.items] == [s.schedule_id for s in made[:2]]


async def test_listing_hides_event_rows(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    at = timing.minute_bucket(env.later(3600)) + timedelta(seconds=10)  # its events in the same minute
    trigger = new_schedule(at, poller_id=2, options=Options(events=3, window_ms=3000))
    await store.create_schedule(trigger, env.now())
    events = [
        dataclasses.replace(
            trigger,
            schedule_id=uuid.uuid5(trigger.schedule_id, f"{trigger.fire_id}:{i}"),
            location=Location(2, at + timedelta(seconds=i)),
            options=Options(event=EventOf(trigger.schedule_id, i, 3)),
        )
        for i in range(3)
    ]
    await store.add_events(events, env.now())
    await store.add_events(events, env.now())  # a re-expansion writes the same rows
    rows = await read_all(store, trigger.instance, trigger.location.minute)
    assert sorted(r.event_id or "" for r in rows if r.schedule_id != trigger.schedule_id) == [
        f"{trigger.fire_id}:{i}" for i in range(3)
    ]
    page = await store.list_schedules(
        make_client(env, client_id), at - timedelta(minutes=1), at + timedelta(minutes=1), None, None, 100
    )
    assert [s.schedule_id for s in page.items] == [trigger.schedule_id]


async def test_events_over_several_minutes_and_pollers(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    base = timing.minute_bucket(env.later(600))
    parent = uuid.uuid4()
    events = [
        new_schedule(
            base + timedelta(seconds=25 * i),
            poller_id=i % 2,
            schedule_id=uuid.uuid5(parent, str(i)),
            options=Options(event=EventOf(parent, i, 6)),
            payload=b"x" * 9000,  # two rows per batch at most: several batches per partition
        )
        for i in range(6)
    ]
    await store.add_events(events, env.now())
    found = set()
    for minute in sorted({timing.minute_bucket(e.location.due_at) for e in events}):
        for poller_id in (0, 1):
            found |= {r.schedule_id for r in await read_all(store, InstanceKey(client_id, poller_id), minute)}
    assert found == {e.schedule_id for e in events}
    assert await store.get_horizon(events[-1].instance) == timing.minute_bucket(events[-1].location.due_at)


async def test_dead_letters_round_trip(env: Env, store: Store, client_id: str) -> None:
    now = env.later(0)
    letters = [
        DeadLetter(
            client_id,
            uuid.uuid4(),
            f"fid{i}",
            now + timedelta(seconds=i),
            5,
            "HTTP 500",
            HttpCallback(url="http://x/"),
            b"{}",
        )
        for i in range(3)
    ]
    for letter in letters:
        await store.add_dead_letter(letter)
    assert await store.list_dead_letters(client_id, now.date()) == letters[::-1]  # newest first
    assert await store.list_dead_letters(client_id, now.date() - timedelta(days=1)) == []


async def test_clients_create_once_update_list(env: Env, store: Store, client_id: str) -> None:
    client = make_client(env, client_id, pollers=4)
    assert await store.create_client(client)
    assert not await store.create_client(make_client(env, client_id, pollers=9))
    got = await store.get_client(client_id)
    assert got == client and got.kafka_topics == frozenset()

    shrunk = Client(
        client_id,
        2,
        False,
        "h2",
        client.created_at,
        env.later(1),
        poller_span=4,
        kafka_topics=frozenset({"orders.", "audit."}),
        resized_at=env.later(1),
    )
    await store.update_client(shrunk)
    assert await store.get_client(client_id) == shrunk
    emptied = dataclasses.replace(shrunk, kafka_topics=frozenset(), resized_at=None)
    await store.update_client(emptied)
    got = await store.get_client(client_id)
    assert got == dataclasses.replace(emptied, resized_at=shrunk.resized_at)  # None leaves it as it was
    assert client_id in {c.client_id for c in await store.list_clients()}
    assert await store.get_client("nobody-" + client_id) is None


async def test_a_cancel_far_ahead_keeps_its_status_until_the_row_expires(
    env: Env, new_schedule: Factory, client_id: str
) -> None:
    """The row's other cells live until due time + retention; a cancel's status cell must live as long.
    (It once got the retention counted from now: cancelled more than the retention ahead, the status
    expired first and the row read as scheduled again.) Shown with a retention of 2 s (production: 7 days)."""
    store = await env.store_with(retention_s=2)
    s = new_schedule(env.later(5))
    await store.create_schedule(s, env.now())
    await store.cancel_schedule(s, env.now())
    await env.wait(3.0)
    rows = await read_all(store, s.instance, s.location.minute)
    assert [r.status for r in rows] == [Status.CANCELLED]


async def test_nothing_is_sent_once_the_store_budget_is_spent(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """An API request's store requests share one budget (schema.deadline): spent, the next request is
    refused before it is sent, naming it, and so writes nothing; within it, the same create lands."""
    s = new_schedule(env.later(3600))
    with deadline.budget(0.0), pytest.raises(StoreUnavailable, match="spent"):
        await store.create_schedule(s, env.now())
    assert await store.get_schedule(client_id, s.schedule_id) is None
    with deadline.budget(30.0):
        await store.create_schedule(s, env.now())
        assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_a_conditional_change_refuses_a_change_in_flight_an_unconditional_one_takes_it_over(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Another change of the version read is in flight (its pointer bumped, its rows not written yet): a
    change sent with If-Match refuses (Conflict, the API's 412) and writes nothing; one without takes the
    other over, fencing it (CI at 96c1b95: 2 of 20 concurrent If-Match PATCHes were both answered 200)."""
    s = new_schedule(env.later(3600), poller_id=1)
    await store.create_schedule(s, env.now())
    target = dataclasses.replace(s, location=Location(2, env.later(5400)))
    await store._bump_ref(s, target.location, 2, env.now())  # type: ignore[attr-defined]
    moved = dataclasses.replace(s, location=Location(1, env.later(7200)), payload=b'"mine"')
    token = changes.CONDITIONAL.set(True)
    try:
        with pytest.raises(Conflict):
            await store.replace_schedule(s, moved, env.now())
    finally:
        changes.CONDITIONAL.reset(token)
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.version == 2 and ref.location == target.location  # nothing written
    taken = await store.replace_schedule(s, moved, env.now())
    assert taken.version == 3 and await store.get_schedule(client_id, s.schedule_id) == taken
