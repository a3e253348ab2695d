"""Backfill over the API (in-memory store, no pollers: what a backfill writes is read back from the store):
each occurrence of a recurring schedule in a past range written once as a fire of its own, oldest first, at
the job's rate; the same range again, an overlapping one, and one the runs show sent write nothing twice; a
calendar's exclusions and what the timeline skipped are told apart; progress is the job's; a cancel stops
it; bad input is refused naming the field, and nothing is written for it."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN_TOKEN, Api, Register, schedule_body
from tests.unit.api.test_api_bulk_jobs import finished, ok
from tests.waiting import until
from tickd.schema import backfills, timing
from tickd.schema.model import DeadLetter, FireOutcome, Run, Schedule, Status
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]

EVERY_MINUTE = {"cron": "* * * * *", "timezone": "UTC", "delay_s": None}


@pytest.fixture
def api_settings() -> ApiSettings:
    """Jobs looked for often, in pages of 3 (a backfill of a dozen occurrences saves several pages), fast."""
    return ApiSettings(
        admin_token=ADMIN_TOKEN,
        callback_allow_private=True,
        bulk_poll_s=0.05,
        bulk_page=3,
        bulk_rate_per_s=10_000.0,
        backfill_rate_per_s=1_000.0,
        backfill_max_fires=50,
    )


async def recurring(api: Api, key: dict[str, str], **changes: Any) -> str:
    body = schedule_body(**{**EVERY_MINUTE, **changes})
    return str((await ok(await api.post("/v1/schedules", json=body, headers=key), 201))["schedule_id"])


def minutes_ago(n: int) -> datetime:
    at = datetime.now(UTC).replace(second=0, microsecond=0)
    return at - timedelta(minutes=n)


async def backfill(api: Api, key: dict[str, str], sid: str, start: datetime, end: datetime, **more: Any) -> Any:
    body = {"from": start.isoformat(), "to": end.isoformat(), **more}
    return await api.post(f"/v1/schedules/{sid}/backfill", json=body, headers=key)


async def backfilled(api: Api, key: dict[str, str], sid: str, start: datetime, end: datetime) -> dict[str, Any]:
    """A backfill started (202) and followed until it is done."""
    return await finished(api, key, (await ok(await backfill(api, key, sid, start, end), 202))["job_id"])


async def rows(store: Store, client_id: str, sid: str, nominals: list[datetime]) -> list[Schedule | None]:
    parent = uuid.UUID(sid)
    return [await store.get_schedule(client_id, backfills.backfill_id(parent, t)) for t in nominals]


async def test_each_occurrence_in_the_range_is_written_once_oldest_first_as_a_fire_of_its_own(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    sid = await recurring(api, key)
    start, end = minutes_ago(10), minutes_ago(5)
    job = await ok(await backfill(api, key, sid, start, end), 202)
    assert job["action"] == "backfill" and job["filter"] is None
    assert job["backfill"] == {
        "schedule_id": sid,
        "from": start.isoformat().replace("+00:00", "Z"),
        "to": end.isoformat().replace("+00:00", "Z"),
        "rate_per_s": 1000.0,
    }
    done = await finished(api, key, job["job_id"])
    assert (done["state"], done["matched"], done["changed"], done["unchanged"], done["failed"]) == ("done", 5, 5, 0, 0)
    nominals = [start + timedelta(minutes=i) for i in range(5)]
    written = await rows(store, client_id, sid, nominals)
    assert all(r is not None for r in written)
    fires = [r for r in written if r is not None]
    assert [r.fire_at for r in fires] == nominals  # each occurrence's nominal time, as its subscriber sees it
    assert [r.fire_id for r in fires] == [f"{sid}:{timing.to_epoch_ms(t)}:backfill" for t in nominals]
    assert all(r.public_id == uuid.UUID(sid) and r.repeat is None and r.status is Status.SCHEDULED for r in fires)
    dues = [r.location.due_at for r in fires]
    assert dues == sorted(dues)  # written, so due, in the order of the occurrences
    view = await ok(await api.get(f"/v1/schedules/{fires[0].schedule_id}", headers=key))
    assert (view["backfill_of"], view["fire_id"], "trigger_of" in view) == (sid, fires[0].fire_id, False)
    # The schedule's own timeline is untouched: its next occurrence is still ahead.
    current = await ok(await api.get(f"/v1/schedules/{sid}", headers=key))
    assert datetime.fromisoformat(current["fire_at"]) > datetime.now(UTC)


async def test_the_same_range_again_and_an_overlapping_one_fire_only_what_no_backfill_fired(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    sid = await recurring(api, key)
    first = await backfilled(api, key, sid, minutes_ago(10), minutes_ago(5))
    again = await backfilled(api, key, sid, minutes_ago(10), minutes_ago(5))
    wider = await backfilled(api, key, sid, minutes_ago(12), minutes_ago(3))
    assert (first["changed"], first["unchanged"]) == (5, 0)
    assert (again["matched"], again["changed"], again["unchanged"]) == (5, 0, 5)
    assert (wider["matched"], wider["changed"], wider["unchanged"]) == (9, 4, 5)
    nominals = [minutes_ago(12) + timedelta(minutes=i) for i in range(9)]
    assert all(r is not None for r in await rows(store, client_id, sid, nominals))


async def test_an_occurrence_the_timeline_sent_is_left_one_it_skipped_is_fired(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    sid = await recurring(api, key)
    start = minutes_ago(6)
    sent, skipped, failed = start, start + timedelta(minutes=1), start + timedelta(minutes=2)
    await store.add_runs(
        client_id,
        uuid.UUID(sid),
        [
            Run(sent, Status.SUCCEEDED, 1, sent),
            Run(skipped, Status.SKIPPED, 0, None, "skipped: paused"),
            Run(failed, Status.FAILED, 3, failed, "HTTP 500"),
        ],
    )
    done = await backfilled(api, key, sid, start, start + timedelta(minutes=4))
    assert (done["matched"], done["changed"], done["unchanged"]) == (4, 2, 2)
    written = await rows(store, client_id, sid, [sent, skipped, failed, start + timedelta(minutes=3)])
    assert [r is not None for r in written] == [False, True, False, True]


async def test_a_calendar_s_excluded_occurrences_are_not_backfilled(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    start = minutes_ago(30)
    blackout = {
        "from": (start + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M"),
        "to": (start + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M"),
    }
    await ok(await api.put("/v1/calendars/quiet", json={"timezone": "UTC", "ranges": [blackout]}, headers=key), 201)
    sid = await recurring(api, key, calendars=["quiet"])
    done = await backfilled(api, key, sid, start, start + timedelta(minutes=7))
    assert (done["matched"], done["changed"], done["unchanged"]) == (7, 4, 3)
    written = await rows(store, client_id, sid, [start + timedelta(minutes=i) for i in range(7)])
    assert [r is not None for r in written] == [True, True, False, False, False, True, True]


async def test_fires_go_out_at_the_rate_asked_and_a_cancel_stops_the_rest(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    sid = await recurring(api, key)
    start = minutes_ago(40)
    job = await ok(await backfill(api, key, sid, start, minutes_ago(10), rate_per_s=5), 202)
    nominals = [start + timedelta(minutes=i) for i in range(30)]

    async def three_written() -> bool:
        return sum(r is not None for r in await rows(store, client_id, sid, nominals[:3])) == 3

    await until(three_written, 20, "three fires written")
    await ok(await api.post(f"/v1/bulk-jobs/{job['job_id']}/cancel", headers=key))
    stopped = await finished(api, key, job["job_id"])
    written = [r for r in await rows(store, client_id, sid, nominals) if r is not None]
    assert stopped["state"] == "cancelled" and 3 <= len(written) < 30
    assert [r.fire_at for r in written] == nominals[: len(written)]  # oldest first, none skipped
    dues = [r.location.due_at for r in written]
    # 5 a second: consecutive fires are written (so due) at least about 0.2 s apart (never closer; a slow
    # machine only spaces them more).
    assert all((b - a).total_seconds() >= 0.15 for a, b in itertools.pairwise(dues)), dues


async def test_an_idempotency_key_replays_the_backfill(api: Api, register: Register) -> None:
    _, key = await register()
    sid = await recurring(api, key)
    headers = {**key, "Idempotency-Key": "bf-1"}
    body = {"from": minutes_ago(4).isoformat(), "to": minutes_ago(2).isoformat()}
    first = await ok(await api.post(f"/v1/schedules/{sid}/backfill", json=body, headers=headers), 202)
    replay = await api.post(f"/v1/schedules/{sid}/backfill", json=body, headers=headers)
    assert replay.status == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert (await replay.json())["job_id"] == first["job_id"]


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"from": "2026-01-01T00:10:00Z", "to": "2026-01-01T00:05:00Z"}, "to", "out_of_range"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "to", "out_of_range"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2999-01-01T00:00:00Z"}, "to", "out_of_range"),
        ({"from": "2026-01-01T00:00:00Z"}, "to", None),
        ({"to": "2026-01-01T00:00:00Z"}, "from", None),
        ({"from": "2026-01-01T00:00:00", "to": "2026-01-01T01:00:00Z"}, "from", None),
        ({"from": -5, "to": 10}, "from", None),
        ({"from": "0001-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from", "out_of_range"),
        ({"from": "1969-12-31T23:59:59Z", "to": "2026-01-01T00:00:00Z"}, "from", "out_of_range"),
        ({"from": "0001-01-01T00:00:00+01:00", "to": "2026-01-01T00:00:00Z"}, "from", "out_of_range"),
        ({"from": "2026-01-01T00:00:00Z", "to": "9999-12-31T23:59:59Z"}, "to", "out_of_range"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "rate_per_s": 0}, "rate_per_s", None),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "rate_per_s": 20_000}, "rate_per_s", None),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "every": "1m"}, "every", None),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    api: Api, register: Register, body: dict[str, Any], field: str, code: str | None
) -> None:
    _, key = await register()
    sid = await recurring(api, key)
    refused = await api.post(f"/v1/schedules/{sid}/backfill", json=body, headers=key)
    assert 400 <= refused.status < 500, await refused.text()
    error = (await refused.json())["error"]
    assert error["field"] == field, error
    if code is not None:
        assert error["code"] == code, error
    jobs = await ok(await api.get("/v1/bulk-jobs", headers=key))
    assert jobs["jobs"] == []  # nothing started


async def test_ranges_the_server_cannot_honour_are_refused_naming_why(api: Api, register: Register) -> None:
    _, key = await register()
    sid = await recurring(api, key)
    # More occurrences than TICKD_BACKFILL_MAX_FIRES (50 here).
    too_many = await backfill(api, key, sid, minutes_ago(120), minutes_ago(1))
    assert too_many.status == 422 and (await too_many.json())["error"] == {
        **(await too_many.json())["error"],
        "field": "to",
        "code": "too_many_fires",
    }
    # A range with no occurrence of the rule.
    daily = await recurring(api, key, cron="0 9 1 1 *")
    empty = await backfill(api, key, daily, minutes_ago(10), minutes_ago(5))
    assert empty.status == 422 and (await empty.json())["error"]["code"] == "empty_range"
    # Older than the runs the client keeps, for a range the schedule lived through.
    old = await backfill(api, key, sid, datetime.now(UTC) - timedelta(days=30), datetime.now(UTC))
    assert old.status == 422 and (await old.json())["error"]["code"] == "history_expired"
    # A one-time schedule; a cancelled one; one that does not exist; another tenant's.
    once = (await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201))["schedule_id"]
    not_recurring = await backfill(api, key, once, minutes_ago(10), minutes_ago(5))
    assert not_recurring.status == 409 and (await not_recurring.json())["error"]["code"] == "not_recurring"
    await ok(await api.delete(f"/v1/schedules/{daily}", headers=key))
    cancelled = await backfill(api, key, daily, minutes_ago(10), minutes_ago(5))
    assert cancelled.status == 409 and (await cancelled.json())["error"]["code"] == "already_cancelled"
    assert (await backfill(api, key, str(uuid.uuid4()), minutes_ago(10), minutes_ago(5))).status == 404
    _, other_key = await register()
    assert (await backfill(api, other_key, sid, minutes_ago(10), minutes_ago(5))).status == 404
    jobs = await ok(await api.get("/v1/bulk-jobs", headers=key))
    assert jobs["jobs"] == []
    # Before the schedule existed no run was ever kept: any range then, however old, is backfilled.
    nine = await recurring(api, key, cron="0 9 * * *")
    before = datetime.now(UTC) - timedelta(days=1)
    started = await backfill(api, key, nine, before - timedelta(days=40), before)
    assert started.status == 202, await started.text()


async def test_a_backfill_s_dead_letter_is_redriven_to_its_own_row(api: Api, register: Register, store: Store) -> None:
    """A backfill's dead letter carries the schedule's id and the backfill's fire id; its redrive fires that
    occurrence's backfill row again (the same fire id), not an occurrence of the schedule's timeline. The
    fire's failure is written as a poller writes it (its outcome, then its dead letter)."""
    client_id, key = await register()
    sid = await recurring(api, key)
    nominal = minutes_ago(3)
    await backfilled(api, key, sid, nominal, minutes_ago(2))
    [row] = await rows(store, client_id, sid, [nominal])
    assert row is not None
    failed_at = datetime.now(UTC).replace(microsecond=0)
    outcome = FireOutcome(
        client_id,
        row.schedule_id,
        row.location,
        Status.FAILED,
        3,
        failed_at,
        "HTTP 500",
        nominal_at=nominal,
        run_of=uuid.UUID(sid),
        backfill=True,
    )
    await store.record_outcomes([outcome])
    await store.add_dead_letter(
        DeadLetter(client_id, uuid.UUID(sid), row.fire_id, failed_at, 3, "HTTP 500", row.callback, row.payload)
    )
    [run] = (await ok(await api.get(f"/v1/schedules/{sid}/runs", headers=key)))["runs"]
    assert (run["fire_id"], run["status"], run["backfill"]) == (row.fire_id, "failed", True)
    letter_id = f"{timing.to_epoch_ms(failed_at)}-{sid}"
    await ok(await api.post(f"/v1/dead-letters/{letter_id}/redrive", headers=key))
    again = await store.get_schedule(client_id, row.schedule_id)
    assert again is not None and again.status is Status.SCHEDULED and again.fire_id == row.fire_id
    assert again.location.due_at > row.location.due_at
    current = await ok(await api.get(f"/v1/schedules/{sid}", headers=key))
    assert datetime.fromisoformat(current["fire_at"]) > datetime.now(UTC)  # the timeline did not move


@pytest.mark.parametrize(
    "raw",
    [
        b'{"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "rate_per_s": 1e308}',
        b'{"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "rate_per_s": "5"}',
        b'{"from": "not a time", "to": "2026-01-01T00:01:00Z"}',
        b'{"from": {}, "to": []}',
        b'{"from": 100000000000000000000, "to": 10}',
        b'{"from": "2026-02-30T00:00:00Z", "to": "2026-03-01T00:00:00Z"}',
        b'{"from": "\\u0000", "to": "\\ud800"}',
        b"[]",
        b"null",
        b"{",
        b'{"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T00:01:00Z", "pad": "' + b"x" * 2048 + b'"}',
    ],
)
async def test_hostile_bodies_are_refused_with_a_4xx_and_start_nothing(
    api: Api, register: Register, raw: bytes
) -> None:
    _, key = await register()
    sid = await recurring(api, key)
    headers = {**key, "Content-Type": "application/json"}
    refused = await api.post(f"/v1/schedules/{sid}/backfill", data=raw, headers=headers)
    assert 400 <= refused.status < 500, (refused.status, await refused.text())
    assert (await ok(await api.get("/v1/bulk-jobs", headers=key)))["jobs"] == []


@pytest.mark.parametrize("path_id", ["not-a-uuid", "%00", "..", "00000000-0000-0000-0000-000000000000" * 3])
async def test_a_hostile_schedule_id_is_refused(api: Api, register: Register, path_id: str) -> None:
    _, key = await register()
    body = {"from": minutes_ago(4).isoformat(), "to": minutes_ago(2).isoformat()}
    refused = await api.post(f"/v1/schedules/{path_id}/backfill", json=body, headers=key)
    assert 400 <= refused.status < 500, (refused.status, await refused.text())
