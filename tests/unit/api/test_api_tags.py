"""Tags over the API (in-memory store): set on create, shown, replaced or removed by PATCH without touching
the fire (its fire id and attempts stay), carried by a recurring schedule's next occurrence, listed by
``tag=key=value``; bounds and shapes refused naming the field."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema import model
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


def window() -> dict[str, str]:
    start = datetime.now(UTC) - timedelta(minutes=1)
    return {"from": start.isoformat(), "to": (start + timedelta(hours=2)).isoformat()}


async def test_tags_are_set_shown_replaced_and_removed(api: Api, register: Register) -> None:
    _, key = await register()
    tags = {"team": "billing", "env": "prod"}
    made = await ok(await api.post("/v1/schedules", json=schedule_body(tags=tags), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    assert made["tags"] == tags and (await ok(await api.get(path, headers=key)))["tags"] == tags
    retagged = await ok(await api.patch(path, json={"tags": {"team": "payments"}}, headers=key))
    assert retagged["tags"] == {"team": "payments"}
    # Only the labels changed: the fire is the same one.
    assert (retagged["fire_id"], retagged["due_at"]) == (made["fire_id"], made["due_at"])
    assert retagged["version"] > made["version"]
    kept = await ok(await api.patch(path, json={"payload": {"v": 2}}, headers=key))
    assert kept["tags"] == {"team": "payments"}  # a PATCH without tags keeps them
    cleared = await ok(await api.patch(path, json={"tags": None}, headers=key))
    assert "tags" not in cleared
    assert "tags" not in await ok(await api.post("/v1/schedules", json=schedule_body(), headers=key), 201)


async def test_a_listing_filters_by_tag(api: Api, register: Register) -> None:
    _, key = await register(poller_count=2)
    made = {}
    for n, team in enumerate(["a", "b", "a", "c", "a"]):
        body = schedule_body(delay_s=600 + n, tags={"team": team, "n": str(n)})
        made[n] = (await ok(await api.post("/v1/schedules", json=body, headers=key), 201))["schedule_id"]
    listed = await ok(await api.get("/v1/schedules", params={**window(), "tag": "team=a"}, headers=key))
    assert [s["schedule_id"] for s in listed["schedules"]] == [made[0], made[2], made[4]]
    assert all(s["tags"]["team"] == "a" for s in listed["schedules"])
    none = await ok(await api.get("/v1/schedules", params={**window(), "tag": "team=z"}, headers=key))
    assert none["schedules"] == []
    empty_value = await ok(await api.get("/v1/schedules", params={**window(), "tag": "team="}, headers=key))
    assert empty_value["schedules"] == []


async def test_a_recurring_schedules_next_occurrence_carries_its_tags(
    api: Api, register: Register, store: Store
) -> None:
    client_id, key = await register()
    body = schedule_body(delay_s=None, every="1h", tags={"kind": "report"})
    made = await ok(await api.post("/v1/schedules", json=body, headers=key), 201)
    current = await store.get_schedule(client_id, uuid.UUID(made["schedule_id"]))
    assert current is not None and current.repeat is not None
    # The poller's next occurrence, written as the poller writes it, read back through the API.
    following = model.next_occurrence(current, current.repeat, current.fire_at, datetime.now(UTC), 4).row
    assert following is not None
    await store.chain_schedule(current, following, datetime.now(UTC))
    shown = await ok(await api.get(f"/v1/schedules/{made['schedule_id']}", headers=key))
    assert shown["occurrence"] == 2 and shown["tags"] == {"kind": "report"}


async def test_bad_tags_are_refused_naming_the_field(api: Api, register: Register) -> None:
    _, key = await register()
    too_many = {f"k{n}": "v" for n in range(17)}
    for tags in (too_many, {"Team": "x"}, {"_x": "y"}, {"k": "v" * 129}, {"k": "tab\there"}, {"": "v"}, ["a"]):
        resp = await api.post("/v1/schedules", json=schedule_body(tags=tags), headers=key)
        body = await resp.json()
        assert resp.status == 400 and body["error"]["field"].startswith("tags"), (tags, body)
    for tag in ("team", "Team=a", "=a", "t=" + "v" * 129):
        resp = await api.get("/v1/schedules", params={**window(), "tag": tag}, headers=key)
        assert resp.status == 400 and (await resp.json())["error"]["field"] == "tag", tag


async def test_a_patch_that_removes_every_option_leaves_none_on_the_row(api: Api, register: Register) -> None:
    """Found with tags: a row rewritten in place (the due time unchanged) kept the options a PATCH removed,
    because an insert leaves an empty column unset (so the throttle policy went on applying)."""
    _, key = await register()
    await ok(
        await api.put("/v1/throttle-policies/slow", json={"max_in_flight": 1, "release_timeout_s": 60}, headers=key),
        201,
    )
    made = await ok(await api.post("/v1/schedules", json=schedule_body(throttle="slow"), headers=key), 201)
    path = f"/v1/schedules/{made['schedule_id']}"
    patched = await ok(await api.patch(path, json={"throttle": None}, headers=key))
    assert "throttle" not in patched and patched["due_at"] == made["due_at"]  # the same row, rewritten
    assert "throttle" not in await ok(await api.get(path, headers=key))
    tagged = await ok(await api.post("/v1/schedules", json=schedule_body(tags={"a": "b"}), headers=key), 201)
    await ok(await api.patch(f"/v1/schedules/{tagged['schedule_id']}", json={"tags": None}, headers=key))
    assert "tags" not in await ok(await api.get(f"/v1/schedules/{tagged['schedule_id']}", headers=key))
