"""Issue 27, debounce, over the API (in-memory store): ``PUT /v1/schedules/by-key/{key}`` with
``debounce`` pushes the key's pending fire back with each PUT (the latest payload), caps it at
``max_wait_s`` after the burst's first PUT, takes PUTs inside the mutation guard (where a plain PUT is
409 ``fire_imminent``), fires a leading edge at once, and refuses every bad debounce by name."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema.model import FireOutcome, Status
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


def body(window_s: float, payload: Any, **debounce: Any) -> dict[str, Any]:
    return schedule_body(delay_s=None, payload=payload, debounce={"window_s": window_s, **debounce})


def at(view: dict[str, Any], field: str = "fire_at") -> datetime:
    return datetime.fromisoformat(view[field])


async def test_each_put_pushes_the_pending_fire_back_with_the_latest_payload(api: Api, register: Register) -> None:
    _, key = await register()
    path = "/v1/schedules/by-key/cart-7"
    before = datetime.now(UTC)
    first = await ok(await api.put(path, json=body(30, {"items": 1}), headers=key), 201)
    assert first["debounce"] == {
        "window_s": 30.0,
        "edge": "trailing",
        "first_put_at": first["debounce"]["first_put_at"],
        "last_put_at": first["debounce"]["first_put_at"],
    }
    assert timedelta(seconds=29) < at(first) - before < timedelta(seconds=31)
    second = await ok(await api.put(path, json=body(30, {"items": 2}), headers=key))
    assert second["schedule_id"] == first["schedule_id"] and second["payload"] == {"items": 2}
    assert at(second) >= at(first) and second["fire_id"] != first["fire_id"]
    assert second["debounce"]["first_put_at"] == first["debounce"]["first_put_at"]
    assert at(second["debounce"], "last_put_at") == at(second) - timedelta(seconds=30)
    assert await ok(await api.get(path, headers=key)) == second


async def test_max_wait_caps_the_pending_fire_at_the_bursts_first_put(api: Api, register: Register) -> None:
    _, key = await register()
    path = "/v1/schedules/by-key/capped"
    first = await ok(await api.put(path, json=body(30, 1, max_wait_s=30), headers=key), 201)
    previous = first
    for n in range(2, 5):
        later = await ok(await api.put(path, json=body(30, n, max_wait_s=30), headers=key))
        # At the cap: a millisecond after the version it replaces (never its fire time, nor further).
        assert at(later) == at(previous) + timedelta(milliseconds=1), (previous, later)
        assert later["fire_id"] != previous["fire_id"]
        assert later["payload"] == n and later["debounce"]["max_wait_s"] == 30.0
        previous = later
    assert at(previous) - at(first) == timedelta(milliseconds=3)


async def test_puts_inside_the_mutation_guard_are_taken(api: Api, register: Register) -> None:
    """A 1 s window is inside the 2 s guard: a plain by-key PUT there is 409 fire_imminent; a debounced
    one moves the fire (the poller reads a debounced row again before it sends it)."""
    _, key = await register()
    plain = "/v1/schedules/by-key/plain"
    await ok(await api.put(plain, json=schedule_body(delay_s=1), headers=key), 201)
    resp = await api.put(plain, json=schedule_body(delay_s=1), headers=key)
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "fire_imminent"

    path = "/v1/schedules/by-key/typing"
    first = await ok(await api.put(path, json=body(1, "a"), headers=key), 201)
    views = [await ok(await api.put(path, json=body(1, text), headers=key)) for text in ("ab", "abc")]
    assert [v["schedule_id"] for v in views] == [first["schedule_id"]] * 2 and views[-1]["payload"] == "abc"
    assert at(views[-1]) >= at(views[0]) >= at(first)
    # Cancelling it is taken inside the guard too.
    assert (await ok(await api.delete(path, headers=key)))["status"] == "cancelled"


async def test_a_put_after_the_fire_went_out_starts_a_new_burst(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    path = "/v1/schedules/by-key/burst"
    first = await ok(await api.put(path, json=body(5, 1), headers=key), 201)
    fired = await store.get_schedule(client_id, uuid.UUID(first["schedule_id"]))
    assert fired is not None
    done = FireOutcome(client_id, fired.schedule_id, fired.location, Status.SUCCEEDED, 1, datetime.now(UTC))
    await store.record_outcomes([done])
    second = await ok(await api.put(path, json=body(5, 2), headers=key), 201)
    assert second["schedule_id"] != first["schedule_id"] and second["payload"] == 2
    assert second["debounce"]["first_put_at"] == second["debounce"]["last_put_at"] != first["debounce"]["first_put_at"]


async def test_leading_edge_fires_the_first_put_at_once(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    path = "/v1/schedules/by-key/lead"
    first = await ok(await api.put(path, json=body(10, 1, edge="leading"), headers=key), 201)
    assert at(first) == at(first["debounce"], "first_put_at") and first["debounce"]["edge"] == "leading"
    fired = await store.get_schedule(client_id, uuid.UUID(first["schedule_id"]))
    assert fired is not None
    await store.record_outcomes(
        [FireOutcome(client_id, fired.schedule_id, fired.location, Status.SUCCEEDED, 1, datetime.now(UTC))]
    )
    rest = await ok(await api.put(path, json=body(10, 2, edge="leading"), headers=key), 201)
    assert at(rest) - at(rest["debounce"], "last_put_at") == timedelta(seconds=10)  # the burst's rest, trailing


@pytest.mark.parametrize(
    ("debounce", "extra", "status", "field"),
    [
        ({"window_s": 0.5}, {}, 400, "debounce.window_s"),
        ({"window_s": 86_401}, {}, 400, "debounce.window_s"),
        ({"window_s": "5"}, {}, 400, "debounce.window_s"),
        ({}, {}, 400, "debounce.window_s"),
        ({"window_s": 5, "edge": "middle"}, {}, 400, "debounce.edge"),
        ({"window_s": 5, "max_wait_s": 604_801}, {}, 400, "debounce.max_wait_s"),
        ({"window_s": 5, "max_wait_s": 2}, {}, 422, "debounce.max_wait_s"),
        ({"window_s": 5, "extra": 1}, {}, 400, "debounce.extra"),
        ({"window_s": 5}, {"delay_s": 10}, 422, "delay_s"),
        ({"window_s": 5}, {"delay_s": None, "cron": "* * * * *"}, 422, "cron"),
        ({"window_s": 5}, {"events": 3}, 422, "events"),
    ],
)
async def test_a_bad_debounce_is_refused_by_name_with_nothing_written(
    api: Api, register: Register, debounce: dict[str, Any], extra: dict[str, Any], status: int, field: str
) -> None:
    _, key = await register()
    sent = {**schedule_body(delay_s=None, debounce=debounce), **extra}
    sent = {k: v for k, v in sent.items() if v is not None}
    resp = await api.put("/v1/schedules/by-key/bad", json=sent, headers=key)
    assert resp.status == status, await resp.text()
    assert (await resp.json())["error"]["field"] == field
    assert (await api.get("/v1/schedules/by-key/bad", headers=key)).status == 404


async def test_debounce_is_only_for_by_key_puts(api: Api, register: Register) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=body(5, 1), headers=key)
    assert resp.status == 400 and (await resp.json())["error"]["field"] == "debounce"
    batch = await ok(await api.post("/v1/schedules/batch", json={"schedules": [body(5, 1)]}, headers=key), 200)
    assert batch["results"][0]["error"]["field"] == "debounce", batch
