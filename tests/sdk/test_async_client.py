"""Every operation of the asyncio client against the real API (the same surface as ``Tickd``, awaited)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from tickd_client import (
    NO_RETRY,
    AsyncTickd,
    Conflict,
    DebounceFields,
    Forbidden,
    Invalid,
    MissedFields,
    MissedPolicy,
    NotFound,
    PreconditionFailed,
    Tickd,
    Unauthorized,
)

from tests.sdk.conftest import Dev, wait_for_runs


@pytest.fixture
async def tenant(dev: Dev) -> AsyncIterator[AsyncTickd]:
    async with AsyncTickd(dev.url, admin_token=dev.admin_token) as admin:
        created = await admin.create_client(f"sdk-{uuid.uuid4().hex[:12]}", 2)
    assert created.api_key is not None
    async with AsyncTickd(dev.url, api_key=created.api_key, admin_token=dev.admin_token) as client:
        yield client


async def test_clients(dev: Dev) -> None:
    client_id = f"sdk-{uuid.uuid4().hex[:12]}"
    async with AsyncTickd(dev.url, admin_token=dev.admin_token) as admin:
        created = await admin.create_client(client_id, 4)
        assert client_id in [c.client_id for c in await admin.list_clients()]
        assert (await admin.get_client(client_id)).poller_count == 4
        assert (await admin.resize_client(client_id, 8)).poller_count == 8
        assert (await admin.deactivate_client(client_id)).active is False
        assert (await admin.activate_client(client_id)).active is True
        assert (await admin.update_client(client_id, kafka_topics=["a.*"])).kafka_topics == ["a.*"]
        rotated = await admin.rotate_key(client_id)
        signing = await admin.rotate_signing_secret(client_id)
    assert signing.signing_secret.startswith("whsec_") and signing.signing_secret != created.signing_secret
    assert rotated.api_key != created.api_key


async def test_schedules(tenant: AsyncTickd, dev: Dev) -> None:
    created = await tenant.create_schedule(delay_s=3600, callback=dev.healthz(), payload=[1, 2])
    assert (await tenant.get_schedule(created.schedule_id)).payload == [1, 2]
    assert (await tenant.update_schedule(created.schedule_id, payload="x")).payload == "x"
    assert (await tenant.cancel_schedule(created.schedule_id)).status == "cancelled"
    batch = await tenant.create_schedules([{"delay_s": 3600, "callback": dev.healthz()}] * 3)
    assert all(item.schedule_id for item in batch)
    found = await tenant.preview(every="15m", start_at="2026-12-01T00:00:00Z", count=2, after="2026-12-01T00:00:00Z")
    assert [o.utc.minute for o in found] == [15, 30]  # after is exclusive


async def test_list_schedules_pages(tenant: AsyncTickd, dev: Dev) -> None:
    ids = {(await tenant.create_schedule(delay_s=3600, callback=dev.healthz())).schedule_id for _ in range(5)}
    now = datetime.now(UTC)
    listed = [s.schedule_id async for s in tenant.list_schedules(now, now + timedelta(hours=2), page_size=2)]
    assert sorted(listed) == sorted(ids)


async def test_runs_pages(dev: Dev, recurring: str) -> None:
    requests: list[httpx.Request] = []

    async def count(request: httpx.Request) -> None:
        requests.append(request)

    with Tickd(dev.url, api_key=dev.api_key) as sync:
        await asyncio.to_thread(wait_for_runs, sync, recurring, 3)
    http = httpx.AsyncClient(base_url=dev.url, event_hooks={"request": [count]})
    async with AsyncTickd(dev.url, api_key=dev.api_key, http=http) as client:
        runs = [r async for r in client.runs(recurring, page_size=1)]
    assert len(runs) >= 3 and len(requests) >= 3
    assert [r.nominal_at for r in runs] == sorted((r.nominal_at for r in runs), reverse=True)


async def test_policies_and_release(tenant: AsyncTickd, dev: Dev) -> None:
    assert (await tenant.put_policy("p", max_in_flight=1, release_timeout_s=60)).in_flight == 0
    assert [p.name for p in await tenant.list_policies()] == ["p"]
    schedule = await tenant.create_schedule(delay_s=0, callback=dev.healthz(), throttle="p")
    deadline = time.monotonic() + 20
    while (await tenant.get_policy("p")).in_flight != 1:
        assert time.monotonic() < deadline, "the event was not delivered in 20 s"
        await asyncio.sleep(0.1)
    assert (await tenant.release_event(f"{schedule.fire_id}:0")).released is True
    assert (await tenant.delete_policy("p")).name == "p"


async def test_errors(tenant: AsyncTickd, dev: Dev) -> None:
    with pytest.raises(Invalid) as bad:
        await tenant.create_schedule(delay_s=-1, callback=dev.healthz())
    assert (bad.value.status, bad.value.field) == (400, "delay_s")
    with pytest.raises(NotFound):
        await tenant.cancel_schedule(str(uuid.uuid4()))
    async with AsyncTickd(dev.url, retry=NO_RETRY) as nobody:
        with pytest.raises(Unauthorized):
            await nobody.list_policies()
        with pytest.raises(Unauthorized):
            await nobody.list_clients()
    async with AsyncTickd(dev.url, admin_token=dev.api_key) as not_admin:
        with pytest.raises(Forbidden):
            await not_admin.get_client("dev")
    async with AsyncTickd(dev.url, admin_token=dev.admin_token) as admin:
        with pytest.raises(Conflict):
            await admin.create_client("dev", 2)


async def test_pause_resume_trigger(tenant: AsyncTickd, dev: Dev) -> None:
    created = await tenant.create_schedule(every="1h", callback=dev.healthz(), payload={"p": 1})
    assert (await tenant.pause_schedule(created.schedule_id)).status == "paused"
    assert (await tenant.pause_schedule(created.schedule_id)).status == "paused"
    assert (await tenant.get_schedule(created.schedule_id)).status == "paused"
    resumed = await tenant.resume_schedule(created.schedule_id)
    assert resumed.status == "scheduled" and resumed.fire_id == created.fire_id  # the hour had not come
    with pytest.raises(Conflict) as twice:
        await tenant.resume_schedule(created.schedule_id)
    assert twice.value.code == "not_paused"
    trigger = await tenant.trigger_schedule(created.schedule_id)
    assert trigger.trigger_of == created.schedule_id and trigger.payload == {"p": 1}
    assert trigger.fire_id.startswith(f"{created.schedule_id}:") and trigger.fire_id != created.fire_id
    keyed = await tenant.trigger_schedule(created.schedule_id, idempotency_key="t-1")
    assert (await tenant.trigger_schedule(created.schedule_id, idempotency_key="t-1")).fire_id == keyed.fire_id
    deadline = time.monotonic() + 20
    while (await tenant.get_schedule(trigger.schedule_id)).status != "succeeded":
        assert time.monotonic() < deadline, "the trigger did not fire in 20 s"
        await asyncio.sleep(0.1)
    assert (await tenant.get_schedule(created.schedule_id)).fire_at == created.fire_at


async def test_timed_pause_with_a_note(tenant: AsyncTickd, dev: Dev) -> None:
    created = await tenant.create_schedule(every="1h", callback=dev.healthz())
    until = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    paused = await tenant.pause_schedule(created.schedule_id, until=until, note="freeze")
    assert paused.pause is not None and (paused.pause.until, paused.pause.note) == (until, "freeze")
    assert paused.due_at == until and (await tenant.get_schedule(created.schedule_id)).pause == paused.pause
    assert await tenant.pause_schedule(created.schedule_id, until=until, note="freeze") == paused  # no change
    noted = await tenant.pause_schedule(created.schedule_id, note="longer freeze")  # replaced: no end now
    assert noted.pause is not None and (noted.pause.until, noted.pause.note) == (None, "longer freeze")
    with pytest.raises(ValueError, match="timezone"):
        await tenant.pause_schedule(created.schedule_id, until=datetime(2030, 1, 1))  # noqa: DTZ001
    with pytest.raises(Invalid) as past:
        await tenant.pause_schedule(created.schedule_id, until=int(time.time()) - 60)
    assert past.value.field == "until"
    resumed = await tenant.resume_schedule(created.schedule_id)
    assert resumed.status == "scheduled" and resumed.pause is None


async def test_put_get_cancel_by_key(tenant: AsyncTickd, dev: Dev) -> None:
    fire_at = datetime.now(UTC) + timedelta(hours=1)
    first = await tenant.put_schedule_by_key("k.1", fire_at=fire_at, callback=dev.healthz(), payload=1)
    second = await tenant.put_schedule_by_key("k.1", fire_at=fire_at, callback=dev.healthz(), payload=2)
    assert second.schedule_id == first.schedule_id and (first.payload, second.payload) == (1, 2)
    assert (await tenant.get_schedule_by_key("k.1")) == second
    assert (await tenant.cancel_schedule_by_key("k.1")).status == "cancelled"
    assert (await tenant.cancel_schedule_by_key("k.1")).status == "cancelled"
    third = await tenant.put_schedule_by_key("k.1", fire_at=fire_at, callback=dev.healthz())
    assert third.schedule_id != first.schedule_id
    with pytest.raises(NotFound):
        await tenant.cancel_schedule_by_key("k.2")


async def test_a_debounced_put_by_key(tenant: AsyncTickd, dev: Dev) -> None:
    debounce: DebounceFields = {"window_s": 30, "max_wait_s": 300}
    first = await tenant.put_schedule_by_key("doc.1", debounce=debounce, callback=dev.healthz(), payload=1)
    assert first.debounce is not None and first.debounce.first_put_at is not None
    assert (first.debounce.window_s, first.debounce.max_wait_s, first.debounce.edge) == (30.0, 300.0, "trailing")
    assert first.debounce.last_put_at == first.debounce.first_put_at
    assert first.fire_at == first.debounce.first_put_at + timedelta(seconds=30)
    await asyncio.sleep(0.05)
    second = await tenant.put_schedule_by_key("doc.1", debounce=debounce, callback=dev.healthz(), payload=2)
    assert second.schedule_id == first.schedule_id and second.payload == 2
    assert second.debounce is not None and second.debounce.last_put_at is not None
    assert second.debounce.first_put_at == first.debounce.first_put_at  # the same burst
    assert second.debounce.last_put_at > first.debounce.last_put_at
    assert second.fire_at == second.debounce.last_put_at + timedelta(seconds=30) > first.fire_at  # pushed back
    assert await tenant.get_schedule_by_key("doc.1") == second
    with pytest.raises(Invalid) as timed:
        await tenant.put_schedule_by_key("doc.1", debounce=debounce, fire_at=first.fire_at, callback=dev.healthz())
    assert (timed.value.status, timed.value.field) == (422, "fire_at")
    assert await tenant.get_schedule_by_key("doc.1") == second  # the refused PUT changed nothing


async def test_dead_letters(tenant: AsyncTickd, dev: Dev) -> None:
    one = await tenant.create_schedule(delay_s=0, callback=dev.refusing(), payload="one")
    two = await tenant.create_schedule(delay_s=0, callback=dev.refusing(), payload="two")
    deadline = time.monotonic() + 30
    while len(listed := [d async for d in tenant.list_dead_letters(page_size=1)]) < 2:
        assert time.monotonic() < deadline, "no two dead letters after 30 s"
        await asyncio.sleep(0.1)
    # A listing shows no payloads (the API reads none for a list); GET of one dead letter does.
    assert [d.payload for d in listed] == [None, None]
    assert sorted([(await tenant.get_dead_letter(d.dead_letter_id)).payload for d in listed]) == ["one", "two"]
    (letter,) = [d async for d in tenant.list_dead_letters(schedule_id=one.schedule_id)]
    assert (letter.fire_id, letter.last_error) == (one.fire_id, "HTTP 404")
    assert await tenant.get_dead_letter(letter.dead_letter_id) == dataclasses.replace(letter, payload="one")
    due = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    redriven = await tenant.redrive_dead_letter(letter.dead_letter_id, at=due)
    assert redriven.redriven_due_at == due and redriven.fire_id == one.fire_id
    assert await tenant.redrive_dead_letter(letter.dead_letter_id, at=due + timedelta(hours=1)) == redriven
    done = await tenant.redrive_dead_letters(at=due)  # the last 7 days: only two is left to redrive
    assert [d.fire_id for d in done.redriven] == [two.fire_id] and done.errors == []
    assert (await tenant.redrive_dead_letters(at=due)).redriven == []
    assert (await tenant.get_schedule(two.schedule_id)).due_at == due


async def test_cluster(dev: Dev) -> None:
    async with AsyncTickd(dev.url, admin_token=dev.admin_token) as admin:
        cluster = await admin.cluster()
    assert [n.node_id for n in cluster.nodes] == ["dev"]
    assert ("dev", 0) in {(i.client_id, i.poller_id) for i in cluster.nodes[0].instances}
    async with AsyncTickd(dev.url, admin_token=dev.api_key) as not_admin:
        with pytest.raises(Forbidden):
            await not_admin.cluster()


async def test_admin_stats(tenant: AsyncTickd, dev: Dev) -> None:
    client_id = (await tenant.stats()).client_id
    assert client_id is not None
    async with AsyncTickd(dev.url, admin_token=dev.admin_token) as admin:
        await tenant.create_schedule(delay_s=0, callback=dev.healthz())
        deadline = time.monotonic() + 30
        while (one := (await admin.admin_stats(client_id)).window(300)).delivered < 1:
            assert time.monotonic() < deadline, f"the fire is not in the client's stats after 30 s: {one}"
            await asyncio.sleep(0.2)
        assert (one.fired, one.delivered, one.failed) == (1, 1, 0)
        cluster = await admin.admin_stats()
    assert cluster.client_id is None and cluster.window(300).fired >= 1 and cluster.window(86400).delivered >= 1
    async with AsyncTickd(dev.url, admin_token=dev.api_key) as not_admin:
        with pytest.raises(Forbidden):
            await not_admin.admin_stats(client_id)


async def test_stats(tenant: AsyncTickd, dev: Dev) -> None:
    assert [(w.window_s, w.fired, w.lateness_max_s) for w in (await tenant.stats()).windows] == [
        (300, 0, None),
        (3600, 0, None),
        (86400, 0, None),
    ]
    await tenant.create_schedule(delay_s=0, callback=dev.refusing())
    deadline = time.monotonic() + 30
    while (counted := (await tenant.stats()).window(300)).failed < 1:
        assert time.monotonic() < deadline, f"the failed fire is not in the stats after 30 s: {counted}"
        await asyncio.sleep(0.2)
    assert (counted.fired, counted.delivered, counted.retried, counted.failed) == (1, 0, 0, 1)
    assert counted.lateness_max_s is not None and counted.lateness_max_s >= 0


async def test_bulk_jobs(tenant: AsyncTickd, dev: Dev) -> None:
    for i in range(3):
        await tenant.create_schedule(delay_s=3600 * (i + 1), callback=dev.healthz(), tags={"team": "async"})
    job = await tenant.create_bulk_job("cancel", tag="team=async")
    done = await tenant.wait_bulk_job(job.job_id, poll_s=0.1, timeout_s=60)
    assert (done.matched, done.changed) == (3, 3)
    statuses = {s.status async for s in tenant.list_schedules(tag="team=async")}
    assert statuses == {"cancelled"}
    assert [j.job_id async for j in tenant.list_bulk_jobs()] == [job.job_id]


async def test_calendars(tenant: AsyncTickd) -> None:
    created = await tenant.put_calendar("holidays", timezone="Europe/Berlin", dates=["2026-12-25"])
    assert (created.version, created.timezone, created.dates) == (1, "Europe/Berlin", ["2026-12-25"])
    replaced = await tenant.put_calendar("holidays", weekdays=["sun"], if_match=created.version)
    assert (replaced.version, replaced.timezone, replaced.dates, replaced.weekdays) == (2, "UTC", [], ["sun"])
    assert await tenant.get_calendar("holidays") == replaced
    with pytest.raises(PreconditionFailed) as stale:
        await tenant.put_calendar("holidays", if_match=created.version)
    assert (stale.value.status, stale.value.code, stale.value.field) == (412, "precondition_failed", "If-Match")
    with pytest.raises(PreconditionFailed):
        await tenant.delete_calendar("holidays", if_match=created.version)
    await tenant.put_calendar("blackout", ranges=[("2026-08-03T00:00", "2026-08-17T00:00")])
    assert [(c.name, c.version) for c in await tenant.list_calendars()] == [("blackout", 1), ("holidays", 2)]
    assert await tenant.delete_calendar("holidays", if_match=replaced.version) == replaced
    with pytest.raises(NotFound) as missing:
        await tenant.get_calendar("holidays")
    assert missing.value.field == "name"
    with pytest.raises(NotFound):
        await tenant.delete_calendar("holidays")


async def test_calendars_on_schedules_and_preview(tenant: AsyncTickd, dev: Dev) -> None:
    await tenant.put_calendar("weekends", business_days=True)
    found = await tenant.preview(cron="0 9 * * *", calendars=["weekends"], count=3, after="2026-12-25T12:00:00Z")
    assert [(o.utc.day, o.excluded_by) for o in found] == [(26, "weekends v1"), (27, "weekends v1"), (28, None)]
    assert [o.excluded_by for o in await tenant.preview(every="1h", count=2)] == [None, None]
    created = await tenant.create_schedule(cron="0 9 * * *", calendars=["weekends"], callback=dev.healthz())
    assert created.recurrence is not None and created.recurrence.calendars == ["weekends"]
    assert created.fire_at.weekday() < 5
    freed = await tenant.update_schedule(created.schedule_id, calendars=[])
    assert freed.recurrence is not None and freed.recurrence.calendars is None
    with pytest.raises(Invalid) as unknown:
        await tenant.update_schedule(created.schedule_id, calendars=["nope"])
    assert (unknown.value.code, unknown.value.field) == ("unknown_calendar", "calendars.0")


async def test_missed_fire_policy_on_schedules_and_in_settings(tenant: AsyncTickd, dev: Dev) -> None:
    missed: MissedFields = {"policy": "fire_once", "deadline": "2m"}
    created = await tenant.create_schedule(cron="0 9 * * *", missed=missed, callback=dev.healthz())
    assert created.recurrence is not None and created.recurrence.missed == MissedPolicy("fire_once", 120)
    assert (await tenant.get_schedule(created.schedule_id)).recurrence == created.recurrence
    changed = await tenant.update_schedule(created.schedule_id, missed={"policy": "skip", "deadline": "1h"})
    assert changed.recurrence is not None and changed.recurrence.missed == MissedPolicy("skip", 3600)
    cleared = await tenant.update_schedule(created.schedule_id, missed=None)
    assert cleared.recurrence is not None and cleared.recurrence.missed is None
    with pytest.raises(Invalid) as bad:
        await tenant.update_schedule(created.schedule_id, missed={"policy": "fire_all", "deadline": "60s"})
    assert (bad.value.status, bad.value.field) == (422, "missed.deadline")
    unchanged = (await tenant.get_schedule(created.schedule_id)).recurrence
    assert unchanged is not None and unchanged.missed is None
    assert (await tenant.get_settings()).missed == MissedPolicy("fire_all", None)
    assert (await tenant.patch_settings(missed={"policy": "skip"})).missed == MissedPolicy("skip", 60)
    assert (await tenant.patch_settings(retention_s=0)).missed == MissedPolicy("skip", 60)  # not given: kept
    assert (await tenant.patch_settings(missed=None)).missed == MissedPolicy("fire_all", None)
