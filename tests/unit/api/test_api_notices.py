"""A client's settings and notification feed over the API (in-memory store): ``PATCH /v1/settings`` checks
each field (a notify target as a callback is), a schedule's ``pause_after_failures`` (recurring only, null
back to the default), a resume's notice in ``GET /v1/notifications`` and at the notify target (a one-time
schedule of the client's that listings leave out), and one tenant never sees another's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tests.integration.api_helpers import Api, Register, http_callback, schedule_body
from tickd.schema.model import InstanceKey
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]

EVERY_MINUTE = {"delay_s": None, "cron": "* * * * *", "timezone": "UTC"}
# What GET /v1/settings says of a client that set nothing (the API fixture runs the defaults).
DEFAULTS = {
    "pause_after_failures": 0,
    "notify": None,
    "retention_s": 7 * 86400,
    "audit_retention_s": 30 * 86400,
    "retention_max_s": 90 * 86400,
    "audit_retention_max_s": 365 * 86400,
    "missed": {"policy": "fire_all", "deadline_s": None},
}


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def refused(resp: Any, field: str) -> None:
    """A 400 (malformed) or 422 (well-formed, not acceptable) naming ``field``."""
    body = await resp.json()
    assert resp.status in (400, 422) and body["error"]["field"].startswith(field), body


async def test_settings_start_empty_and_each_field_is_replaced_alone(api: Api, register: Register) -> None:
    _, key = await register()
    assert await ok(await api.get("/v1/settings", headers=key)) == DEFAULTS
    target = http_callback(url="http://127.0.0.1:9/notices")
    changed = await ok(await api.patch("/v1/settings", json={"notify": target}, headers=key))
    assert changed["notify"]["url"] == target["url"] and changed["pause_after_failures"] == 0
    both = await ok(await api.patch("/v1/settings", json={"pause_after_failures": 3}, headers=key))
    assert both["pause_after_failures"] == 3 and both["notify"]["url"] == target["url"]  # kept
    assert await ok(await api.get("/v1/settings", headers=key)) == both
    cleared = await ok(await api.patch("/v1/settings", json={"notify": None}, headers=key))
    assert cleared == {**DEFAULTS, "pause_after_failures": 3}


async def test_bad_settings_are_refused_naming_the_field_and_change_nothing(api: Api, register: Register) -> None:
    _, key = await register()
    for body, field in [
        ({"pause_after_failures": -1}, "pause_after_failures"),
        ({"pause_after_failures": 1001}, "pause_after_failures"),
        ({"pause_after_failures": "3"}, "pause_after_failures"),
        ({"notify": {"type": "http", "url": "ftp://127.0.0.1/x"}}, "notify"),
        ({"notify": {"type": "http"}}, "notify"),
        ({"notify": {"type": "kafka", "topic": "not-granted"}}, "notify"),
        ({"notify": "http://127.0.0.1:9/"}, "notify"),
        ({"color": "red"}, "color"),
        ({"retention_s": 3599}, "retention_s"),
        ({"retention_s": 90 * 86400 + 1}, "retention_s"),
        ({"retention_s": -1}, "retention_s"),
        ({"audit_retention_s": 365 * 86400 + 1}, "audit_retention_s"),
        ({"audit_retention_s": 1.5}, "audit_retention_s"),
        ({"pause_after_failures": 2, "retention_s": 10}, "retention_s"),  # nothing of it is kept
    ]:
        await refused(await api.patch("/v1/settings", json=body, headers=key), field)
    assert await ok(await api.get("/v1/settings", headers=key)) == DEFAULTS


async def test_retention_is_chosen_within_the_maxima_and_0_restores_the_default(api: Api, register: Register) -> None:
    _, key = await register()
    chosen = await ok(
        await api.patch("/v1/settings", json={"retention_s": 3600, "audit_retention_s": 86400}, headers=key)
    )
    assert (chosen["retention_s"], chosen["audit_retention_s"]) == (3600, 86400)
    most = await ok(await api.patch("/v1/settings", json={"retention_s": 90 * 86400}, headers=key))
    assert most["retention_s"] == most["retention_max_s"] and most["audit_retention_s"] == 86400
    back = await ok(await api.patch("/v1/settings", json={"retention_s": 0, "audit_retention_s": 0}, headers=key))
    assert back == DEFAULTS


async def test_pause_after_failures_is_for_recurring_schedules_and_null_restores_the_default(
    api: Api, register: Register
) -> None:
    _, key = await register()
    body = schedule_body(pause_after_failures=2)
    await refused(await api.post("/v1/schedules", json=body, headers=key), "pause_after_failures")
    one_time = await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    patch = {"pause_after_failures": 2}
    await refused(await api.patch(f"/v1/schedules/{one_time['schedule_id']}", json=patch, headers=key), "pause")
    for bad in (-1, 1001, 2.5):
        body = schedule_body(**EVERY_MINUTE, pause_after_failures=bad)
        await refused(await api.post("/v1/schedules", json=body, headers=key), "pause_after_failures")
    made = await ok(
        await api.post("/v1/schedules", json=schedule_body(**EVERY_MINUTE, pause_after_failures=2), headers=key), 201
    )
    assert made["pause_after_failures"] == 2
    path = f"/v1/schedules/{made['schedule_id']}"
    changed = await ok(await api.patch(path, json={"pause_after_failures": 0}, headers=key))
    # Only the policy changed: the same fire, no move.
    assert changed["pause_after_failures"] == 0 and changed["fire_id"] == made["fire_id"]
    kept = await ok(await api.patch(path, json={"payload": {"v": 2}}, headers=key))
    assert kept["pause_after_failures"] == 0
    default = await ok(await api.patch(path, json={"pause_after_failures": None}, headers=key))
    assert "pause_after_failures" not in default


async def test_a_resume_is_a_notice_in_the_feed_and_at_the_target_and_only_for_its_tenant(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register(poller_count=1)
    _, other = await register()
    target = http_callback(url="http://127.0.0.1:9/notices")
    await ok(await api.patch("/v1/settings", json={"notify": target}, headers=key))
    made = await ok(await api.post("/v1/schedules", json=schedule_body(**EVERY_MINUTE), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    await ok(await api.post(f"{path}/pause", headers=key))
    resumed = await ok(await api.post(f"{path}/resume", headers=key))
    feed = await ok(await api.get("/v1/notifications", headers=key))
    [notice] = feed["notices"]
    assert notice["kind"] == "schedule.resumed" and notice["schedule_id"] == made["schedule_id"]
    assert notice["target"] == made["schedule_id"] and notice["detail"]["version"] == resumed["version"]
    assert (await ok(await api.get("/v1/notifications", headers=other)))["notices"] == []
    # Delivered too: a one-time schedule of the client's to its target, due now, that listings leave out.
    now = datetime.now(UTC)
    window = {"from": (now - timedelta(minutes=5)).isoformat(), "to": (now + timedelta(minutes=5)).isoformat()}
    listed = await ok(await api.get("/v1/schedules", params=window, headers=key))
    assert [s["schedule_id"] for s in listed["schedules"]] == [made["schedule_id"]]
    rows = [row async for row in _client_rows(store, client_id, now) if row.options is not None and row.options.notice]
    assert len(rows) == 1 and rows[0].callback.url == target["url"]  # type: ignore[union-attr]
    assert b'"schedule.resumed"' in rows[0].payload and made["schedule_id"].encode() in rows[0].payload


async def _client_rows(store: Store, client_id: str, now: datetime) -> Any:
    """The rows of the client's poller 0 in the minutes around ``now`` (payloads included)."""
    for minute in (now - timedelta(minutes=1), now, now + timedelta(minutes=1)):
        async for page in store.read_minute(InstanceKey(client_id, 0), minute.replace(second=0, microsecond=0)):
            for row in page:
                yield row


async def test_the_feed_refuses_bad_queries_naming_the_parameter(api: Api, register: Register) -> None:
    _, key = await register()
    bad = [({"limit": "0"}, "limit"), ({"cursor": "x"}, "cursor"), ({"from": "yesterday"}, "from")]
    bad.append(({"client_id": str(uuid.uuid4())}, "client_id"))  # not a way to read another tenant's feed
    for params, name in bad:
        resp = await api.get("/v1/notifications", params=params, headers=key)
        body = await resp.json()
        assert resp.status in (400, 422) and body["error"]["field"] == name, (params, body)


async def test_a_settings_change_keeps_what_another_replica_changed_a_moment_before(
    api: Api, register: Register, store: Store
) -> None:
    """This replica's client cache (TICKD_CLIENT_CACHE_S, 2 s by default) holds the settings it last saw;
    another replica then sets a retention. A PATCH of another field here keeps that retention, because
    it merges onto the settings as stored, not onto the cached copy."""
    client_id, key = await register()
    await ok(await api.patch("/v1/settings", json={"pause_after_failures": 3}, headers=key))  # cached here now
    client = await store.get_client(client_id)
    assert client is not None
    elsewhere = msgspec.structs.replace(client.settings, retention_s=7200)
    await store.set_client_settings(client_id, elsewhere)  # what another API replica's PATCH writes
    changed = await ok(await api.patch("/v1/settings", json={"pause_after_failures": 4}, headers=key))
    assert (changed["pause_after_failures"], changed["retention_s"]) == (4, 7200)
    stored = await store.get_client(client_id)
    assert stored is not None and stored.settings.retention_s == 7200
