"""Upsert by business key over the API (in-memory store): create, replace, get, cancel and create
again; one live schedule per key under 20 concurrent PUTs (queued on one replica: none refused), the live
version the last one answered;
the mutation guard; tenants; hostile keys."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema.model import FireOutcome, Status
from tickd.schema.store import Store
from tickd.service import keys

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_create_replace_get_cancel(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    path = "/v1/schedules/by-key/order-42"
    created = await ok(await api.put(path, json=schedule_body(delay_s=600), headers=key), 201)
    replaced = await ok(await api.put(path, json=schedule_body(delay_s=900, payload={"v": 2}), headers=key))
    assert replaced["schedule_id"] == created["schedule_id"] and replaced["payload"] == {"v": 2}
    assert datetime.fromisoformat(replaced["fire_at"]) > datetime.fromisoformat(created["fire_at"])
    assert replaced["fire_id"] != created["fire_id"] and replaced["created_at"] == created["created_at"]
    assert await ok(await api.get(path, headers=key)) == replaced
    assert await ok(await api.get(f"/v1/schedules/{created['schedule_id']}", headers=key)) == replaced
    cancelled = await ok(await api.delete(path, headers=key))
    assert cancelled["status"] == "cancelled" and (await ok(await api.delete(path, headers=key)))["status"] == (
        "cancelled"
    )
    again = await ok(await api.put(path, json=schedule_body(delay_s=600), headers=key), 201)
    assert again["schedule_id"] != created["schedule_id"]
    assert (await ok(await api.get(path, headers=key)))["schedule_id"] == again["schedule_id"]
    # Once it fired, the next PUT creates a new schedule for the key too.
    fired = await store.get_schedule(client_id, uuid.UUID(again["schedule_id"]))
    assert fired is not None
    done = FireOutcome(client_id, fired.schedule_id, fired.location, Status.SUCCEEDED, 1, datetime.now(UTC))
    await store.record_outcomes([done])
    third = await ok(await api.put(path, json=schedule_body(delay_s=600), headers=key), 201)
    assert third["schedule_id"] not in (created["schedule_id"], again["schedule_id"])


async def test_twenty_concurrent_puts_leave_one_live_schedule(api: Api, register: Register) -> None:
    _, key = await register()
    path = "/v1/schedules/by-key/hot-key"
    answered: list[tuple[int, dict[str, Any]]] = []

    async def put(n: int) -> int:
        resp = await api.put(path, json=schedule_body(delay_s=600 + n, payload={"n": n}), headers=key)
        body = await resp.json()
        if resp.status in (200, 201):
            answered.append((resp.status, body))
        else:
            assert resp.status == 409 and body["error"]["code"] == "conflict", body
        return resp.status

    statuses = await asyncio.gather(*(put(n) for n in range(20)))
    # On one replica the PUTs of a key queue: none is refused, and no lock is left behind.
    assert statuses.count(201) == 1 and statuses.count(200) == 19, statuses
    assert len(api.server.app[keys.KEY_LOCKS]) == 0
    assert len({body["schedule_id"] for _, body in answered}) == 1  # one schedule for the key
    live = await ok(await api.get(path, headers=key))
    assert live["payload"] == answered[-1][1]["payload"]  # the last version answered is the live one
    start = datetime.now(UTC) - timedelta(minutes=1)
    listed = await ok(
        await api.get(
            "/v1/schedules",
            params={"from": start.isoformat(), "to": (start + timedelta(hours=2)).isoformat(), "status": "scheduled"},
            headers=key,
        )
    )
    assert [s["schedule_id"] for s in listed["schedules"]] == [live["schedule_id"]]


async def test_guard_and_pause(api: Api, register: Register) -> None:
    _, key = await register()
    soon = await ok(await api.put("/v1/schedules/by-key/soon", json=schedule_body(delay_s=1), headers=key), 201)
    resp = await api.put("/v1/schedules/by-key/soon", json=schedule_body(delay_s=600), headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "fire_imminent"
    assert (await ok(await api.get("/v1/schedules/by-key/soon", headers=key)))["fire_id"] == soon["fire_id"]
    paused = await ok(await api.put("/v1/schedules/by-key/paused", json=schedule_body(), headers=key), 201)
    await ok(await api.post(f"/v1/schedules/{paused['schedule_id']}/pause", headers=key))
    resp = await api.put("/v1/schedules/by-key/paused", json=schedule_body(), headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "schedule_paused"


async def test_recurring_by_key(api: Api, register: Register) -> None:
    _, key = await register()
    path = "/v1/schedules/by-key/nightly"
    first = await ok(await api.put(path, json=schedule_body(delay_s=None, cron="0 3 * * *"), headers=key), 201)
    second = await ok(await api.put(path, json=schedule_body(delay_s=None, cron="0 4 * * *"), headers=key))
    assert second["schedule_id"] == first["schedule_id"] and second["recurrence"]["cron"] == "0 4 * * *"


async def test_tenants_and_hostile_keys(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    await ok(await api.put("/v1/schedules/by-key/mine", json=schedule_body(), headers=key), 201)
    assert (await api.get("/v1/schedules/by-key/mine", headers=other)).status == 404
    assert (await api.delete("/v1/schedules/by-key/mine", headers=other)).status == 404
    theirs = await ok(await api.put("/v1/schedules/by-key/mine", json=schedule_body(), headers=other), 201)
    mine = await ok(await api.get("/v1/schedules/by-key/mine", headers=key))
    assert theirs["schedule_id"] != mine["schedule_id"]  # the same key, another tenant's own schedule
    assert (await api.get("/v1/schedules/by-key/unknown", headers=key)).status == 404
    for bad in ("k" * 129, "caf%C3%A9", "%F0%9F%92%A9", "a%20b", "a%0A", "semi;colon"):
        for method in ("put", "get", "delete"):
            resp = await getattr(api, method)(f"/v1/schedules/by-key/{bad}", json=schedule_body(), headers=key)
            assert resp.status == 400, (bad, method, await resp.text())
            assert (await resp.json())["error"]["field"] == "key"
    ok_key = "A-z0.9_~:@" + "x" * 118
    await ok(await api.put(f"/v1/schedules/by-key/{ok_key}", json=schedule_body(), headers=key), 201)
    resp = await api.put("/v1/schedules/by-key/body", json={"delay_s": "soon"}, headers=key)
    assert resp.status == 400 and (await resp.json())["error"]["field"] == "delay_s"
    resp = await api.put("/v1/schedules/by-key/x", data=b"{", headers={**key, "Content-Type": "application/json"})
    assert resp.status == 400
    assert (await api.put("/v1/schedules/by-key/x", json=schedule_body())).status == 401
    assert (await api.get("/v1/schedules/by-key/runs", headers=key)).status == 404  # a key, not a schedule id
