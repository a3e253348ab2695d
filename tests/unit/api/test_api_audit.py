"""The audit trail over the API (in-memory store; ``tests/integration/test_api_audit_cassandra.py`` runs these
on Cassandra): each confirmed change is one record with its actor, action, version and request id; refused
changes and no-ops leave none; payloads and callback secrets are not kept; a tenant sees only its own;
pages go newest first."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests.integration.api_helpers import ADMIN, Api, Register, schedule_body

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def trail(api: Api, key: dict[str, str], path: str, **query: Any) -> list[dict[str, Any]]:
    """Every record of ``path`` (an audit listing), page by page."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 2, **query}
    while True:
        page = await ok(await api.get(path, params=params, headers=key))
        found += page["records"]
        if page["next_cursor"] is None:
            return found
        params["cursor"] = page["next_cursor"]


async def test_each_confirmed_change_of_a_schedule_is_one_record(api: Api, register: Register) -> None:
    client_id, key = await register()
    secret_payload = {"card": "4111 1111 1111 1111"}
    body = schedule_body(payload=secret_payload)
    body["callback"] = {**body["callback"], "url": "http://127.0.0.1:9/hook?token=s3cret", "headers": {"X-K": "k3y"}}
    made = await ok(await api.post("/v1/schedules", json=body, headers={**key, "X-Request-Id": "req-create-1"}), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    answers = [made]
    answers.append(await ok(await api.patch(path, json={"payload": {"v": 2}}, headers=key)))
    answers.append(await ok(await api.post(f"{path}/pause", headers=key)))
    await ok(await api.post(f"{path}/pause", headers=key))  # a no-op: no record
    answers.append(await ok(await api.post(f"{path}/resume", headers=key)))
    refused = await api.patch(path, json={"payload": 3}, headers={**key, "If-Match": '"1"'})
    assert refused.status == 412  # refused: no record
    answers.append(await ok(await api.delete(path, headers=key)))
    await ok(await api.delete(path, headers=key))  # a no-op: no record

    records = await trail(api, key, f"{path}/audit")
    actions = ["schedule.create", "schedule.update", "schedule.pause", "schedule.resume", "schedule.cancel"]
    assert [r["action"] for r in records] == actions[::-1]  # newest first
    assert [r["version"] for r in records] == [a["version"] for a in answers][::-1]
    assert {r["target"] for r in records} == {r["schedule_id"] for r in records} == {made["schedule_id"]}
    assert records[-1]["request_id"] == "req-create-1"
    client = await ok(await api.get(f"/v1/clients/{client_id}", headers=ADMIN))
    assert client["client_id"] == client_id
    assert len({r["actor"] for r in records}) == 1 and records[0]["actor"].startswith("key:")
    created = records[-1]["changes"]
    raw = json.dumps(secret_payload, separators=(",", ":")).encode()
    assert created["payload"] == {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    assert created["callback"]["url"] == "http://127.0.0.1:9/hook?[redacted]"
    assert created["callback"]["headers"] == {"X-K": "[redacted]"}
    assert (
        "4111" not in json.dumps(records) and "s3cret" not in json.dumps(records) and "k3y" not in json.dumps(records)
    )
    assert records[-2]["changes"] == {"payload": {"bytes": 7, "sha256": hashlib.sha256(b'{"v":2}').hexdigest()}}
    # The tenant's trail has them too, with the client's own records only.
    mine = await trail(api, key, "/v1/audit")
    assert [r["audit_id"] for r in mine if r.get("schedule_id") == made["schedule_id"]] == [
        r["audit_id"] for r in records
    ]


async def test_a_tenant_sees_only_its_own_trail(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    made = await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    assert [r["action"] for r in await trail(api, other, "/v1/audit")] == ["client.create"]  # its own
    assert await trail(api, other, f"/v1/schedules/{made['schedule_id']}/audit") == []
    assert len(await trail(api, key, f"/v1/schedules/{made['schedule_id']}/audit")) == 1


async def test_admin_changes_and_key_rotation_show_who(api: Api, register: Register) -> None:
    client_id, key = await register()
    await ok(await api.patch(f"/v1/clients/{client_id}", json={"poller_count": 6}, headers=ADMIN))
    await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
    rotated = await ok(await api.post(f"/v1/clients/{client_id}/api-keys", headers=ADMIN), 201)
    new_key = {"Authorization": f"Bearer {rotated['api_key']}"}
    await ok(
        await api.put(
            "/v1/throttle-policies/slow", json={"max_in_flight": 2, "release_timeout_s": 60}, headers=new_key
        ),
        201,
    )
    await ok(await api.delete("/v1/throttle-policies/slow", headers=new_key))
    records = await trail(api, new_key, "/v1/audit")
    seen = [(r["action"], r["actor"]) for r in records][::-1]
    old_actor, new_actor = seen[2][1], seen[4][1]
    assert [a for a, _ in seen] == [
        "client.create",
        "client.update",
        "schedule.create",
        "client.rotate_key",
        "policy.put",
        "policy.delete",
    ]
    assert seen[0][1] == seen[1][1] == seen[3][1] == "admin"
    assert old_actor.startswith("key:") and new_actor.startswith("key:") and old_actor != new_actor
    assert records[-2]["changes"] == {"poller_count": 6} and records[1]["target"] == "slow"


async def test_a_batch_records_each_schedule_it_made(api: Api, register: Register) -> None:
    _, key = await register()
    items = [schedule_body(payload={"n": n}) for n in range(3)] + [{"delay_s": -5}]
    results = (await ok(await api.post("/v1/schedules/batch", json={"schedules": items}, headers=key)))["results"]
    made = {r["schedule_id"] for r in results if "schedule_id" in r}
    assert len(made) == 3
    records = [r for r in await trail(api, key, "/v1/audit") if r["action"] != "client.create"]
    assert {r["schedule_id"] for r in records} == made and {r["action"] for r in records} == {"schedule.create"}


async def test_bad_cursors_and_ranges_are_refused(api: Api, register: Register) -> None:
    _, key = await register()
    for query, field in (
        ({"cursor": "nonsense"}, "cursor"),
        ({"cursor": "99999999999999999_" + "a" * 32}, "cursor"),
        ({"cursor": "1795000000000_" + "g" * 32}, "cursor"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "to"),
        ({"to": "0001-01-02T00:00:00Z"}, "to"),
        ({"limit": 0}, "limit"),
        ({"since": "yesterday"}, "since"),
    ):
        resp = await api.get("/v1/audit", params=query, headers=key)
        assert resp.status in (400, 422), (query, await resp.text())
        assert (await resp.json())["error"]["field"] == field, query


async def test_creates_go_unrecorded_when_so_configured(api_settings: Any, store: Any) -> None:
    from dataclasses import replace

    from tests.integration.api_helpers import serve

    async for api in serve(replace(api_settings, audit_creates=False), store):
        resp = await api.post("/v1/clients", json={"client_id": "quiet-creates", "poller_count": 2}, headers=ADMIN)
        key = {"Authorization": f"Bearer {(await ok(resp, 201))['api_key']}"}
        made = await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)
        await ok(await api.post(f"/v1/schedules/{made['schedule_id']}/pause", headers=key))
        records = await trail(api, key, f"/v1/schedules/{made['schedule_id']}/audit")
        assert [r["action"] for r in records] == ["schedule.pause"]


def test_ids_grow_with_time_so_one_milliseconds_records_list_in_order() -> None:
    from tickd.schema import notices

    ids = [notices.record_id() for _ in range(1000)]  # far more than one millisecond holds apart
    assert ids == sorted(ids) and len(set(ids)) == 1000 and all(len(i) == 32 for i in ids)
