"""Recurring schedules at the API, over the real store: create (cron or every, jitter), preview, the
rule's re-specification by PATCH, cancel without the one-time guard, and the run history."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.integration.api_helpers import Api, Register, Rows, http_callback, schedule_body
from tickd.schema.model import FireOutcome, Location, Schedule, Status, Try
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
NEW_YORK = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def fire_id(schedule_id: str, nominal: datetime) -> str:
    return f"{schedule_id}:{(nominal - EPOCH) // MS}"


def recurring_body(**changes: Any) -> dict[str, Any]:
    """A valid recurring create body (hourly in UTC); a change to None drops that field."""
    return schedule_body(**{"delay_s": None, "cron": "@hourly", **changes})


def next_daily(moment: datetime, hour: int, zone: ZoneInfo) -> datetime:
    """The first ``hour``:00 on the wall clock of ``zone`` strictly after ``moment`` (zones without DST)."""
    day = moment.astimezone(zone).date()
    candidate = datetime.combine(day, time(hour), tzinfo=zone)
    if candidate <= moment:
        candidate = datetime.combine(day + timedelta(days=1), time(hour), tzinfo=zone)
    return candidate.astimezone(UTC)


def soon(seconds: float) -> datetime:
    """A time ``seconds`` from now at millisecond precision (what the store keeps)."""
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def next_hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def without_anchor(recurrence: dict[str, Any]) -> dict[str, Any]:
    """The rule as shown, less ``start_at``: the view also shows the anchor an ``every`` got implicitly."""
    return {k: v for k, v in recurrence.items() if k != "start_at"}


def next_five_minutes(moment: datetime) -> datetime:
    floor = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return floor.replace(minute=floor.minute // 5 * 5) + timedelta(minutes=5)


async def create(api: Api, key: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    resp = await api.post("/v1/schedules", json=body, headers=key)
    assert resp.status == 201, await resp.text()
    created: dict[str, Any] = await resp.json()
    return created


async def get(api: Api, key: dict[str, str], schedule_id: str) -> dict[str, Any]:
    resp = await api.get(f"/v1/schedules/{schedule_id}", headers=key)
    assert resp.status == 200, await resp.text()
    got: dict[str, Any] = await resp.json()
    return got


async def patch(api: Api, key: dict[str, str], schedule_id: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await api.patch(f"/v1/schedules/{schedule_id}", json=body, headers=key)
    assert resp.status == 200, await resp.text()
    patched: dict[str, Any] = await resp.json()
    return patched


async def refused(resp: Any, status: int = 400) -> tuple[str, str | None]:
    assert resp.status == status, await resp.text()
    error = (await resp.json())["error"]
    assert error["message"]
    return error["code"], error["field"]


async def stored(store: Store, client_id: str, schedule_id: str) -> Schedule:
    schedule = await store.get_schedule(client_id, uuid.UUID(schedule_id))
    assert schedule is not None
    return schedule


async def advance(store: Store, current: Schedule, nominal: datetime) -> Schedule:
    """What a poller does before an occurrence fires: chain the schedule on to its next occurrence."""
    following = dataclasses.replace(
        current, location=Location(current.location.poller_id, nominal), fire_at=nominal, seq=current.seq + 1
    )
    await store.chain_schedule(current, following, datetime.now(UTC))
    return dataclasses.replace(following, version=current.version + 1)


# -- create -------------------------------------------------------------------------------------------


async def test_create_cron_in_a_zone(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    before = datetime.now(UTC)
    created = await create(api, key, recurring_body(cron="0 9 * * *", timezone="Asia/Tokyo", payload={"n": 1}))
    after = datetime.now(UTC)
    fire_at = at(created["fire_at"])
    assert fire_at in {next_daily(before, 9, TOKYO), next_daily(after, 9, TOKYO)}
    assert created["status"] == "scheduled" and created["occurrence"] == 1
    assert created["recurrence"] == {
        "cron": "0 9 * * *",
        "timezone": "Asia/Tokyo",
        "on_gap": "shift",
        "on_overlap": "first",
    }
    assert created["fire_id"] == fire_id(created["schedule_id"], fire_at)
    assert at(created["due_at"]) == fire_at and "jitter_s" not in created
    assert await get(api, key, created["schedule_id"]) == created
    schedule = await stored(store, client_id, created["schedule_id"])
    assert schedule.seq == 1 and schedule.repeat is not None and schedule.repeat.timezone == "Asia/Tokyo"


async def test_create_cron_alias_and_explicit_policies(api: Api, register: Register) -> None:
    _, key = await register()
    before = datetime.now(UTC)
    hourly = await create(api, key, recurring_body(cron="@hourly"))
    after = datetime.now(UTC)
    assert at(hourly["fire_at"]) in {next_hour(before), next_hour(after)}
    assert hourly["recurrence"] == {"cron": "@hourly", "timezone": "UTC", "on_gap": "shift", "on_overlap": "first"}

    policies = await create(
        api, key, recurring_body(cron="30 1 * * *", timezone="America/New_York", on_gap="skip", on_overlap="both")
    )
    assert (policies["recurrence"]["on_gap"], policies["recurrence"]["on_overlap"]) == ("skip", "both")
    local = at(policies["fire_at"]).astimezone(NEW_YORK)
    assert (local.hour, local.minute, local.second) == (1, 30, 0)


async def test_create_every_without_start(api: Api, register: Register) -> None:
    _, key = await register()
    before = datetime.now(UTC)
    created = await create(api, key, recurring_body(cron=None, every="20s"))
    after = datetime.now(UTC)
    fire_at = at(created["fire_at"])
    assert before + timedelta(seconds=20) - MS <= fire_at <= after + timedelta(seconds=20)
    assert created["occurrence"] == 1 and created["fire_id"] == fire_id(created["schedule_id"], fire_at)
    assert without_anchor(created["recurrence"]) == {"every": "20s"}
    assert created["recurrence"].get("start_at", created["fire_at"]) == created["fire_at"]


async def test_create_every_with_bounds(api: Api, register: Register) -> None:
    _, key = await register()
    body = recurring_body(
        cron=None, every="120m", start_at="2030-01-01T02:00:00+02:00", end_at="2030-01-03T00:00:00Z", max_fires=5
    )
    created = await create(api, key, body)
    assert created["fire_at"] == "2030-01-01T00:00:00Z"
    assert created["recurrence"] == {
        "every": "2h",
        "start_at": "2030-01-01T00:00:00Z",
        "end_at": "2030-01-03T00:00:00Z",
        "max_fires": 5,
    }
    assert created["fire_id"] == fire_id(created["schedule_id"], at("2030-01-01T00:00:00Z"))
    assert await get(api, key, created["schedule_id"]) == created

    cron_from = await create(api, key, recurring_body(cron="@daily", start_at="2030-01-01T00:00:00Z"))
    assert cron_from["fire_at"] == "2030-01-01T00:00:00Z"  # start_at is inclusive
    assert cron_from["recurrence"]["start_at"] == "2030-01-01T00:00:00Z"

    before = datetime.now(UTC)
    past_anchor = await create(api, key, recurring_body(cron=None, every="1h", start_at="2020-01-01T00:15:00Z"))
    after = datetime.now(UTC)
    fire_at = at(past_anchor["fire_at"])  # the anchor's timeline, first step after now
    assert (fire_at.minute, fire_at.second, fire_at.microsecond) == (15, 0, 0)
    assert before < fire_at <= after + timedelta(hours=1)


async def test_jitter_on_recurring_and_one_time(api: Api, register: Register) -> None:
    _, key = await register()
    recurring = await create(
        api, key, recurring_body(cron=None, every="1h", start_at="2030-06-01T00:00:00Z", jitter="10m")
    )
    one_time = await create(api, key, schedule_body(jitter="30s"))
    for created, spread in ((recurring, 600), (one_time, 30)):
        assert created["jitter_s"] == spread
        fire_at, due_at = at(created["fire_at"]), at(created["due_at"])
        assert fire_at <= due_at < fire_at + timedelta(seconds=spread)
        assert created["fire_id"] == fire_id(created["schedule_id"], fire_at)  # jitter moves due_at only
        assert await get(api, key, created["schedule_id"]) == created
    assert "recurrence" not in one_time and "occurrence" not in one_time


async def test_recurring_items_in_a_batch(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    items = [
        recurring_body(cron=None, every="15m", start_at="2030-01-01T00:00:00Z"),
        recurring_body(cron=None, every="0s"),
        recurring_body(timezone="Nowhere/City"),
    ]
    resp = await api.post("/v1/schedules/batch", json={"schedules": items}, headers=key)
    assert resp.status == 200
    results = (await resp.json())["results"]
    assert results[0]["fire_at"] == "2030-01-01T00:00:00Z"
    assert [(r["error"]["field"], r["error"]["status"]) for r in results[1:]] == [("every", 400), ("timezone", 422)]
    got = await get(api, key, results[0]["schedule_id"])
    assert got["recurrence"] == {"every": "15m", "start_at": "2030-01-01T00:00:00Z"} and got["occurrence"] == 1
    assert (await rows(client_id))["schedules"] == 1


# (id, body, status, code, field) for POST /v1/schedules
BAD_CREATES: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("timezone-on-one-time", schedule_body(timezone="UTC"), 422, "invalid", "timezone"),
    ("start-on-one-time", schedule_body(start_at="2030-01-01T00:00:00Z"), 422, "invalid", "start_at"),
    ("max-fires-on-one-time", schedule_body(max_fires=3), 422, "invalid", "max_fires"),
    ("on-gap-on-one-time", schedule_body(on_gap="skip"), 422, "invalid", "on_gap"),
    ("cron-and-every", recurring_body(every="1h"), 422, "invalid", "every"),
    ("cron-and-fire-at", recurring_body(fire_at="2030-01-01T00:00:00Z"), 422, "invalid", "fire_at"),
    ("every-and-delay", recurring_body(cron=None, every="1h", delay_s=60), 422, "invalid", "delay_s"),
    ("unknown-zone", recurring_body(timezone="Mars/Olympus_Mons"), 422, "invalid", "timezone"),
    ("localtime-zone", recurring_body(timezone="localtime"), 422, "invalid", "timezone"),
    ("zone-with-every", recurring_body(cron=None, every="1h", timezone="UTC"), 422, "invalid", "timezone"),
    ("bad-cron-minute", recurring_body(cron="61 * * * *"), 422, "invalid", "cron"),
    ("cron-six-fields", recurring_body(cron="0 0 * * * *"), 422, "invalid", "cron"),
    ("cron-unknown-alias", recurring_body(cron="@yearly"), 422, "invalid", "cron"),
    ("cron-hashed", recurring_body(cron="H * * * *"), 422, "invalid", "cron"),
    ("cron-never-matches", recurring_body(cron="0 0 30 2 *"), 422, "invalid", "cron"),
    ("cron-not-string", recurring_body(cron=5), 400, "wrong_type", "cron"),
    ("every-zero", recurring_body(cron=None, every="0s"), 400, "invalid_value", "every"),
    ("every-bad-unit", recurring_body(cron=None, every="20x"), 400, "invalid_value", "every"),
    ("every-too-long", recurring_body(cron=None, every="367d"), 422, "invalid", "every"),
    ("bad-gap-policy", recurring_body(on_gap="later"), 400, "invalid_value", "on_gap"),
    ("bad-overlap-policy", recurring_body(on_overlap="second"), 400, "invalid_value", "on_overlap"),
    ("end-in-the-past", recurring_body(end_at="2020-01-01T00:00:00Z"), 422, "invalid", "end_at"),
    (
        "end-before-first-occurrence",
        recurring_body(end_at=rfc3339(next_hour(datetime.now(UTC)) - timedelta(seconds=1))),
        422,
        "invalid",
        "end_at",
    ),
    (
        "end-before-first-interval",
        recurring_body(cron=None, every="1h", end_at=rfc3339(datetime.now(UTC) + timedelta(minutes=30))),
        422,
        "invalid",
        "end_at",
    ),
    (
        "end-before-start",
        recurring_body(cron=None, every="1h", start_at="2030-01-02T00:00:00Z", end_at="2030-01-01T00:00:00Z"),
        422,
        "invalid",
        "end_at",
    ),
    ("naive-start", recurring_body(start_at="2030-01-01T00:00:00"), 400, "invalid_value", "start_at"),
    (
        "start-beyond-horizon",
        recurring_body(cron=None, every="1h", start_at="2099-01-01T00:00:00Z"),
        422,
        "out_of_range",
        "start_at",
    ),
    ("max-fires-zero", recurring_body(max_fires=0), 400, "out_of_range", "max_fires"),
    ("max-fires-negative", recurring_body(max_fires=-2), 400, "out_of_range", "max_fires"),
    ("max-fires-bool", recurring_body(max_fires=True), 400, "wrong_type", "max_fires"),
    ("jitter-week", schedule_body(jitter="1w"), 400, "invalid_value", "jitter"),
    ("jitter-beyond-max", recurring_body(jitter="2h"), 422, "invalid", "jitter"),
    ("jitter-just-beyond-max", schedule_body(jitter="3601s"), 422, "invalid", "jitter"),
    ("jitter-zero", schedule_body(jitter="0s"), 400, "invalid_value", "jitter"),
    ("jitter-number", schedule_body(jitter=30), 400, "wrong_type", "jitter"),
]


@pytest.mark.parametrize(
    ("body", "status", "code", "field"), [c[1:] for c in BAD_CREATES], ids=[c[0] for c in BAD_CREATES]
)
async def test_bad_recurring_create_is_refused_and_writes_nothing(
    api: Api, register: Register, rows: Rows, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    client_id, key = await register()
    before = await rows(client_id)
    resp = await api.post("/v1/schedules", json=body, headers={**key, "Idempotency-Key": "k1"})
    assert await refused(resp, status) == (code, field)
    assert await rows(client_id) == before == {"schedules": 0, "refs": 0, "idempotency": 0}


# -- preview ------------------------------------------------------------------------------------------


async def preview(api: Api, key: dict[str, str], body: dict[str, Any]) -> list[dict[str, str]]:
    resp = await api.post("/v1/schedules/preview", json=body, headers=key)
    assert resp.status == 200, await resp.text()
    occurrences: list[dict[str, str]] = (await resp.json())["occurrences"]
    return occurrences


async def test_preview_spring_forward_gap(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    rule = {"cron": "30 2 * * *", "timezone": "America/New_York", "after": "2026-03-07T12:00:00Z", "count": 3}
    # 02:30 does not exist on 2026-03-08: "shift" fires when the clocks jump, 03:00 EDT.
    jump = datetime(2026, 3, 8, 3, 0, tzinfo=NEW_YORK)
    later = [datetime(2026, 3, day, 2, 30, tzinfo=NEW_YORK) for day in (9, 10, 11)]
    assert jump.utcoffset() == later[0].utcoffset() == timedelta(hours=-4)
    shifted = await preview(api, key, rule)
    assert shifted == [
        {"utc": "2026-03-08T07:00:00Z", "local": "2026-03-08T03:00:00-04:00", "timezone": "America/New_York"},
        {"utc": "2026-03-09T06:30:00Z", "local": "2026-03-09T02:30:00-04:00", "timezone": "America/New_York"},
        {"utc": "2026-03-10T06:30:00Z", "local": "2026-03-10T02:30:00-04:00", "timezone": "America/New_York"},
    ]
    assert [at(o["utc"]) for o in shifted] == [jump, *later[:2]]

    skipped = await preview(api, key, {**rule, "on_gap": "skip"})
    assert [at(o["utc"]) for o in skipped] == later
    assert [o["local"] for o in skipped] == [f"2026-03-{day}T02:30:00-04:00" for day in ("09", "10", "11")]
    assert await rows(client_id) == {"schedules": 0, "refs": 0, "idempotency": 0}


async def test_preview_fall_back_overlap(api: Api, register: Register) -> None:
    _, key = await register()
    rule = {"cron": "30 1 * * *", "timezone": "America/New_York", "after": "2026-10-31T12:00:00Z", "count": 2}
    edt = datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK)  # the first pass of 01:30
    est = datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK, fold=1)  # the second, an hour later
    next_day = datetime(2026, 11, 2, 1, 30, tzinfo=NEW_YORK)
    assert est - edt == timedelta(0) and est.astimezone(UTC) - edt.astimezone(UTC) == timedelta(hours=1)
    expected = {"first": [edt, next_day], "last": [est, next_day], "both": [edt, est]}
    for policy, moments in expected.items():
        found = await preview(api, key, {**rule, "on_overlap": policy})
        assert [at(o["utc"]) for o in found] == [m.astimezone(UTC) for m in moments], policy
        assert [o["local"] for o in found] == [m.isoformat() for m in moments], policy


async def test_preview_every(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    found = await preview(api, key, {"every": "15m", "start_at": "2030-01-01T00:00:00Z", "count": 2})
    assert found == [
        {"utc": "2030-01-01T00:00:00Z", "local": "2030-01-01T00:00:00Z", "timezone": "UTC"},
        {"utc": "2030-01-01T00:15:00Z", "local": "2030-01-01T00:15:00Z", "timezone": "UTC"},
    ]
    after = int(datetime(2030, 1, 1, 0, 20, tzinfo=UTC).timestamp())
    resumed = await preview(api, key, {"every": "15m", "start_at": "2030-01-01T00:00:00Z", "after": after})
    assert len(resumed) == 10  # the default count
    assert resumed[0]["utc"] == "2030-01-01T00:30:00Z" and resumed[-1]["utc"] == "2030-01-01T02:45:00Z"
    bounded = {"every": "1h", "start_at": "2030-01-01T00:00:00Z", "max_fires": 2, "count": 5}
    assert [o["utc"] for o in await preview(api, key, bounded)] == ["2030-01-01T00:00:00Z", "2030-01-01T01:00:00Z"]
    ended = {"every": "1h", "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-01T02:00:00Z", "count": 5}
    assert len(await preview(api, key, ended)) == 3  # end_at is inclusive
    assert await rows(client_id) == {"schedules": 0, "refs": 0, "idempotency": 0}


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"cron": "@daily", "count": 0}, 400, "out_of_range", "count"),
        ({"cron": "@daily", "count": 101}, 400, "out_of_range", "count"),
        ({"cron": "@daily", "count": "3"}, 400, "wrong_type", "count"),
        ({"count": 3}, 422, "missing_field", "cron"),
        ({"cron": "@daily", "bogus": 1}, 400, "unknown_field", "bogus"),
        ({"cron": "@daily", "jitter": "10s"}, 400, "unknown_field", "jitter"),
        ({"cron": "@daily", "timezone": "Nowhere/City"}, 422, "invalid", "timezone"),
        ({"cron": "not a cron"}, 422, "invalid", "cron"),
        ({"every": "20x"}, 400, "invalid_value", "every"),
        ({"cron": "@daily", "after": "2030-01-01T00:00:00"}, 400, "invalid_value", "after"),
        ({"cron": "@daily", "after": "tomorrow"}, 400, "invalid_value", "after"),
    ],
)
async def test_bad_preview(
    api: Api, register: Register, rows: Rows, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    client_id, key = await register()
    resp = await api.post("/v1/schedules/preview", json=body, headers=key)
    assert await refused(resp, status) == (code, field)
    assert await rows(client_id) == {"schedules": 0, "refs": 0, "idempotency": 0}


async def test_preview_needs_a_client_key(api: Api) -> None:
    resp = await api.post("/v1/schedules/preview", json={"cron": "@daily"})
    assert resp.status == 401


# -- patch --------------------------------------------------------------------------------------------


async def test_patch_replaces_the_rule(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(
        api, key, recurring_body(cron=None, every="20s", start_at="2020-01-01T00:00:00Z", max_fires=9)
    )
    sid = created["schedule_id"]

    before = datetime.now(UTC)
    to_cron = await patch(api, key, sid, {"cron": "0 9 * * *", "timezone": "Asia/Tokyo"})
    after = datetime.now(UTC)
    assert at(to_cron["fire_at"]) in {next_daily(before, 9, TOKYO), next_daily(after, 9, TOKYO)}
    assert to_cron["recurrence"] == {
        "cron": "0 9 * * *",
        "timezone": "Asia/Tokyo",
        "on_gap": "shift",
        "on_overlap": "first",
        "start_at": "2020-01-01T00:00:00Z",  # merged over the stored rule: only every gave way to cron
        "max_fires": 9,
    }
    assert to_cron["occurrence"] == 1 and to_cron["fire_id"] == fire_id(sid, at(to_cron["fire_at"]))
    assert await get(api, key, sid) == to_cron
    assert (await stored(store, client_id, sid)).version == 2

    hour = await patch(api, key, sid, {"cron": "0 10 * * *"})
    assert hour["recurrence"]["timezone"] == "Asia/Tokyo"  # kept from the stored rule
    assert at(hour["fire_at"]).astimezone(TOKYO).hour == 10

    before = datetime.now(UTC)
    to_every = await patch(api, key, sid, {"every": "15m"})
    after = datetime.now(UTC)
    fire_at = at(to_every["fire_at"])
    assert before + timedelta(minutes=15) - MS <= fire_at <= after + timedelta(minutes=15)
    # A new interval starts a new timeline (one interval from now): the old start_at goes with cron.
    assert without_anchor(to_every["recurrence"]) == {"every": "15m", "max_fires": 9}
    assert to_every["recurrence"].get("start_at", to_every["fire_at"]) == to_every["fire_at"]
    assert await get(api, key, sid) == to_every
    assert (await stored(store, client_id, sid)).version == 4


async def test_every_to_cron_fires_at_the_first_cron_time_after_now(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key, recurring_body(cron=None, every="1d"))  # no start_at given
    before = datetime.now(UTC)
    patched = await patch(api, key, created["schedule_id"], {"cron": "*/5 * * * *"})
    after = datetime.now(UTC)
    assert at(patched["fire_at"]) in {next_five_minutes(before), next_five_minutes(after)}
    assert "start_at" not in patched["recurrence"]


async def test_rule_patch_restarts_the_occurrence_count(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(api, key, recurring_body(cron=None, every="1h", start_at="2030-01-01T00:00:00Z"))
    sid = created["schedule_id"]
    current = await stored(store, client_id, sid)
    for hours in (1, 2):  # a poller moves it on twice
        current = await advance(store, current, at("2030-01-01T00:00:00Z") + timedelta(hours=hours))
    third = await get(api, key, sid)
    assert third["occurrence"] == 3 and third["fire_at"] == "2030-01-01T02:00:00Z"

    payload_only = await patch(api, key, sid, {"payload": {"v": 2}})
    assert payload_only["payload"] == {"v": 2}
    for name in ("fire_at", "due_at", "fire_id", "occurrence", "recurrence"):
        assert payload_only[name] == third[name], name

    jittered = await patch(api, key, sid, {"jitter": "5m"})
    assert jittered["jitter_s"] == 300 and jittered["occurrence"] == 3 and jittered["fire_at"] == third["fire_at"]
    assert at(third["fire_at"]) <= at(jittered["due_at"]) < at(third["fire_at"]) + timedelta(minutes=5)

    moved = await patch(api, key, sid, {"start_at": "2031-01-01T00:00:00Z"})
    assert moved["occurrence"] == 1 and moved["fire_at"] == "2031-01-01T00:00:00Z"
    assert moved["recurrence"] == {"every": "1h", "start_at": "2031-01-01T00:00:00Z"}
    assert moved["payload"] == {"v": 2}
    assert await get(api, key, sid) == moved


async def test_payload_patch_keeps_the_timeline(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key, recurring_body(cron="*/5 * * * *", jitter="1m"))
    patched = await patch(
        api, key, created["schedule_id"], {"payload": [1, 2], "callback": http_callback(method="put")}
    )
    assert patched["payload"] == [1, 2] and patched["callback"]["method"] == "PUT"
    assert patched["version"] > created["version"]  # a change, but not of the timeline:
    assert {k: v for k, v in patched.items() if k not in ("payload", "callback", "version")} == {
        k: v for k, v in created.items() if k not in ("payload", "callback", "version")
    }


async def test_bad_patches_of_a_recurring_schedule(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(api, key, recurring_body(cron="0 9 * * *", timezone="Asia/Tokyo"))
    url = f"/v1/schedules/{created['schedule_id']}"
    before = await get(api, key, created["schedule_id"])
    cases: list[tuple[dict[str, Any], int, str, str | None]] = [
        ({}, 422, "missing_field", None),
        ({"fire_at": "2030-01-01T00:00:00Z"}, 422, "invalid", "fire_at"),
        ({"delay_s": 60}, 422, "invalid", "delay_s"),
        ({"cron": "@daily", "delay_s": 60}, 422, "invalid", "delay_s"),
        ({"cron": "@daily", "every": "1h"}, 422, "invalid", "every"),
        ({"timezone": "Mars/Olympus_Mons"}, 422, "invalid", "timezone"),
        ({"cron": "99 * * * *"}, 422, "invalid", "cron"),
        ({"every": "0s"}, 400, "invalid_value", "every"),
        ({"every": "1h", "timezone": "UTC"}, 422, "invalid", "timezone"),
        ({"end_at": "2020-01-01T00:00:00Z"}, 422, "invalid", "end_at"),
        ({"max_fires": 0}, 400, "out_of_range", "max_fires"),
        ({"jitter": "2h"}, 422, "invalid", "jitter"),
        ({"count": 3}, 400, "unknown_field", "count"),
    ]
    for body, status, code, field in cases:
        assert await refused(await api.patch(url, json=body, headers=key), status) == (code, field), body
    assert await get(api, key, created["schedule_id"]) == before
    assert (await stored(store, client_id, created["schedule_id"])).version == 1


async def test_rule_fields_refused_on_a_one_time_schedule(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key, schedule_body())
    url = f"/v1/schedules/{created['schedule_id']}"
    for body, field in (
        ({"cron": "@daily"}, "cron"),
        ({"every": "1h"}, "every"),
        ({"timezone": "UTC", "delay_s": 100}, "timezone"),
        ({"max_fires": 2}, "max_fires"),
    ):
        assert await refused(await api.patch(url, json=body, headers=key), 422) == ("invalid", field), body
    assert await get(api, key, created["schedule_id"]) == created
    jittered = await patch(api, key, created["schedule_id"], {"jitter": "20s"})
    assert jittered["jitter_s"] == 20 and jittered["fire_at"] == created["fire_at"]
    assert at(created["fire_at"]) <= at(jittered["due_at"]) < at(created["fire_at"]) + timedelta(seconds=20)


# -- cancel -------------------------------------------------------------------------------------------


async def test_cancel_recurring_has_no_imminence_guard(api: Api, register: Register) -> None:
    _, key = await register()
    start = soon(1)
    created = await create(api, key, recurring_body(cron=None, every="1h", start_at=rfc3339(start)))
    assert at(created["fire_at"]) == start
    url = f"/v1/schedules/{created['schedule_id']}"
    resp = await api.delete(url, headers=key)
    assert resp.status == 200, await resp.text()
    cancelled = await resp.json()
    assert cancelled["status"] == "cancelled" and cancelled["recurrence"] == created["recurrence"]
    assert (await get(api, key, created["schedule_id"]))["status"] == "cancelled"
    assert await refused(await api.patch(url, json={"every": "2h"}, headers=key), 409) == ("already_cancelled", None)

    one_time = await create(api, key, schedule_body(delay_s=1))
    imminent = await api.delete(f"/v1/schedules/{one_time['schedule_id']}", headers=key)
    assert (await imminent.json())["error"]["code"] == "fire_imminent" and imminent.status == 409


async def test_patch_recurring_near_its_occurrence(api: Api, register: Register) -> None:
    _, key = await register()
    start = soon(1)
    created = await create(api, key, recurring_body(cron=None, every="1h", start_at=rfc3339(start)))
    assert at(created["fire_at"]) == start
    before = datetime.now(UTC)
    patched = await patch(api, key, created["schedule_id"], {"every": "2h"})
    after = datetime.now(UTC)
    assert before + timedelta(hours=2) - MS <= at(patched["fire_at"]) <= after + timedelta(hours=2)
    assert without_anchor(patched["recurrence"]) == {"every": "2h"} and patched["occurrence"] == 1


# -- runs ---------------------------------------------------------------------------------------------


async def test_runs_of_an_unfired_one_time_schedule(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key, schedule_body())
    resp = await api.get(f"/v1/schedules/{created['schedule_id']}/runs", headers=key)
    assert resp.status == 200 and await resp.json() == {"runs": [], "next_cursor": None}


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"page": "2"}, "unknown_field", "page"),
        ({"limit": "0"}, "out_of_range", "limit"),
        ({"limit": "1001"}, "out_of_range", "limit"),
        ({"limit": "ten"}, "wrong_type", "limit"),
        ({"cursor": "not-a-cursor"}, "invalid", "cursor"),  # the pattern's, not one handed out: 422
    ],
)
async def test_bad_runs_queries(api: Api, register: Register, params: dict[str, str], code: str, field: str) -> None:
    _, key = await register()
    created = await create(api, key, recurring_body())
    resp = await api.get(f"/v1/schedules/{created['schedule_id']}/runs", params=params, headers=key)
    assert await refused(resp, 422 if code == "invalid" else 400) == (code, field)


async def test_runs_of_a_fired_one_time_schedule(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(api, key, schedule_body())
    schedule = await stored(store, client_id, created["schedule_id"])
    due = schedule.location.due_at
    first, fired = due + timedelta(seconds=2.5), due + timedelta(seconds=40)
    tries = (Try(1, due, first, "retry", "HTTP 502"), Try(4, fired - timedelta(seconds=1), fired, "failed", "HTTP 503"))
    outcome = FireOutcome(client_id, schedule.schedule_id, schedule.location, Status.FAILED, 4, fired, "HTTP 503")
    await store.record_outcomes([dataclasses.replace(outcome, tries=tries)])
    body = await (await api.get(f"/v1/schedules/{created['schedule_id']}/runs", headers=key)).json()
    assert body == {
        "runs": [
            {
                "fire_id": created["fire_id"],
                "nominal_at": created["fire_at"],
                "status": "failed",
                "attempts": 4,
                "fired_at": rfc3339(first),  # the first attempt's time and lateness
                "lateness_s": 2.5,
                "last_error": "HTTP 503",
                "tries": [
                    {
                        "attempt": 1,
                        "due_at": rfc3339(due),
                        "sent_at": rfc3339(first),
                        "lateness_s": 2.5,
                        "outcome": "retry",
                        "error": "HTTP 502",
                    },
                    {
                        "attempt": 4,
                        "due_at": rfc3339(fired - timedelta(seconds=1)),
                        "sent_at": rfc3339(fired),
                        "lateness_s": 1.0,
                        "outcome": "failed",
                        "error": "HTTP 503",
                    },
                ],
            }
        ],
        "next_cursor": None,
    }


async def test_runs_newest_first_and_paged(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    first_at = at("2030-01-01T00:00:00Z")
    created = await create(api, key, recurring_body(cron=None, every="1h", start_at=rfc3339(first_at)))
    sid = created["schedule_id"]
    # A poller chains each occurrence on to the next before firing it, then records its outcome.
    rows = [await stored(store, client_id, sid)]
    for hours in (1, 2, 3):
        rows.append(await advance(store, rows[-1], first_at + timedelta(hours=hours)))
    lateness = [0.25, 1.5, 12.0]
    outcomes = [
        FireOutcome(
            client_id,
            row.schedule_id,
            row.location,
            Status.FAILED if row.seq == 2 else Status.SUCCEEDED,
            row.seq,
            row.fire_at + timedelta(seconds=late),
            "HTTP 500" if row.seq == 2 else None,
            nominal_at=row.fire_at,
            seq=row.seq,
            tries=(Try(1, row.location.due_at, row.fire_at + timedelta(seconds=late), "delivered"),),
        )
        for row, late in zip(rows[:3], lateness, strict=True)
    ]
    await store.record_outcomes(outcomes)
    nominal = [row.fire_at for row in rows[:3]]

    url = f"/v1/schedules/{sid}/runs"
    everything = await (await api.get(url, headers=key)).json()
    assert everything["next_cursor"] is None
    runs = everything["runs"]
    assert [r["nominal_at"] for r in runs] == [rfc3339(m) for m in reversed(nominal)]
    assert [r["occurrence"] for r in runs] == [3, 2, 1]
    assert [r["lateness_s"] for r in runs] == list(reversed(lateness))
    assert [r["fire_id"] for r in runs] == [fire_id(sid, m) for m in reversed(nominal)]
    assert [(r["status"], r["attempts"], r["last_error"]) for r in runs] == [
        ("succeeded", 3, None),
        ("failed", 2, "HTTP 500"),
        ("succeeded", 1, None),
    ]
    assert at(runs[0]["fired_at"]) == nominal[2] + timedelta(seconds=12)

    first = await (await api.get(url, params={"limit": "2"}, headers=key)).json()
    assert first["runs"] == runs[:2] and first["next_cursor"]
    rest = await (await api.get(url, params={"limit": "2", "cursor": first["next_cursor"]}, headers=key)).json()
    assert rest == {"runs": runs[2:], "next_cursor": None}

    live = await get(api, key, sid)  # the schedule lives on at its fourth occurrence
    assert (live["status"], live["occurrence"], live["fire_at"]) == ("scheduled", 4, "2030-01-01T03:00:00Z")


async def test_get_shows_the_last_error_of_a_recurring_schedule_whose_runs_fail(
    api: Api, register: Register, store: Store
) -> None:
    """Issue 28: its row is the next occurrence, never tried; GET said last_error null while runs failed."""
    client_id, key = await register()
    first_at = at("2030-01-01T00:00:00Z")
    created = await create(api, key, recurring_body(cron=None, every="1h", start_at=rfc3339(first_at)))
    sid = created["schedule_id"]
    first = await stored(store, client_id, sid)
    second = await advance(store, first, first_at + timedelta(hours=1))
    failed = FireOutcome(
        client_id, first.schedule_id, first.location, Status.FAILED, 5, first_at, "HTTP 500", nominal_at=first_at
    )
    await store.record_outcomes([failed])
    shown = await get(api, key, sid)
    assert (shown["occurrence"], shown["last_error"]) == (2, "HTTP 500")
    third = await advance(store, second, first_at + timedelta(hours=2))
    delivered = FireOutcome(
        client_id, second.schedule_id, second.location, Status.SUCCEEDED, 1, second.fire_at, nominal_at=second.fire_at
    )
    await store.record_outcomes([delivered])
    assert (await get(api, key, sid))["last_error"] == "HTTP 500"  # the last error, still
    # The third occurrence failed once and waits for its retry (a row of its own, run_of the schedule).
    retry_at = Location(third.location.poller_id, third.fire_at + timedelta(minutes=1))
    retrying = FireOutcome(
        client_id, uuid.uuid4(), retry_at, Status.SCHEDULED, 1, third.fire_at, "timeout after 5s",
        nominal_at=third.fire_at, run_of=third.schedule_id,
    )  # fmt: skip
    await store.record_outcomes([retrying])
    assert (await get(api, key, sid))["last_error"] == "timeout after 5s"  # the newest run's


async def test_runs_of_another_clients_schedule(api: Api, register: Register) -> None:
    _, key_a = await register()
    _, key_b = await register()
    b_schedule = await create(api, key_b, recurring_body())
    url = f"/v1/schedules/{b_schedule['schedule_id']}/runs"
    assert await refused(await api.get(url, headers=key_a), 404) == ("not_found", "schedule_id")
    assert (await api.get(url, headers=key_b)).status == 200
    missing = await api.get(f"/v1/schedules/{uuid.uuid4()}/runs", headers=key_b)
    assert missing.status == 404
    bad_id = await api.get("/v1/schedules/not-a-uuid/runs", headers=key_b)
    assert await refused(bad_id) == ("invalid_value", "schedule_id")


async def test_batch_trigger_fields(api: Api, register: Register) -> None:
    _, key = await register()
    one_time = await create(api, key, schedule_body(events=120, window="2m"))
    assert (one_time["events"], one_time["window_s"]) == (120, 120.0)
    assert "recurrence" not in one_time and await get(api, key, one_time["schedule_id"]) == one_time
    hourly = await create(api, key, recurring_body(events=3))
    assert hourly["events"] == 3 and "window_s" not in hourly and hourly["occurrence"] == 1
    plain = await create(api, key, schedule_body())
    assert "events" not in plain and "window_s" not in plain
    # A patch changes the batch shape and keeps the rest.
    patched = await patch(api, key, one_time["schedule_id"], {"events": 10})
    assert (patched["events"], patched["window_s"], patched["fire_at"]) == (10, 120.0, one_time["fire_at"])
    resp = await api.get(f"/v1/schedules/{one_time['schedule_id']}/runs", headers=key)
    assert resp.status == 200 and (await resp.json())["runs"] == []


@pytest.mark.parametrize(
    ("changes", "status", "field"),
    [
        ({"events": 0}, 400, "events"),
        ({"events": 10_001}, 400, "events"),
        ({"events": True}, 400, "events"),
        ({"events": "5"}, 400, "events"),
        ({"window": "0s"}, 400, "window"),
        ({"window": "2d"}, 422, "window"),  # over TICKD_MAX_WINDOW_S: the pattern allows it
        ({"window": 60}, 400, "window"),
    ],
)
async def test_bad_batch_fields_are_refused_and_write_nothing(
    api: Api, register: Register, rows: Rows, changes: dict[str, Any], status: int, field: str
) -> None:
    client_id, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(**changes), headers=key)
    _, named = await refused(resp, status)
    assert named == field
    assert set((await rows(client_id)).values()) == {0}
