"""Throttle policies through the API, against the real Cassandra: CRUD, validation, schedules naming a
policy, and the consumer's release of an event (tokens taken the way a poller takes them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, Rows, schedule_body
from tickd.schema.model import Token
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def refused(resp: Any, status: int = 400) -> tuple[str, str | None]:
    assert resp.status == status, await resp.text()
    error = (await resp.json())["error"]
    return error["code"], error["field"]


async def test_policy_crud(api: Api, register: Register) -> None:
    _, key = await register()
    created = await ok(
        await api.put(
            "/v1/throttle-policies/nightly", json={"max_in_flight": 20, "release_timeout_s": 30}, headers=key
        ),
        201,
    )
    assert (created["name"], created["max_in_flight"], created["release_timeout_s"]) == ("nightly", 20, 30)
    replaced = await ok(
        await api.put("/v1/throttle-policies/nightly", json={"max_in_flight": 5, "release_timeout_s": 30}, headers=key)
    )
    assert replaced["max_in_flight"] == 5 and replaced["created_at"] == created["created_at"]
    got = await ok(await api.get("/v1/throttle-policies/nightly", headers=key))
    assert got["in_flight"] == 0 and got["max_in_flight"] == 5
    listed = await ok(await api.get("/v1/throttle-policies", headers=key))
    assert [p["name"] for p in listed["policies"]] == ["nightly"]
    await ok(await api.delete("/v1/throttle-policies/nightly", headers=key))
    assert await refused(await api.get("/v1/throttle-policies/nightly", headers=key), 404) == ("not_found", "name")


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("p", {"max_in_flight": 0, "release_timeout_s": 5}, "max_in_flight"),
        ("p", {"max_in_flight": 10_001, "release_timeout_s": 5}, "max_in_flight"),
        ("p", {"max_in_flight": 5, "release_timeout_s": 0}, "release_timeout_s"),
        ("p", {"max_in_flight": 5, "release_timeout_s": 86_401}, "release_timeout_s"),
        ("p", {"max_in_flight": "5", "release_timeout_s": 5}, "max_in_flight"),
        ("p", {"max_in_flight": 5.5, "release_timeout_s": 5}, "max_in_flight"),
        ("p", {"max_in_flight": 5, "release_timeout_s": 1e6}, "release_timeout_s"),
        ("p", {"release_timeout_s": 5}, "max_in_flight"),
        ("p", {"max_in_flight": 5, "release_timeout_s": 5, "burst": 2}, "burst"),
        ("Bad Name", {"max_in_flight": 5, "release_timeout_s": 5}, "name"),
    ],
)
async def test_bad_policies_are_refused(
    api: Api, register: Register, name: str, body: dict[str, Any], field: str
) -> None:
    _, key = await register()
    _, named = await refused(await api.put(f"/v1/throttle-policies/{name}", json=body, headers=key))
    assert named == field
    assert (await ok(await api.get("/v1/throttle-policies", headers=key)))["policies"] == []


async def test_integral_floats_are_integers(api: Api, register: Register) -> None:
    """JSON Schema counts 1764.0 as an integer, so the API does too (a string "1764" stays refused)."""
    _, key = await register()
    body = b'{"max_in_flight": 1764.0, "release_timeout_s": 3e1}'
    headers = {**key, "Content-Type": "application/json"}
    created = await ok(await api.put("/v1/throttle-policies/p", data=body, headers=headers), 201)
    assert (created["max_in_flight"], created["release_timeout_s"]) == (1764, 30)
    preview = {"cron": "@daily", "count": 2.0, "after": 1900000000.0}
    assert len((await ok(await api.post("/v1/schedules/preview", json=preview, headers=key)))["occurrences"]) == 2


async def test_schedules_name_an_existing_policy(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    _code, field = await refused(await api.post("/v1/schedules", json=schedule_body(throttle="nope"), headers=key), 422)
    assert field == "throttle" and set((await rows(client_id)).values()) == {0}
    await ok(
        await api.put("/v1/throttle-policies/p", json={"max_in_flight": 2, "release_timeout_s": 5}, headers=key), 201
    )
    made = await ok(await api.post("/v1/schedules", json=schedule_body(throttle="p", events=3), headers=key), 201)
    assert (made["throttle"], made["events"]) == ("p", 3)
    cleared = await ok(await api.patch(f"/v1/schedules/{made['schedule_id']}", json={"throttle": None}, headers=key))
    assert "throttle" not in cleared and cleared["events"] == 3
    _, field = await refused(
        await api.patch(f"/v1/schedules/{made['schedule_id']}", json={"throttle": "nope"}, headers=key), 422
    )
    assert field == "throttle"


async def test_release_frees_the_events_token_once(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    await ok(
        await api.put("/v1/throttle-policies/p", json={"max_in_flight": 2, "release_timeout_s": 60}, headers=key), 201
    )
    made = await ok(await api.post("/v1/schedules", json=schedule_body(throttle="p"), headers=key), 201)
    event_id = f"{made['fire_id']}:0"
    token = Token(client_id, "p", 1, event_id, "node-x", datetime.now(UTC))
    assert await store.take_token(token, 60)
    assert not await store.take_token(Token(client_id, "p", 1, f"{made['fire_id']}:1", "node-y", token.taken_at), 60)
    assert (await ok(await api.get("/v1/throttle-policies/p", headers=key)))["in_flight"] == 1

    first = await ok(await api.post(f"/v1/events/{event_id}/release", headers=key))
    assert first == {"event_id": event_id, "released": True}
    again = await ok(await api.post(f"/v1/events/{event_id}/release", headers=key))
    assert again["released"] is False
    assert (await ok(await api.get("/v1/throttle-policies/p", headers=key)))["in_flight"] == 0

    _other_client, other_key = await register()
    assert (await refused(await api.post(f"/v1/events/{event_id}/release", headers=other_key), 404))[1] == "event_id"
    for bad in ("not-an-event", f"{'-' * 36}:1:0", f"{made['schedule_id']}:1:12345678"):
        assert (await refused(await api.post(f"/v1/events/{bad}/release", headers=key)))[1] == "event_id", bad
