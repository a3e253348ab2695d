"""A schedule whose fire is in retry can always be cancelled or paused (issue 25): the API's mutation
guard (409 ``fire_imminent`` within TICKD_MUTATION_GUARD_S of the due time) does not apply to them,
since the poller reads the schedule again before each retry's attempt. A PATCH still obeys it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema.model import Schedule
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def in_retry(api: Api, store: Store, client_id: str, key: dict[str, str], due_in_s: float) -> Schedule:
    """A one-time schedule whose first attempt failed, its durable retry due in ``due_in_s``."""
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=600), headers=key)
    assert resp.status == 201, await resp.text()
    created: dict[str, Any] = await resp.json()
    schedule = await store.get_schedule(client_id, uuid.UUID(created["schedule_id"]))
    assert schedule is not None
    now = datetime.now(UTC)
    return await store.requeue_schedule(schedule, now + timedelta(seconds=due_in_s), 1, "HTTP 503", now)


@pytest.mark.parametrize("due_in_s", [-5.0, 0.5, 1.5])  # overdue, and within the 2 s guard
async def test_a_schedule_in_retry_is_cancelled_within_the_guard(
    api: Api, register: Register, store: Store, due_in_s: float
) -> None:
    client_id, key = await register()
    retry = await in_retry(api, store, client_id, key, due_in_s)
    resp = await api.delete(f"/v1/schedules/{retry.schedule_id}", headers=key)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["status"] == "cancelled"
    stored = await store.get_schedule(client_id, retry.schedule_id)
    assert stored is not None and stored.status.value == "cancelled" and stored.location == retry.location


@pytest.mark.parametrize("due_in_s", [-5.0, 0.5])
async def test_a_schedule_in_retry_is_paused_within_the_guard(
    api: Api, register: Register, store: Store, due_in_s: float
) -> None:
    client_id, key = await register()
    retry = await in_retry(api, store, client_id, key, due_in_s)
    resp = await api.post(f"/v1/schedules/{retry.schedule_id}/pause", headers=key)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["status"] == "paused"


async def test_a_patch_of_a_schedule_in_retry_still_obeys_the_guard(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    retry = await in_retry(api, store, client_id, key, 0.5)
    resp = await api.patch(f"/v1/schedules/{retry.schedule_id}", json={"delay_s": 100}, headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "fire_imminent"


async def test_a_first_fire_within_the_guard_still_cannot_be_cancelled(api: Api, register: Register) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=1), headers=key)
    created = await resp.json()
    resp = await api.delete(f"/v1/schedules/{created['schedule_id']}", headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "fire_imminent"
