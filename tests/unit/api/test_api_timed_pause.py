"""Issue 27, timed pause, over the API (in-memory store): ``POST .../pause {"until", "note"}`` parks the
schedule's row, paused, at ``until`` (where an instance takes it to resume it: ``poller.wakes``), shows
the pause in GET and the audit trail, is replaced by a later pause with a body, cleared by a resume; and
every bad input is a 4xx naming the field, with nothing written."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema.model import Status
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def refused(resp: Any, *statuses: int) -> dict[str, Any]:
    assert resp.status in (statuses or (400, 422)), await resp.text()
    error: dict[str, Any] = (await resp.json())["error"]
    return error


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def created(api: Api, key: dict[str, str], **changes: Any) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = await ok(await api.post("/v1/schedules", json=schedule_body(**changes), headers=key), 201)
    return f"/v1/schedules/{body['schedule_id']}", body


async def test_a_timed_pause_parks_the_row_where_it_ends_and_a_resume_clears_it(
    api: Api, store: Store, register: Register
) -> None:
    client_id, key = await register()
    path, made = await created(api, key, delay_s=None, cron="*/5 * * * *")
    sid = uuid.UUID(made["schedule_id"])
    until = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    paused = await ok(await api.post(path + "/pause", json={"until": iso(until), "note": "db upgrade"}, headers=key))
    assert paused["status"] == "paused" and paused["fire_at"] == made["fire_at"]
    assert paused["pause"]["note"] == "db upgrade"
    assert datetime.fromisoformat(paused["pause"]["until"]) == until == datetime.fromisoformat(paused["due_at"])
    assert (await ok(await api.get(path, headers=key)))["pause"] == paused["pause"]
    row = await store.get_schedule(client_id, sid)
    assert row is not None and row.status is Status.PAUSED and row.wakes and row.location.due_at == until
    trail = (await ok(await api.get(path + "/audit", headers=key)))["records"]
    assert trail[0]["action"] == "schedule.pause" and trail[0]["changes"]["note"] == "db upgrade", trail[0]

    resumed = await ok(await api.post(path + "/resume", headers=key))
    assert resumed["status"] == "scheduled" and "pause" not in resumed
    row = await store.get_schedule(client_id, sid)
    assert row is not None and row.pause is None and not row.wakes
    assert row.location.due_at < until  # back on its timeline, not at the pause's end


async def test_a_pause_with_a_body_replaces_the_pause_and_one_without_changes_nothing(
    api: Api, store: Store, register: Register
) -> None:
    client_id, key = await register()
    path, made = await created(api, key, delay_s=3600)
    soon = (datetime.now(UTC) + timedelta(minutes=30)).replace(microsecond=0)
    first = await ok(await api.post(path + "/pause", json={"until": iso(soon)}, headers=key))
    assert await ok(await api.post(path + "/pause", headers=key)) == first  # no body: as it is
    assert await ok(await api.post(path + "/pause", json={"until": iso(soon)}, headers=key)) == first  # the same
    later = soon + timedelta(minutes=30)
    moved = await ok(await api.post(path + "/pause", json={"until": iso(later), "note": "longer"}, headers=key))
    assert moved["version"] > first["version"] and datetime.fromisoformat(moved["due_at"]) == later
    forever = await ok(await api.post(path + "/pause", json={"note": "until further notice"}, headers=key))
    assert "until" not in forever["pause"] and forever["pause"]["note"] == "until further notice"
    assert forever["pause"]["paused_at"] == first["pause"]["paused_at"]  # paused since the first pause
    assert forever["due_at"] == made["due_at"]  # back where its fire is due, not at a pause end it lost
    row = await store.get_schedule(client_id, uuid.UUID(made["schedule_id"]))
    assert row is not None and row.status is Status.PAUSED and not row.wakes  # nothing resumes it by itself


async def test_the_same_timed_pause_again_changes_nothing_and_one_already_over_is_refused(
    api: Api, store: Store, register: Register
) -> None:
    client_id, key = await register()
    path, made = await created(api, key, delay_s=3600)
    soon = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
    first = await ok(await api.post(path + "/pause", json={"until": iso(soon), "note": "n"}, headers=key))
    row = await store.get_schedule(client_id, uuid.UUID(made["schedule_id"]))
    assert row is not None and row.pause is not None
    # The same pause is recognised before its until is checked (a retry arriving after until is no 422).
    past = {"until": iso(soon - timedelta(hours=1)), "note": "n"}
    assert (await refused(await api.post(path + "/pause", json=past, headers=key)))["field"] == "until"
    again = await ok(await api.post(path + "/pause", json={"until": iso(soon), "note": "n"}, headers=key))
    assert again == first


async def test_a_note_alone_pauses_the_schedule_where_it_is(api: Api, register: Register) -> None:
    _, key = await register()
    path, made = await created(api, key, delay_s=3600)
    paused = await ok(await api.post(path + "/pause", json={"note": "waiting on the vendor"}, headers=key))
    assert paused["due_at"] == made["due_at"] and paused["pause"]["note"] == "waiting on the vendor"
    assert "until" not in paused["pause"]
    due = datetime.fromisoformat(made["due_at"])
    window = {"from": iso(due), "to": iso(due + timedelta(minutes=1)), "status": "paused"}
    listed = (await ok(await api.get("/v1/schedules", params=window, headers=key)))["schedules"]
    assert [s["schedule_id"] for s in listed] == [made["schedule_id"]]


async def test_bad_pause_bodies_are_refused_naming_the_field(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    path, made = await created(api, key, delay_s=3600)
    now = datetime.now(UTC)
    cases: list[tuple[Any, str]] = [
        ({"until": iso(now - timedelta(minutes=1))}, "until"),  # in the past
        ({"until": iso(now + timedelta(days=365 * 20))}, "until"),  # beyond the horizon
        ({"until": "tomorrow"}, "until"),
        ({"until": "2030-01-01T00:00:00"}, "until"),  # no offset: ambiguous
        ({"until": -5}, "until"),
        ({"note": "x" * 501}, "note"),
        ({"note": "line\nbreak"}, "note"),
        ({"note": 7}, "note"),
        ({"untill": iso(now + timedelta(hours=1))}, "untill"),
    ]
    for body, field in cases:
        error = await refused(await api.post(path + "/pause", json=body, headers=key))
        assert error["field"] == field, (body, error)
    for raw in (b"[]", b"{", b'"until"'):
        error = await refused(
            await api.post(path + "/pause", data=raw, headers={**key, "Content-Type": "application/json"}), 400
        )
        assert error["code"] in ("malformed_json", "wrong_type"), (raw, error)
    assert (await refused(await api.post(path + "/pause", data=b"x", headers=key), 415))["code"]
    row = await store.get_schedule(client_id, uuid.UUID(made["schedule_id"]))
    assert row is not None and row.status is Status.SCHEDULED and row.version == made["version"]  # nothing written


async def test_another_tenant_cannot_pause_it(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    path, _ = await created(api, key, delay_s=3600)
    until = iso(datetime.now(UTC) + timedelta(hours=1))
    assert (await api.post(path + "/pause", json={"until": until}, headers=other)).status == 404
    assert (await ok(await api.get(path, headers=key)))["status"] == "scheduled"
