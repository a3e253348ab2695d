"""Issue 27, missed fires, through the API: a recurring schedule's policy on create, PATCH and by-key, the
client's default in its settings, and refusals naming the field before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body

pytest_plugins = ["tests.integration.api_fixtures"]

EVERY_MINUTE = {"delay_s": None, "every": "1m"}


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_a_schedule_keeps_its_policy_and_a_patch_changes_or_clears_it(api: Api, register: Register) -> None:
    _, key = await register()
    body = schedule_body(**EVERY_MINUTE, missed={"policy": "skip", "deadline": "90s"})
    created = await ok(await api.post("/v1/schedules", json=body, headers=key), 201)
    assert created["recurrence"]["missed"] == {"policy": "skip", "deadline_s": 90}
    path = f"/v1/schedules/{created['schedule_id']}"
    once = await ok(await api.patch(path, json={"missed": {"policy": "fire_once"}}, headers=key))
    assert once["recurrence"]["missed"] == {"policy": "fire_once", "deadline_s": 60}  # the default deadline
    kept = await ok(await api.patch(path, json={"every": "2m"}, headers=key))
    assert kept["recurrence"]["missed"] == {"policy": "fire_once", "deadline_s": 60}  # a rule change keeps it
    cleared = await ok(await api.patch(path, json={"missed": None}, headers=key))
    assert "missed" not in cleared["recurrence"]  # the client's default applies
    keyed = await ok(await api.put("/v1/schedules/by-key/k1", json=body, headers=key), 201)
    assert keyed["recurrence"]["missed"] == {"policy": "skip", "deadline_s": 90}


async def test_the_clients_default_is_in_its_settings(api: Api, register: Register) -> None:
    _, key = await register()
    assert (await ok(await api.get("/v1/settings", headers=key)))["missed"] == {
        "policy": "fire_all",
        "deadline_s": None,
    }
    changed = await ok(
        await api.patch("/v1/settings", json={"missed": {"policy": "skip", "deadline": "5m"}}, headers=key)
    )
    assert changed["missed"] == {"policy": "skip", "deadline_s": 300}
    assert (await ok(await api.get("/v1/settings", headers=key)))["missed"] == {"policy": "skip", "deadline_s": 300}
    reset = await ok(await api.patch("/v1/settings", json={"missed": None}, headers=key))
    assert reset["missed"] == {"policy": "fire_all", "deadline_s": None}


@pytest.mark.parametrize(
    ("missed", "status", "field"),
    [
        ({"policy": "later"}, 400, "missed.policy"),
        ({"policy": "fire_all", "deadline": "60s"}, 422, "missed.deadline"),
        ({"policy": "skip", "deadline": "8d"}, 422, "missed.deadline"),
        ({"policy": "skip", "deadline": "soon"}, 400, "missed.deadline"),
        ({"policy": "skip", "when": "now"}, 400, "missed.when"),
        ("skip", 400, "missed"),
    ],
)
async def test_bad_policies_are_refused_naming_the_field(
    api: Api, register: Register, missed: Any, status: int, field: str
) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(**EVERY_MINUTE, missed=missed), headers=key)
    assert resp.status == status, await resp.text()
    assert (await resp.json())["error"]["field"] == field
    listed = await ok(await api.get("/v1/settings", headers=key))
    assert listed["missed"]["policy"] == "fire_all"
    settings = await api.patch("/v1/settings", json={"missed": missed}, headers=key)
    assert settings.status == status and (await settings.json())["error"]["field"] == field


async def test_a_one_time_schedule_takes_no_policy(api: Api, register: Register) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(missed={"policy": "skip"}), headers=key)
    assert resp.status == 422 and (await resp.json())["error"]["field"] == "missed"
