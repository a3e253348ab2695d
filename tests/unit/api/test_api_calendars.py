"""Calendars through the API: a new version on each PUT (the ETag), If-Match on changes and deletes,
refusals naming the field before anything is written, one tenant's calendars invisible to another,
concurrent changes that never lose one silently, and an audit record for each change."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body

pytest_plugins = ["tests.integration.api_fixtures"]

HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-26", "2026-12-25"]}


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def refused(resp: Any, status: int) -> tuple[str, str | None]:
    assert resp.status == status, await resp.text()
    error = (await resp.json())["error"]
    return error["code"], error["field"]


async def test_each_put_is_a_new_version_read_back_as_stored(api: Api, register: Register) -> None:
    _, key = await register()
    made = await api.put("/v1/calendars/holidays", json=HOLIDAYS, headers=key)
    first = await ok(made, 201)
    assert made.headers["ETag"] == '"1"'
    assert (first["version"], first["timezone"], first["dates"]) == (1, "Europe/Berlin", ["2026-12-25", "2026-12-26"])
    body = {"business_days": True, "ranges": [{"from": "2026-08-03T00:00", "to": "2026-08-17T00:00"}]}
    second = await ok(await api.put("/v1/calendars/holidays", json=body, headers=key))
    assert (second["version"], second["timezone"], second["dates"], second["weekdays"]) == (
        2,
        "UTC",
        [],
        ["sat", "sun"],
    )
    assert second["ranges"] == [{"from": "2026-08-03T00:00:00", "to": "2026-08-17T00:00:00"}]
    assert second["created_at"] == first["created_at"] and second["updated_at"] >= first["updated_at"]
    got = await api.get("/v1/calendars/holidays", headers=key)
    assert await ok(got) == second and got.headers["ETag"] == '"2"'
    await ok(await api.put("/v1/calendars/blackout", json={}, headers=key), 201)
    listed = await ok(await api.get("/v1/calendars", headers=key))
    assert [(c["name"], c["version"]) for c in listed["calendars"]] == [("blackout", 1), ("holidays", 2)]


async def test_if_match_makes_a_change_or_a_delete_conditional(api: Api, register: Register) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/h", json=HOLIDAYS, headers=key), 201)
    stale = {**key, "If-Match": '"7"'}
    code, field = await refused(await api.put("/v1/calendars/h", json={}, headers=stale), 412)
    assert (code, field) == ("precondition_failed", "If-Match")
    assert (await refused(await api.delete("/v1/calendars/h", headers=stale), 412))[0] == "precondition_failed"
    assert (await refused(await api.put("/v1/calendars/new", json={}, headers=stale), 412))[0] == "precondition_failed"
    assert (await ok(await api.get("/v1/calendars/h", headers=key)))["version"] == 1  # nothing changed
    changed = await ok(await api.put("/v1/calendars/h", json={}, headers={**key, "If-Match": '"1"'}))
    assert changed["version"] == 2 and changed["dates"] == []
    deleted = await ok(await api.delete("/v1/calendars/h", headers={**key, "If-Match": "2"}))
    assert deleted["version"] == 2
    assert await refused(await api.get("/v1/calendars/h", headers=key), 404) == ("not_found", "name")
    assert await refused(await api.delete("/v1/calendars/h", headers=key), 404) == ("not_found", "name")


async def test_concurrent_puts_each_land_as_a_version_or_answer_409(api: Api, register: Register) -> None:
    _, key = await register()
    answers = await asyncio.gather(
        *(api.put("/v1/calendars/c", json={"dates": [f"2026-01-{d:02d}"]}, headers=key) for d in range(1, 11))
    )
    statuses = sorted(a.status for a in answers)
    assert set(statuses) <= {200, 201, 409} and statuses.count(201) == 1
    landed = [await a.json() for a in answers if a.status in (200, 201)]
    final = await ok(await api.get("/v1/calendars/c", headers=key))
    assert sorted(c["version"] for c in landed) == list(range(1, len(landed) + 1))  # none lost silently
    assert final["version"] == len(landed) and final in landed


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("Bad Name", {}, "name"),
        ("c", {"dates": ["2026-12-25", "2026-02-30"]}, "dates.1"),
        ("c", {"dates": ["25/12/2026"]}, "dates.0"),
        ("c", {"dates": ["2026-01-01"] * 1001}, "dates"),
        ("c", {"ranges": [{"from": "2026-01-02T00:00", "to": "2026-01-01T00:00"}]}, "ranges.0.to"),
        ("c", {"ranges": [{"from": "2026-01-01T00:00+01:00", "to": "2026-01-02T00:00"}]}, "ranges.0.from"),
        ("c", {"ranges": [{"from": "2026-01-01T00:00"}]}, "ranges.0.to"),
        ("c", {"weekdays": ["sat", "someday"]}, "weekdays.1"),
        ("c", {"weekdays": ["mon", "tue", "wed", "thu", "fri"], "business_days": True}, "weekdays"),
        ("c", {"timezone": "Mars/Olympus"}, "timezone"),
        ("c", {"timezone": "UTC", "holidays": []}, "holidays"),
        ("c", {"business_days": "yes"}, "business_days"),
    ],
)
async def test_bad_calendars_are_refused_naming_the_field(
    api: Api, register: Register, name: str, body: dict[str, Any], field: str
) -> None:
    _, key = await register()
    resp = await api.put(f"/v1/calendars/{name}", json=body, headers=key)
    assert resp.status in (400, 422), await resp.text()
    assert (await resp.json())["error"]["field"] == field
    assert (await ok(await api.get("/v1/calendars", headers=key)))["calendars"] == []  # nothing written


async def test_a_tenant_sees_only_its_own_calendars_and_each_change_is_audited(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    await ok(await api.put("/v1/calendars/h", json=HOLIDAYS, headers=key), 201)
    assert (await ok(await api.get("/v1/calendars", headers=other)))["calendars"] == []
    assert await refused(await api.get("/v1/calendars/h", headers=other), 404) == ("not_found", "name")
    assert await refused(await api.delete("/v1/calendars/h", headers=other), 404) == ("not_found", "name")
    await ok(await api.put("/v1/calendars/h", json=HOLIDAYS, headers=other), 201)  # its own, version 1
    await ok(await api.delete("/v1/calendars/h", headers=key))
    records = (await ok(await api.get("/v1/audit", headers=key)))["records"]
    assert [(r["action"], r["target"]) for r in records][:2] == [("calendar.delete", "h"), ("calendar.put", "h")]


async def test_a_preview_shows_what_named_calendars_exclude(api: Api, register: Register) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/holidays", json=HOLIDAYS, headers=key), 201)
    await ok(await api.put("/v1/calendars/holidays", json=HOLIDAYS, headers=key))  # version 2
    await ok(await api.put("/v1/calendars/weekends", json={"business_days": True}, headers=key), 201)
    body = {
        "cron": "0 9 * * *",
        "timezone": "Europe/Berlin",
        "after": "2026-12-24T12:00:00Z",
        "count": 4,
        "calendars": ["holidays", "weekends"],
    }
    shown = (await ok(await api.post("/v1/schedules/preview", json=body, headers=key)))["occurrences"]
    assert [(o["local"][:10], o.get("excluded_by")) for o in shown] == [
        ("2026-12-25", "holidays v2"),
        ("2026-12-26", "holidays v2"),  # a Saturday too: the first calendar named is the one shown
        ("2026-12-27", "weekends v1"),
        ("2026-12-28", None),
    ]
    plain = await ok(await api.post("/v1/schedules/preview", json={**body, "calendars": []}, headers=key))
    assert all("excluded_by" not in o for o in plain["occurrences"])
    code, field = await refused(
        await api.post("/v1/schedules/preview", json={**body, "calendars": ["holidays", "nope"]}, headers=key), 422
    )
    assert (code, field) == ("unknown_calendar", "calendars.1")
    _, other = await register()
    code, field = await refused(await api.post("/v1/schedules/preview", json=body, headers=other), 422)
    assert (code, field) == ("unknown_calendar", "calendars.0")  # another tenant's calendars are not its own


# -- schedules that name calendars ----------------------------------------------------------------------

# Every day but Sunday excluded: a daily rule's next fire is the next Sunday's.
SUNDAYS_ONLY = {"weekdays": ["mon", "tue", "wed", "thu", "fri", "sat"]}


def next_sunday_nine(after: datetime) -> datetime:
    """The first Sunday 09:00 UTC after ``after``."""
    moment = after.replace(hour=9, minute=0, second=0, microsecond=0)
    while moment <= after or moment.weekday() != 6:
        moment += timedelta(days=1)
    return moment


async def test_a_schedule_names_calendars_and_its_first_fire_is_the_first_they_leave(
    api: Api, register: Register
) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/sundays-only", json=SUNDAYS_ONLY, headers=key), 201)
    before = datetime.now(UTC)
    body = schedule_body(delay_s=None, cron="0 9 * * *", calendars=["sundays-only", "sundays-only"])
    created = await ok(await api.post("/v1/schedules", json=body, headers=key), 201)
    assert created["recurrence"]["calendars"] == ["sundays-only"]  # each named once
    assert datetime.fromisoformat(created["fire_at"]) in {next_sunday_nine(before), next_sunday_nine(datetime.now(UTC))}
    got = await ok(await api.get(f"/v1/schedules/{created['schedule_id']}", headers=key))
    assert got["recurrence"]["calendars"] == ["sundays-only"] and got["fire_at"] == created["fire_at"]
    keyed = await ok(await api.put("/v1/schedules/by-key/daily-close", json=body, headers=key), 201)
    assert keyed["recurrence"]["calendars"] == ["sundays-only"] and keyed["fire_at"] == created["fire_at"]
    plain = await ok(
        await api.post("/v1/schedules", json=schedule_body(delay_s=None, cron="0 9 * * *"), headers=key), 201
    )
    assert "calendars" not in plain["recurrence"]


@pytest.mark.parametrize(
    ("changes", "status", "code", "field"),
    [
        ({"calendars": ["nope"]}, 422, "unknown_calendar", "calendars.0"),
        ({"calendars": ["sundays-only", "Bad Name"]}, 422, "invalid", "calendars.1"),
        ({"calendars": ["c"] * 9}, 400, None, "calendars"),
        ({"calendars": "sundays-only"}, 400, "wrong_type", "calendars"),
        ({"cron": None, "delay_s": 60, "calendars": ["sundays-only"]}, 422, None, "calendars"),
        # Saturdays only, on a calendar that excludes them all: nothing left to fire.
        ({"cron": "0 9 * * 6"}, 422, "no_occurrence", "calendars"),
    ],
)
async def test_a_schedule_naming_calendars_badly_is_refused_naming_the_field(
    api: Api, register: Register, changes: dict[str, Any], status: int, code: str | None, field: str
) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/sundays-only", json=SUNDAYS_ONLY, headers=key), 201)
    body = {**schedule_body(delay_s=None, cron="0 9 * * *", calendars=["sundays-only"]), **changes}
    body = {k: v for k, v in body.items() if v is not None}
    resp = await api.post("/v1/schedules", json=body, headers=key)
    assert resp.status == status, await resp.text()
    error = (await resp.json())["error"]
    assert error["field"] == field and (code is None or error["code"] == code)


async def test_a_patch_changes_the_calendars_a_schedule_names_and_its_next_fire_follows(
    api: Api, register: Register
) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/sundays-only", json=SUNDAYS_ONLY, headers=key), 201)
    body = schedule_body(delay_s=None, cron="0 9 * * *", calendars=["sundays-only"])
    created = await ok(await api.post("/v1/schedules", json=body, headers=key), 201)
    path = f"/v1/schedules/{created['schedule_id']}"
    freed = await ok(await api.patch(path, json={"calendars": []}, headers=key))
    first = datetime.fromisoformat(freed["fire_at"])
    assert "calendars" not in freed["recurrence"] and first - datetime.now(UTC) <= timedelta(days=1)
    again = await ok(await api.patch(path, json={"calendars": ["sundays-only"]}, headers=key))
    assert again["recurrence"]["calendars"] == ["sundays-only"]
    assert datetime.fromisoformat(again["fire_at"]).weekday() == 6
    # A change of the rule alone keeps the calendars it names.
    hourly = await ok(await api.patch(path, json={"cron": "0 * * * *"}, headers=key))
    assert hourly["recurrence"]["calendars"] == ["sundays-only"]
    assert datetime.fromisoformat(hourly["fire_at"]).weekday() == 6
    code, field = await refused(await api.patch(path, json={"calendars": ["gone"]}, headers=key), 422)
    assert (code, field) == ("unknown_calendar", "calendars.0")
    assert (await ok(await api.get(path, headers=key)))["fire_at"] == hourly["fire_at"]  # nothing written
    cleared = await ok(await api.patch(path, json={"calendars": None}, headers=key))
    assert "calendars" not in cleared["recurrence"]


async def test_a_resume_goes_on_at_the_first_occurrence_the_calendars_leave(api: Api, register: Register) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/sundays-only", json=SUNDAYS_ONLY, headers=key), 201)
    body = schedule_body(delay_s=None, cron="0 * * * *", calendars=["sundays-only"])
    created = await ok(await api.post("/v1/schedules", json=body, headers=key), 201)
    path = f"/v1/schedules/{created['schedule_id']}"
    await ok(await api.post(path + "/pause", headers=key))
    # The calendar changes while the schedule is paused: now Sundays are excluded and Mondays not.
    monday_only = {"weekdays": ["tue", "wed", "thu", "fri", "sat", "sun"]}
    await ok(await api.put("/v1/calendars/sundays-only", json=monday_only, headers=key))
    resumed = await ok(await api.post(path + "/resume", headers=key))
    assert datetime.fromisoformat(resumed["fire_at"]).weekday() == 0
    assert resumed["status"] == "scheduled"
    # A calendar deleted since is no reason to refuse a resume: it excludes nothing (the paused fire,
    # not passed yet, keeps its time).
    await ok(await api.post(path + "/pause", headers=key))
    await ok(await api.delete("/v1/calendars/sundays-only", headers=key))
    alone = await ok(await api.post(path + "/resume", headers=key))
    assert (alone["status"], alone["fire_at"]) == ("scheduled", resumed["fire_at"])


async def test_a_batch_names_calendars_per_item_and_an_unknown_one_fails_only_its_item(
    api: Api, register: Register
) -> None:
    _, key = await register()
    await ok(await api.put("/v1/calendars/sundays-only", json=SUNDAYS_ONLY, headers=key), 201)
    item = schedule_body(delay_s=None, cron="0 9 * * *", calendars=["sundays-only"])
    bad = {**item, "calendars": ["nope"]}
    answer = await ok(await api.post("/v1/schedules/batch", json={"schedules": [item, bad, item]}, headers=key))
    results = answer["results"]
    assert [(r.get("status"), r.get("error", {}).get("field")) for r in results] == [
        ("scheduled", None),
        (None, "calendars.0"),
        ("scheduled", None),
    ]
    assert all(datetime.fromisoformat(r["fire_at"]).weekday() == 6 for r in (results[0], results[2]))
