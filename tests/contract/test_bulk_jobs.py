"""The tag index and bulk jobs, on both stores: entries written with the schedule, checked against it when
read (a tag removed, a schedule cancelled or gone), walked shard by shard without a time window; a job
stored once per id, its lease taken by one replica at a time, its progress saved only under its lease and
only while it runs."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from tests.contract.conftest import Env, Factory
from tickd.schema import tagged
from tickd.schema.model import BulkFilter, BulkJob, BulkState, Options, Status
from tickd.schema.store import Store

TAG = ("team", "pay")


def job(env: Env, client_id: str, **changes: object) -> BulkJob:
    at = env.later(0)
    fields: dict[str, object] = {
        "client_id": client_id,
        "job_id": uuid.uuid1(),
        "action": "pause",
        "filter": BulkFilter(TAG),
        "dry_run": False,
        "state": BulkState.QUEUED,
        "created_at": at,
        "updated_at": at,
    }
    fields.update(changes)
    return BulkJob(**fields)  # type: ignore[arg-type]


async def walk(store: Store, client_id: str, f: BulkFilter, limit: int, budget: int = 1000) -> list[list[uuid.UUID]]:
    """Every page of the walk, as schedule ids."""
    pages, cursor = [], None
    while True:
        found, cursor = await tagged.page(store, client_id, f, cursor, limit, budget)
        pages.append([s.schedule_id for s in found])
        if cursor is None:
            return pages


async def test_tagged_schedules_are_found_without_a_window_and_checked_against_the_schedule(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    far = [new_schedule(env.later(86400 * d), poller_id=d % 4, options=Options(tags=(TAG,))) for d in (1, 40, 300)]
    other = new_schedule(env.later(3600), options=Options(tags=(("team", "ops"),)))
    untagged = new_schedule(env.later(3600))
    for s in (*far, other, untagged):
        await store.create_schedule(s, env.now())
    pages = await walk(store, client_id, BulkFilter(TAG), limit=2)
    assert sorted(i for p in pages for i in p) == sorted(s.schedule_id for s in far)  # a year apart, one walk
    assert len(pages[0]) == 2 and all(len(p) <= 2 for p in pages)  # full pages, however far apart the shards
    # A cancelled one is still tagged (status filter); a tag removed by a change is not.
    await store.cancel_schedule(far[0], env.now())
    changed = dataclasses.replace(far[1], options=Options(tags=(("team", "ops"),)))
    await store.replace_schedule(far[1], changed, env.now())
    scheduled = await walk(store, client_id, BulkFilter(TAG, status=Status.SCHEDULED), limit=10)
    assert [i for p in scheduled for i in p] == [far[2].schedule_id]
    ops = await walk(store, client_id, BulkFilter(("team", "ops")), limit=10)
    assert sorted(i for p in ops for i in p) == sorted([other.schedule_id, far[1].schedule_id])
    # The due range and the target narrow it further.
    ranged = await walk(store, client_id, BulkFilter(TAG, due_to=env.later(86400 * 100)), limit=10)
    assert [i for p in ranged for i in p] == [far[0].schedule_id]
    assert await walk(store, client_id, BulkFilter(TAG, target="example.org"), limit=10) == [[]]
    hosts = await walk(store, client_id, BulkFilter(TAG, target="127.0.0.1"), limit=10)
    assert len([i for p in hosts for i in p]) == 2


async def test_an_entry_whose_schedule_is_gone_is_skipped_and_dropped(env: Env, store: Store, client_id: str) -> None:
    ghost = uuid.uuid4()
    writes = [
        (
            "insert_tag",
            {"client_id": client_id, "tag": "team=pay", "shard": ghost.int % 16, "schedule_id": ghost, "ttl": 0},
        )
    ]
    await store._db.batch(writes, logged=False)  # type: ignore[attr-defined]
    assert await store.tagged(client_id, TAG, ghost.int % 16, None, 10) == [ghost]
    assert await walk(store, client_id, BulkFilter(TAG), limit=10) == [[]]
    assert await store.tagged(client_id, TAG, ghost.int % 16, None, 10) == []


async def test_a_page_reads_at_most_its_budget_of_entries(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    made = [new_schedule(env.later(3600), options=Options(tags=(TAG,))) for _ in range(5)]
    await store.create_schedules(made, env.now())
    for s in made[:4]:
        await store.cancel_schedule(s, env.now())
    pages = await walk(store, client_id, BulkFilter(TAG, status=Status.SCHEDULED), limit=10, budget=2)
    assert [i for p in pages for i in p] == [made[4].schedule_id]
    assert len(pages) >= 3  # 5 entries, 2 a page: the stale ones cost pages, never a wrong answer


async def test_a_job_is_stored_once_per_id_and_listed_newest_first(env: Env, store: Store, client_id: str) -> None:
    first = await store.create_bulk_job(job(env, client_id))
    again = await store.create_bulk_job(dataclasses.replace(first, action="cancel"))
    assert again.action == "pause" and again.job_id == first.job_id  # the one stored wins
    second = await store.create_bulk_job(job(env, client_id, action="trigger", dry_run=True))
    listed = await store.list_bulk_jobs(client_id, None, 10)
    assert [j.job_id for j in listed] == [second.job_id, first.job_id]
    assert listed[0].dry_run and listed[0].filter == BulkFilter(TAG)
    assert [j.job_id for j in await store.list_bulk_jobs(client_id, second.job_id, 10)] == [first.job_id]
    opened = {j for c, j in await store.open_bulk_jobs(1000) if c == client_id}
    assert opened == {first.job_id, second.job_id}


async def test_one_replica_holds_a_job_and_saves_only_under_its_lease(env: Env, store: Store, client_id: str) -> None:
    queued = await store.create_bulk_job(job(env, client_id, filter=BulkFilter(TAG, status=Status.PAUSED)))
    lease = env.later(30)
    mine = await store.take_bulk_job(queued, "api-a", lease, env.now())
    assert mine is not None and mine.state is BulkState.RUNNING
    assert await store.take_bulk_job(queued, "api-b", lease, env.now()) is None  # read before the take: lost
    cursor = tagged.TagCursor(3).encode()
    progress = dataclasses.replace(mine, cursor=cursor, matched=7, changed=5, unchanged=2, failures=(("x", "y"),))
    assert await store.save_bulk_job(progress, BulkState.RUNNING)
    stored = await store.get_bulk_job(client_id, queued.job_id)
    assert stored is not None
    assert (stored.cursor, stored.matched, stored.changed, stored.unchanged) == (progress.cursor, 7, 5, 2)
    assert stored.failures == (("x", "y"),) and stored.filter.status is Status.PAUSED
    # Another replica takes it over once read as it is now (the lease ran out); the old owner's save fails.
    theirs = await store.take_bulk_job(stored, "api-b", env.later(60), env.now())
    assert theirs is not None and theirs.cursor == progress.cursor
    assert not await store.save_bulk_job(dataclasses.replace(progress, matched=8), BulkState.RUNNING)
    done = dataclasses.replace(theirs, state=BulkState.DONE, finished_at=env.now())
    assert await store.save_bulk_job(done, BulkState.RUNNING)
    assert queued.job_id not in {j for c, j in await store.open_bulk_jobs(1000) if c == client_id}


async def test_a_cancelled_job_stops_its_runner(env: Env, store: Store, client_id: str) -> None:
    queued = await store.create_bulk_job(job(env, client_id))
    running = await store.take_bulk_job(queued, "api-a", env.later(30), env.now())
    assert running is not None
    assert not await store.stop_bulk_job(queued, env.now())  # read as queued: it moved on
    assert await store.stop_bulk_job(running, env.now() + timedelta(seconds=1))
    assert not await store.save_bulk_job(dataclasses.replace(running, matched=1), BulkState.RUNNING)
    stored = await store.get_bulk_job(client_id, queued.job_id)
    assert stored is not None and stored.state is BulkState.CANCELLED and stored.finished_at is not None
    assert queued.job_id not in {j for c, j in await store.open_bulk_jobs(1000) if c == client_id}
