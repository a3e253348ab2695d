"""Bulk jobs and tag listings over the API (in-memory store): every schedule with a tag listed without a time
window in full pages; a dry run counts and changes nothing; pause, resume, cancel and trigger act on
exactly the schedules the filter selects (another tenant's with the same tag untouched), each once, audited
as the job's; a job taken over after its replica died (its lease run out) finishes from its last saved
page and changes nothing twice; Idempotency-Key replays the job; cancel stops it; limits and bad input are
refused naming the field."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN_TOKEN, Api, Register, schedule_body
from tests.waiting import until
from tickd.schema.model import BulkState, Status
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


@pytest.fixture
def api_settings() -> ApiSettings:
    """Jobs looked for often and run fast, in pages of 3: a job of a dozen schedules saves several pages."""
    return ApiSettings(
        admin_token=ADMIN_TOKEN,
        callback_allow_private=True,
        bulk_poll_s=0.05,
        bulk_page=3,
        bulk_rate_per_s=10_000.0,
    )


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def made(api: Api, key: dict[str, str], n: int, tags: dict[str, str], **changes: Any) -> list[str]:
    ids = []
    for i in range(n):
        body = schedule_body(**{"delay_s": 3600 + 86400 * 30 * i, "tags": tags, **changes})  # months apart
        ids.append((await ok(await api.post("/v1/schedules", json=body, headers=key), 201))["schedule_id"])
    return ids


async def finished(api: Api, key: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job once it is done (or cancelled)."""
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update(await ok(await api.get(f"/v1/bulk-jobs/{job_id}", headers=key)))
        return seen["state"] in ("done", "cancelled")

    await until(done, 20, f"bulk job {job_id} done")
    return seen


async def statuses(api: Api, key: dict[str, str], ids: list[str]) -> list[str]:
    return [(await ok(await api.get(f"/v1/schedules/{i}", headers=key)))["status"] for i in ids]


async def test_a_tag_lists_every_schedule_with_it_without_a_window(api: Api, register: Register) -> None:
    _, key = await register()
    mine = await made(api, key, 7, {"team": "pay"})
    await made(api, key, 2, {"team": "ops"})
    seen, pages, cursor = [], 0, None
    while True:
        query = {"tag": "team=pay", "limit": "3", **({"cursor": cursor} if cursor else {})}
        page = await ok(await api.get("/v1/schedules", params=query, headers=key))
        pages += 1
        seen += [s["schedule_id"] for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(page["schedules"]) == 3  # full pages until the last, though they are months apart
    assert sorted(seen) == sorted(mine) and pages == 3
    # Without a tag the window is still required; the error names it.
    refused = await api.get("/v1/schedules", params={"status": "scheduled"}, headers=key)
    assert refused.status == 422 and (await refused.json())["error"]["field"] == "from"
    forged = await api.get("/v1/schedules", params={"tag": "team=pay", "cursor": "bm90LWEtY3Vyc29y"}, headers=key)
    assert forged.status == 422 and (await forged.json())["error"]["field"] == "cursor"


async def test_a_dry_run_counts_and_a_pause_then_resume_changes_exactly_the_tagged(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    _, other_key = await register()
    tagged_ids = await made(api, key, 8, {"team": "pay"}, cron="0 9 * * *", timezone="UTC", delay_s=None)
    untouched = await made(api, key, 2, {"team": "ops"})
    theirs = await made(api, other_key, 2, {"team": "pay"})
    dry = await ok(
        await api.post(
            "/v1/bulk-jobs", json={"action": "pause", "filter": {"tag": "team=pay"}, "dry_run": True}, headers=key
        ),
        202,
    )
    assert dry["state"] == "queued" and dry["dry_run"]
    counted = await finished(api, key, dry["job_id"])
    assert (counted["matched"], counted["changed"], counted["failed"]) == (8, 0, 0)
    assert set(await statuses(api, key, tagged_ids)) == {"scheduled"}  # a dry run changes nothing

    job = await ok(
        await api.post("/v1/bulk-jobs", json={"action": "pause", "filter": {"tag": "team=pay"}}, headers=key), 202
    )
    paused = await finished(api, key, job["job_id"])
    assert (paused["state"], paused["matched"], paused["changed"], paused["unchanged"]) == ("done", 8, 8, 0)
    assert set(await statuses(api, key, tagged_ids)) == {"paused"}
    assert set(await statuses(api, key, untouched)) == {"scheduled"}
    assert set(await statuses(api, other_key, theirs)) == {"scheduled"}  # the same tag, another tenant
    # Each change is in the schedule's audit trail as the job's.
    trail = await ok(await api.get(f"/v1/schedules/{tagged_ids[0]}/audit", headers=key))
    pause = next(r for r in trail["records"] if r["action"] == "schedule.pause")
    assert pause["request_id"] == f"bulk:{job['job_id']}" and pause["actor"].startswith("key:")
    # A second pause finds them paused: matched, unchanged.
    again = await ok(
        await api.post("/v1/bulk-jobs", json={"action": "pause", "filter": {"tag": "team=pay"}}, headers=key), 202
    )
    assert (await finished(api, key, again["job_id"]))["unchanged"] == 8
    resume = {"action": "resume", "filter": {"tag": "team=pay", "status": "paused"}}
    resumed = await finished(
        api, key, (await ok(await api.post("/v1/bulk-jobs", json=resume, headers=key), 202))["job_id"]
    )
    assert (resumed["matched"], resumed["changed"]) == (8, 8)
    assert set(await statuses(api, key, tagged_ids)) == {"scheduled"}
    feed = await ok(await api.get("/v1/notifications", headers=key))
    assert sum(1 for n in feed["notices"] if n["kind"] == "bulk_job.done") == 4  # one per job
    assert client_id


async def test_cancel_and_trigger_by_tag_each_once_and_refusals_are_counted(api: Api, register: Register) -> None:
    _, key = await register()
    far = await made(api, key, 3, {"batch": "7"})
    soon = (
        await ok(await api.post("/v1/schedules", json=schedule_body(delay_s=0, tags={"batch": "7"}), headers=key), 201)
    )["schedule_id"]
    job = await ok(
        await api.post("/v1/bulk-jobs", json={"action": "cancel", "filter": {"tag": "batch=7"}}, headers=key), 202
    )
    done = await finished(api, key, job["job_id"])
    # The one due now cannot change (fire_imminent) or has fired: a failure with its reason, not a 5xx.
    assert done["changed"] == 3 and done["matched"] == 4 and done["failed"] == 1
    assert done["failures"][0]["schedule_id"] == soon
    assert done["failures"][0]["reason"] in ("fire_imminent", "already_fired")
    assert set(await statuses(api, key, far)) == {"cancelled"}

    live = await made(api, key, 2, {"batch": "8"}, delay_s=7200)
    trig = await ok(
        await api.post("/v1/bulk-jobs", json={"action": "trigger", "filter": {"tag": "batch=8"}}, headers=key), 202
    )
    assert (await finished(api, key, trig["job_id"]))["changed"] == 2
    for sid in live:
        trail = await ok(await api.get(f"/v1/schedules/{sid}/audit", headers=key))
        assert sum(1 for r in trail["records"] if r["action"] == "schedule.trigger") == 1


async def test_a_job_whose_replica_died_is_finished_by_another_and_changes_nothing_twice(
    api: Api, register: Register, store: Store
) -> None:
    """The replica that took the job saved one page and died (its lease stands in the store); the job is
    left alone while the lease lasts, then taken over from the saved page: every schedule paused once."""
    client_id, key = await register()
    ids = await made(api, key, 10, {"wave": "1"}, cron="0 9 * * *", timezone="UTC", delay_s=None)
    job_id = uuid.uuid1()
    from tickd.schema.model import BulkFilter, BulkJob

    at = datetime.now(UTC).replace(microsecond=0)
    job = await store.create_bulk_job(
        BulkJob(
            client_id, job_id, "pause", BulkFilter(("wave", "1")), False, BulkState.QUEUED, at, at, actor="key:dead"
        )
    )
    # The dead replica's first page: three schedules paused, the page saved, then nothing (lease 1 s).
    from tickd.schema import tagged

    taken = await store.take_bulk_job(job, "dead-replica", at + timedelta(seconds=1), at)
    assert taken is not None
    first, cursor = await tagged.page(store, client_id, BulkFilter(("wave", "1")), None, 3, 30)
    client = await store.get_client(client_id)
    assert client is not None
    for s in first:
        await store.pause_schedule(s, datetime.now(UTC))
    assert cursor is not None
    saved = dataclasses.replace(taken, cursor=cursor.encode(), matched=3, changed=3)
    assert await store.save_bulk_job(saved, BulkState.RUNNING)
    # ... and it paused one more schedule of the next page before it died, without saving.
    second, _ = await tagged.page(store, client_id, BulkFilter(("wave", "1")), cursor, 1, 10)
    await store.pause_schedule(second[0], datetime.now(UTC))

    done = await finished(api, key, str(job_id))
    assert done["state"] == "done" and done["matched"] == 10
    assert (done["changed"], done["unchanged"]) == (9, 1)  # the one paused before the crash: not again
    assert set(await statuses(api, key, ids)) == {"paused"}
    for sid in ids:  # each paused once: one pause in its trail at most (the dead replica wrote none)
        trail = await ok(await api.get(f"/v1/schedules/{sid}/audit", headers=key))
        assert sum(1 for r in trail["records"] if r["action"] == "schedule.pause") <= 1
    stored = await store.get_schedule(client_id, uuid.UUID(ids[0]))
    assert stored is not None and stored.status is Status.PAUSED


async def test_idempotency_key_replays_the_job_cancel_stops_it_and_limits_hold(
    api: Api, register: Register, api_settings: ApiSettings
) -> None:
    _, key = await register()
    body = {"action": "pause", "filter": {"tag": "x=1"}, "dry_run": True}
    first = await ok(await api.post("/v1/bulk-jobs", json=body, headers={**key, "Idempotency-Key": "k1"}), 202)
    replay = await api.post("/v1/bulk-jobs", json=body, headers={**key, "Idempotency-Key": "k1"})
    assert (await ok(replay))["job_id"] == first["job_id"] and replay.headers["Idempotent-Replayed"] == "true"
    other = await api.post("/v1/bulk-jobs", json={**body, "action": "cancel"}, headers={**key, "Idempotency-Key": "k1"})
    assert other.status == 422  # the same key, another request
    listed = await ok(await api.get("/v1/bulk-jobs", headers=key))
    assert [j["job_id"] for j in listed["jobs"]] == [first["job_id"]]
    done = await finished(api, key, first["job_id"])
    assert (await ok(await api.post(f"/v1/bulk-jobs/{done['job_id']}/cancel", headers=key), 409))["error"][
        "code"
    ] == "already_done"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "explode", "filter": {"tag": "a=b"}}, "action"),
        ({"action": "pause", "filter": {}}, "filter.tag"),
        ({"action": "pause", "filter": {"tag": "no-equals"}}, "filter.tag"),
        ({"action": "pause", "filter": {"tag": "a=b", "status": "moved"}}, "filter.status"),
        ({"action": "pause", "filter": {"tag": "a=b", "from": 100, "to": 50}}, "filter.to"),
        ({"action": "pause", "filter": {"tag": "a=b", "from": 100.5}}, "filter.from"),
        ({"action": "pause", "filter": {"tag": "a=b", "target": "a b"}}, "filter.target"),
        ({"action": "pause", "filter": {"tag": "a=b"}, "dry_run": "yes"}, "dry_run"),
        ({"action": "pause", "filter": {"tag": "a=b"}, "extra": 1}, "extra"),
    ],
)
async def test_bad_bulk_jobs_are_refused_naming_the_field(api: Api, register: Register, body: Any, field: str) -> None:
    _, key = await register()
    resp = await api.post("/v1/bulk-jobs", json=body, headers=key)
    answer = await resp.json()
    assert resp.status in (400, 422) and answer["error"]["field"] == field, answer


async def test_a_client_has_at_most_its_open_jobs_and_sees_only_its_own(
    api: Api, register: Register, api_settings: ApiSettings, store: Store
) -> None:
    client_id, key = await register()
    _, other = await register()
    from tickd.schema.model import BulkFilter, BulkJob

    at = datetime.now(UTC)
    for _ in range(api_settings.bulk_open_max):  # held by a replica that is alive: they stay open
        queued = await store.create_bulk_job(
            BulkJob(client_id, uuid.uuid1(), "pause", BulkFilter(("x", "1")), True, BulkState.QUEUED, at, at)
        )
        assert await store.take_bulk_job(queued, "busy-replica", at + timedelta(hours=1), at) is not None
    refused = await api.post("/v1/bulk-jobs", json={"action": "pause", "filter": {"tag": "x=1"}}, headers=key)
    assert refused.status == 429 and (await refused.json())["error"]["code"] == "too_many_bulk_jobs"
    mine = await ok(await api.get("/v1/bulk-jobs", headers=key))
    assert len(mine["jobs"]) == api_settings.bulk_open_max
    assert (await ok(await api.get("/v1/bulk-jobs", headers=other)))["jobs"] == []
    some = mine["jobs"][0]["job_id"]
    assert (await api.get(f"/v1/bulk-jobs/{some}", headers=other)).status == 404
    assert (await api.post(f"/v1/bulk-jobs/{some}/cancel", headers=other)).status == 404
    stopped = await ok(await api.post(f"/v1/bulk-jobs/{some}/cancel", headers=key))
    assert stopped["state"] == "cancelled"
    assert (await ok(await api.post(f"/v1/bulk-jobs/{some}/cancel", headers=key)))["state"] == "cancelled"
    assert (
        await api.post("/v1/bulk-jobs", json={"action": "pause", "filter": {"tag": "x=1"}}, headers=key)
    ).status == 202


async def test_an_integral_float_time_in_the_filter_is_taken_as_an_integer(api: Api, register: Register) -> None:
    """Schemathesis: 175288889917.0 is an integer to JSON Schema, so a nested epoch written so is accepted."""
    _, key = await register()
    body = {"action": "pause", "filter": {"tag": "a=b", "from": 1752888899.0, "to": 1752888999}, "dry_run": True}
    job = await ok(await api.post("/v1/bulk-jobs", json=body, headers=key), 202)
    assert job["filter"]["from"].startswith("2025-07-19")


async def test_a_job_listed_before_it_is_stored_runs_once_it_is(api: Api, register: Register, store: Store) -> None:
    """Simulation seed 500082: a job's open entry is written first and its row a while later (a slow
    compare-and-set); a replica polling in between must pass it over, not drop it, or it never runs."""
    client_id, key = await register()
    await made(api, key, 2, {"late": "1"})
    from tickd.schema.model import BulkFilter, BulkJob

    at = datetime.now(UTC)
    job = BulkJob(client_id, uuid.uuid1(), "pause", BulkFilter(("late", "1")), False, BulkState.QUEUED, at, at)
    polls = 0
    listed = store.open_bulk_jobs

    async def counted(max_rows: int) -> list[tuple[str, uuid.UUID]]:
        nonlocal polls
        polls += 1
        return await listed(max_rows)

    store.open_bulk_jobs = counted  # type: ignore[method-assign]
    await store._db.write("open_bulk_job", {"client_id": client_id, "job_id": job.job_id, "ttl": 3600})  # type: ignore[attr-defined]
    seen = polls
    await until(lambda: polls >= seen + 3, 10, "three polls with the job listed and not stored")
    db = store._db  # type: ignore[attr-defined]
    write = db.write

    async def row_only(name: str, values: Any) -> None:  # the entry was written long before: only the row now
        if name != "open_bulk_job":
            await write(name, values)

    db.write = row_only
    try:
        await store.create_bulk_job(job)
    finally:
        db.write = write
    assert (await finished(api, key, str(job.job_id)))["changed"] == 2


async def test_a_tag_page_on_a_slow_store_stops_at_half_its_time_with_a_cursor(
    api: Api, register: Register, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status filter no entry matches, on a store slow to read each schedule: the page stops once half
    the request's store time is spent and hands out a cursor (not a 503 once all of it is), and paging on
    reads the index to its end (acceptance O7 in CI: 2,000 paused entries did not fit in 10 s)."""
    from tickd.schema import deadline, tagged
    from tickd.schema.model import BulkFilter

    client_id, key = await register()
    await made(api, key, 40, {"wave": "slow"})
    reads = 0
    get_schedule = store.get_schedule

    async def slow(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.02)
        return await get_schedule(*args, **kwargs)

    monkeypatch.setattr(store, "get_schedule", slow)
    monkeypatch.setattr(tagged, "CHUNK", 8)  # one look at the clock per 8 reads: 20 ms of reading each
    wanted = BulkFilter(("wave", "slow"), Status.PAUSED)
    pages = 0
    cursor = None
    while True:
        with deadline.budget(0.05):
            deadline.left_s("first request")  # the budget's clock starts, as a store's first request starts it
            found, cursor = await tagged.page(store, client_id, wanted, cursor, 100, 2000)
        pages += 1
        assert found == []
        if cursor is None:
            break
    assert reads == 40  # every entry read once, over several pages
    assert pages > 1


async def failed_tagged(
    api: Api, store: Store, key: dict[str, str], client_id: str, tags: dict[str, str], ago_s: float
) -> str:
    """A tagged schedule made over the API whose fire then failed for good ``ago_s`` ago: its id."""
    from tickd.schema import timing
    from tickd.schema.model import DeadLetter, FireOutcome

    sid = (await ok(await api.post("/v1/schedules", json=schedule_body(tags=tags), headers=key), 201))["schedule_id"]
    s = await store.get_schedule(client_id, uuid.UUID(sid))
    assert s is not None
    failed_at = timing.truncate_ms(datetime.now(UTC) - timedelta(seconds=ago_s))
    await store.record_outcomes(
        [FireOutcome(client_id, s.schedule_id, s.location, Status.FAILED, 3, failed_at, "HTTP 500")]
    )
    await store.add_dead_letter(
        DeadLetter(client_id, s.schedule_id, s.fire_id, failed_at, 3, "HTTP 500", s.callback, s.payload)
    )
    return sid


async def test_a_bulk_redrive_redrives_the_tagged_dead_letters_of_its_range_once(
    api: Api, register: Register, store: Store
) -> None:
    """Redrive by tag: the dead letters of the last 7 days (the default range) of schedules with the tag,
    each fire again once (its schedule scheduled again, audited as the job's); not another tag's, not
    an older one's, not another tenant's; a dry run counts first; a second job finds none left."""
    client_id, key = await register()
    other_id, other_key = await register()
    wanted = [await failed_tagged(api, store, key, client_id, {"wave": "r"}, 60 + i) for i in range(5)]
    other_tag = await failed_tagged(api, store, key, client_id, {"wave": "x"}, 60)
    too_old = await failed_tagged(api, store, key, client_id, {"wave": "r"}, 10 * 86400)
    theirs = await failed_tagged(api, store, other_key, other_id, {"wave": "r"}, 60)
    body = {"action": "redrive", "filter": {"tag": "wave=r"}}

    counted = await finished(
        api,
        key,
        (await ok(await api.post("/v1/bulk-jobs", json={**body, "dry_run": True}, headers=key), 202))["job_id"],
    )
    assert (counted["matched"], counted["changed"]) == (5, 0)
    assert set(await statuses(api, key, wanted)) == {"failed"}  # a dry run changes nothing

    created = await ok(await api.post("/v1/bulk-jobs", json=body, headers=key), 202)
    assert created["filter"]["from"] is not None and created["filter"]["to"] is not None  # the range, fixed now
    done = await finished(api, key, created["job_id"])
    assert (done["state"], done["matched"], done["changed"], done["failed"]) == ("done", 5, 5, 0)
    assert set(await statuses(api, key, wanted)) == {"scheduled"}  # each fire written again
    assert await statuses(api, key, [other_tag, too_old]) == ["failed", "failed"]
    assert await statuses(api, other_key, [theirs]) == ["failed"]
    letters = (await ok(await api.get("/v1/dead-letters", params={"limit": "100"}, headers=key)))["dead_letters"]
    redriven = {d["schedule_id"] for d in letters if d["redriven_at"] is not None}
    assert redriven == set(wanted)
    trail = await ok(await api.get(f"/v1/schedules/{wanted[0]}/audit", headers=key))
    redrives = [r for r in trail["records"] if r["action"] == "dead_letter.redrive"]
    assert [r["request_id"] for r in redrives] == [f"bulk:{created['job_id']}"]

    again = await finished(api, key, (await ok(await api.post("/v1/bulk-jobs", json=body, headers=key), 202))["job_id"])
    assert (again["matched"], again["changed"]) == (0, 0)  # none left to redrive: no fire twice


@pytest.mark.parametrize(
    ("range_", "field"),
    [
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "filter.to"),  # more than 31 days
        ({"to": "0001-01-02T00:00:00Z"}, "filter.to"),  # no 7 days before it
    ],
)
async def test_a_bulk_redrive_range_past_the_dead_letters_bounds_is_refused(
    api: Api, register: Register, range_: dict[str, str], field: str
) -> None:
    _, key = await register()
    body = {"action": "redrive", "filter": {"tag": "wave=r", **range_}}
    resp = await api.post("/v1/bulk-jobs", json=body, headers=key)
    assert resp.status == 422, await resp.text()
    assert (await resp.json())["error"]["field"] == field
