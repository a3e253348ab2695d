"""Pause and resume over the API (in-memory store): a paused schedule shows paused and is not a
scheduled row (pollers fire only those); resume goes on from now, with the missed occurrences in the
runs as skipped; the hostile cases (pause twice, resume not paused, foreign tenant, bad ids)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema import pauses
from tickd.schema.missed import Missed
from tickd.schema.model import Client, ClientSettings, HttpCallback, Location, Options, Repeat, Schedule, Status
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def create(api: Api, key: dict[str, str], **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = await ok(await api.post("/v1/schedules", json=schedule_body(**changes), headers=key), 201)
    return body


async def error_code(resp: Any, status: int) -> str:
    assert resp.status == status, await resp.text()
    code: str = (await resp.json())["error"]["code"]
    return code


async def test_pause_and_resume_one_time(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    created = await create(api, key, delay_s=600)
    path = f"/v1/schedules/{created['schedule_id']}"
    paused = await ok(await api.post(path + "/pause", headers=key))
    assert paused["status"] == "paused" and paused["fire_id"] == created["fire_id"]
    assert (await ok(await api.get(path, headers=key)))["status"] == "paused"
    stored = await store.get_schedule(client_id, uuid.UUID(created["schedule_id"]))
    assert stored is not None and stored.status is Status.PAUSED  # not a row a poller fires
    again = await ok(await api.post(path + "/pause", headers=key))
    assert again == paused  # pausing twice is not an error
    listed = await ok(
        await api.get(
            "/v1/schedules",
            params={"from": created["due_at"], "to": end_of(created["due_at"]), "status": "paused"},
            headers=key,
        )
    )
    assert [s["schedule_id"] for s in listed["schedules"]] == [created["schedule_id"]]
    assert await error_code(await api.patch(path, json={"delay_s": 900}, headers=key), 409) == "schedule_paused"
    resumed = await ok(await api.post(path + "/resume", headers=key))
    assert resumed["status"] == "scheduled" and resumed["fire_id"] == created["fire_id"]
    assert resumed["due_at"] == created["due_at"]  # its time is still ahead: due then
    assert await error_code(await api.post(path + "/resume", headers=key), 409) == "not_paused"


async def paused_since(store: Store, client_id: str, sid: uuid.UUID, minutes: int) -> datetime:
    """Make the paused schedule's pending fire ``minutes`` old, as if the pause had lasted that long."""
    paused = await store.get_schedule(client_id, sid)
    assert paused is not None and paused.status is Status.PAUSED
    past = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    moved = dataclasses.replace(paused, location=Location(paused.location.poller_id, past), fire_at=past)
    again = await store.resume_schedule(paused, moved, datetime.now(UTC))
    await store.pause_schedule(again, datetime.now(UTC))
    return past


async def test_a_one_time_schedule_past_its_time_fires_at_resume(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    created = await create(api, key, delay_s=600)
    sid = uuid.UUID(created["schedule_id"])
    await ok(await api.post(f"/v1/schedules/{sid}/pause", headers=key))
    past = await paused_since(store, client_id, sid, 5)
    resumed = await ok(await api.post(f"/v1/schedules/{sid}/resume", headers=key))
    assert datetime.fromisoformat(resumed["fire_at"]) == past  # the same fire (id), due now
    assert datetime.fromisoformat(resumed["due_at"]) > datetime.now(UTC) - timedelta(seconds=5)


async def test_cancel_a_paused_schedule(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key, delay_s=600)
    path = f"/v1/schedules/{created['schedule_id']}"
    await ok(await api.post(path + "/pause", headers=key))
    assert (await ok(await api.delete(path, headers=key)))["status"] == "cancelled"
    assert await error_code(await api.post(path + "/pause", headers=key), 409) == "already_cancelled"
    assert await error_code(await api.post(path + "/resume", headers=key), 409) == "not_paused"


async def test_recurring_resume_skips_what_was_missed(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    created = await create(api, key, delay_s=None, cron="* * * * *")
    sid = uuid.UUID(created["schedule_id"])
    await ok(await api.post(f"/v1/schedules/{sid}/pause", headers=key))
    past = await paused_since(store, client_id, sid, 3)
    resumed = await ok(await api.post(f"/v1/schedules/{sid}/resume", headers=key))
    nominal = datetime.fromisoformat(resumed["fire_at"])
    assert resumed["status"] == "scheduled" and datetime.now(UTC) - timedelta(seconds=1) <= nominal
    runs = (await ok(await api.get(f"/v1/schedules/{sid}/runs", headers=key)))["runs"]
    skipped = [datetime.fromisoformat(r["nominal_at"]) for r in runs]
    assert {r["status"] for r in runs} == {"skipped"} and skipped[-1] == past and len(skipped) >= 3
    assert max(skipped) < nominal and all(r["fired_at"] is None for r in runs)


def test_resume_plan_records_the_skipped_occurrences() -> None:
    start = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    options = Options(repeat=Repeat(every_s=60, start_at=start, max_fires=500))
    client = Client("c", 4, True, "h", start, start)
    current = Schedule(
        "c",
        uuid.uuid4(),
        Location(1, start),
        start,
        b"{}",
        HttpCallback(url="http://x/"),
        start,
        Status.PAUSED,
        options=options,
        seq=1,
    )
    plan = pauses.resume(current, client, start + timedelta(minutes=150, seconds=30))
    assert len(plan.skipped) == pauses.MAX_SKIPPED_RUNS  # 151 missed, the last 100 kept
    assert plan.skipped[-1].nominal_at == start + timedelta(minutes=150) and plan.skipped[-1].seq == 151
    assert all(r.status is Status.SKIPPED for r in plan.skipped)
    assert plan.resumed is not None and plan.resumed.fire_at == start + timedelta(minutes=151)
    assert plan.resumed.seq == 152 and plan.resumed.status is Status.SCHEDULED
    ended = pauses.resume(current, client, start + timedelta(days=1))
    assert ended.resumed is None and len(ended.skipped) == pauses.MAX_SKIPPED_RUNS  # max_fires spent
    drained = pauses.resume(current, dataclasses.replace(client, poller_count=1), start)
    assert drained.resumed is not None and drained.resumed.location.poller_id == 0


async def test_hostile_inputs(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    created = await create(api, key, delay_s=600)
    path = f"/v1/schedules/{created['schedule_id']}"
    assert (await api.post(path + "/pause", headers=other)).status == 404
    assert (await api.post(path + "/resume", headers=other)).status == 404
    assert (await api.post(f"/v1/schedules/{uuid.uuid4()}/pause", headers=key)).status == 404
    for bad in ("nope", "1234", "%F0%9F%92%A9"):
        assert (await api.post(f"/v1/schedules/{bad}/pause", headers=key)).status == 400
        assert (await api.post(f"/v1/schedules/{bad}/resume", headers=key)).status == 400
    assert (await api.post(path + "/pause")).status == 401
    soon = await create(api, key, delay_s=1)
    assert await error_code(await api.post(f"/v1/schedules/{soon['schedule_id']}/pause", headers=key), 409) == (
        "fire_imminent"
    )


def end_of(due_at: str) -> str:
    return (datetime.fromisoformat(due_at) + timedelta(minutes=1)).isoformat()


def _paused_every_minute(missed: Missed | None) -> tuple[Schedule, Client, datetime]:
    start = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    options = Options(repeat=Repeat(every_s=60, start_at=start, missed=missed))
    client = Client("c", 4, True, "h", start, start)
    current = Schedule(
        "c",
        uuid.uuid4(),
        Location(1, start),
        start,
        b"{}",
        HttpCallback(url="http://x/"),
        start,
        Status.PAUSED,
        options=options,
        seq=1,
    )
    return current, client, start


def test_a_resume_follows_the_missed_fire_policy() -> None:
    """Resumed at 12:10:30 after a pause from 12:00: by default the occurrences that fell meanwhile are
    skipped; skip with a 3-minute deadline fires the ones still within it; fire_once the latest, once;
    fire_all every one of them, from the first."""
    at = datetime(2026, 11, 23, 12, 10, 30, tzinfo=UTC)
    minute = timedelta(minutes=1)
    cases: list[tuple[Missed | None, int, int]] = [  # policy: the minute it goes on at, how many skipped
        (None, 11, 11),
        (Missed("skip", 180), 8, 8),
        (Missed("fire_once", 60), 10, 10),
        (Missed("fire_all"), 0, 0),
    ]
    for missed, goes_on_at, skipped in cases:
        current, client, start = _paused_every_minute(missed)
        plan = pauses.resume(current, client, at)
        assert plan.resumed is not None
        assert (plan.resumed.fire_at, len(plan.skipped)) == (start + goes_on_at * minute, skipped), missed
        assert plan.resumed.seq == goes_on_at + 1 and plan.resumed.status is Status.SCHEDULED
    # The client's default applies to a schedule that names none.
    current, client, start = _paused_every_minute(None)
    client = dataclasses.replace(client, settings=ClientSettings(missed=Missed("fire_once", 60)))
    assert pauses.resume(current, client, at).resumed.fire_at == start + 10 * minute  # type: ignore[union-attr]
