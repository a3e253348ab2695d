"""Trigger now over the API (in-memory store): one extra fire with a fire id of its own, a scheduled row
a poller reads, the schedule's timeline untouched; Idempotency-Key; a trigger's dead letter redriven to
the trigger; hostile inputs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema import timing
from tickd.schema.model import DeadLetter, FireOutcome, Status
from tickd.schema.store import Store
from tickd.service.routes import schedules as schedule_routes

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def create(api: Api, key: dict[str, str], **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = await ok(await api.post("/v1/schedules", json=schedule_body(**changes), headers=key), 201)
    return body


async def test_trigger_a_one_time_schedule(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    parent = await create(api, key, delay_s=3600)
    path = f"/v1/schedules/{parent['schedule_id']}"
    trigger = await ok(await api.post(path + "/trigger", headers=key), 201)
    assert trigger["trigger_of"] == parent["schedule_id"] and trigger["schedule_id"] != parent["schedule_id"]
    assert trigger["fire_id"].startswith(parent["schedule_id"] + ":") and trigger["fire_id"] != parent["fire_id"]
    assert trigger["status"] == "scheduled" and trigger["payload"] == parent["payload"]
    assert trigger["callback"] == parent["callback"] and trigger["fire_at"] == trigger["due_at"]
    assert datetime.fromisoformat(trigger["due_at"]) > datetime.now(UTC) - timedelta(seconds=5)
    assert await ok(await api.get(path, headers=key)) == parent  # its timeline is untouched
    got = await ok(await api.get(f"/v1/schedules/{trigger['schedule_id']}", headers=key))
    assert got == trigger
    row = await store.get_schedule(client_id, uuid.UUID(trigger["schedule_id"]))
    assert row is not None
    read = [r async for page in store.read_minute(row.instance, row.location.minute) for r in page]
    assert [(r.fire_id, r.status) for r in read if r.schedule_id == row.schedule_id] == [
        (trigger["fire_id"], Status.SCHEDULED)
    ]
    second = await ok(await api.post(path + "/trigger", headers=key), 201)
    assert second["schedule_id"] != trigger["schedule_id"]  # without a key, each call is a fire


async def test_trigger_a_recurring_schedule_keeps_its_timeline(api: Api, register: Register) -> None:
    _, key = await register()
    parent = await create(api, key, delay_s=None, cron="0 3 * * *")
    trigger = await ok(await api.post(f"/v1/schedules/{parent['schedule_id']}/trigger", headers=key), 201)
    assert "recurrence" not in trigger and trigger["trigger_of"] == parent["schedule_id"]
    assert await ok(await api.get(f"/v1/schedules/{parent['schedule_id']}", headers=key)) == parent


async def test_idempotency_key(api: Api, register: Register) -> None:
    _, key = await register()
    parent = await create(api, key)
    path = f"/v1/schedules/{parent['schedule_id']}/trigger"
    headers = {**key, "Idempotency-Key": "trigger-1"}
    first = await ok(await api.post(path, headers=headers), 201)
    resp = await api.post(path, headers=headers)
    assert resp.headers.get("Idempotent-Replayed") == "true"
    assert (await ok(resp, 200))["schedule_id"] == first["schedule_id"]
    reused = await api.post("/v1/schedules", json=schedule_body(), headers=headers)
    assert reused.status == 422 and (await reused.json())["error"]["code"] == "idempotency_key_reused"
    bad = await api.post(path, headers={**key, "Idempotency-Key": "é" * 3})
    assert bad.status == 400


async def test_a_retry_with_its_key_in_the_same_millisecond_is_a_replay(
    api: Api, register: Register, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both requests derive the same trigger id (parent and millisecond): the second is still told it is
    a replay (CI saw 201 when the two calls shared a millisecond)."""
    _, key = await register()
    parent = await create(api, key)
    at = datetime.now(UTC).replace(microsecond=123000)
    monkeypatch.setattr(schedule_routes, "now", lambda: at)
    headers = {**key, "Idempotency-Key": "same-ms"}
    path = f"/v1/schedules/{parent['schedule_id']}/trigger"
    first = await ok(await api.post(path, headers=headers), 201)
    again = await api.post(path, headers=headers)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert (await ok(again, 200))["schedule_id"] == first["schedule_id"]


async def test_a_triggers_dead_letter_is_redriven_to_it(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    parent = await create(api, key, delay_s=3600)
    trigger = await ok(await api.post(f"/v1/schedules/{parent['schedule_id']}/trigger", headers=key), 201)
    row = await store.get_schedule(client_id, uuid.UUID(trigger["schedule_id"]))
    assert row is not None
    failed_at = timing.truncate_ms(datetime.now(UTC))
    await store.record_outcomes([FireOutcome(client_id, row.schedule_id, row.location, Status.FAILED, 3, failed_at)])
    # As the poller writes it: the schedule's id (the row's public id) and the trigger's fire id.
    letter = DeadLetter(client_id, row.public_id, row.fire_id, failed_at, 3, "HTTP 500", row.callback, row.payload)
    await store.add_dead_letter(letter)
    letter_id = f"{timing.to_epoch_ms(failed_at)}-{parent['schedule_id']}"
    await ok(await api.post(f"/v1/dead-letters/{letter_id}/redrive", headers=key))
    again = await ok(await api.get(f"/v1/schedules/{trigger['schedule_id']}", headers=key))
    assert again["status"] == "scheduled" and again["fire_id"] == trigger["fire_id"]
    assert await ok(await api.get(f"/v1/schedules/{parent['schedule_id']}", headers=key)) == parent


async def test_hostile_inputs(api: Api, register: Register) -> None:
    _, key = await register()
    _, other = await register()
    parent = await create(api, key)
    path = f"/v1/schedules/{parent['schedule_id']}/trigger"
    assert (await api.post(path, headers=other)).status == 404
    assert (await api.post(f"/v1/schedules/{uuid.uuid4()}/trigger", headers=key)).status == 404
    assert (await api.post("/v1/schedules/not-a-uuid/trigger", headers=key)).status == 400
    assert (await api.post(path)).status == 401
    await ok(await api.delete(f"/v1/schedules/{parent['schedule_id']}", headers=key))
    resp = await api.post(path, headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "already_cancelled"
