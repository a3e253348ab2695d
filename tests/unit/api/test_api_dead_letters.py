"""Dead letters over the API: list (filters, paging), get, redrive one (once) or a page of them, and
tenant isolation and hostile ids, on the in-memory store."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema import timing
from tickd.schema.model import DeadLetter, FireOutcome, Status
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


async def failed(api: Api, store: Store, key: dict[str, str], client_id: str, ago_s: float = 60) -> DeadLetter:
    """A schedule created over the API whose fire then failed for good: its dead letter."""
    resp = await api.post("/v1/schedules", json=schedule_body(), headers=key)
    assert resp.status == 201, await resp.text()
    s = await store.get_schedule(client_id, uuid.UUID((await resp.json())["schedule_id"]))
    assert s is not None
    failed_at = timing.truncate_ms(datetime.now(UTC) - timedelta(seconds=ago_s))
    await store.record_outcomes(
        [FireOutcome(client_id, s.schedule_id, s.location, Status.FAILED, 3, failed_at, "HTTP 500")]
    )
    letter = DeadLetter(client_id, s.schedule_id, s.fire_id, failed_at, 3, "HTTP 500", s.callback, s.payload)
    await store.add_dead_letter(letter)
    return letter


def letter_id(letter: DeadLetter) -> str:
    return f"{timing.to_epoch_ms(letter.failed_at)}-{letter.schedule_id}"


async def body(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json()


async def test_list_get_and_filter(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    old = await failed(api, store, key, client_id, ago_s=3600)
    new = await failed(api, store, key, client_id, ago_s=60)
    listed = await body(await api.get("/v1/dead-letters", headers=key))
    assert [d["dead_letter_id"] for d in listed["dead_letters"]] == [letter_id(new), letter_id(old)]
    # A listing reads no payloads (README: Dead letters); GET of one dead letter shows it.
    assert listed["next_cursor"] is None and "payload" not in listed["dead_letters"][0]
    one = await body(await api.get(f"/v1/dead-letters?schedule_id={old.schedule_id}", headers=key))
    assert [d["fire_id"] for d in one["dead_letters"]] == [old.fire_id]
    since = (datetime.now(UTC) - timedelta(minutes=30)).isoformat()
    recent = await body(await api.get("/v1/dead-letters", params={"from": since}, headers=key))
    assert [d["fire_id"] for d in recent["dead_letters"]] == [new.fire_id]
    got = await body(await api.get(f"/v1/dead-letters/{letter_id(old)}", headers=key))
    assert got["fire_id"] == old.fire_id and got["redriven_at"] is None and got["attempts"] == 3
    assert got["payload"] == {"order": 42}


async def test_paging(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    letters = [await failed(api, store, key, client_id, ago_s=100 - i) for i in range(3)]
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):
        query = {"limit": "1", **({"cursor": cursor} if cursor else {})}
        page = await body(await api.get("/v1/dead-letters", params=query, headers=key))
        seen += [d["fire_id"] for d in page["dead_letters"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [letter.fire_id for letter in reversed(letters)]


async def test_redrive_keeps_the_fire_id_once(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    letter = await failed(api, store, key, client_id)
    path = f"/v1/dead-letters/{letter_id(letter)}/redrive"
    first = await body(await api.post(path, headers=key))
    assert first["redriven_at"] is not None and first["redriven_due_at"] is not None
    schedule = await body(await api.get(f"/v1/schedules/{letter.schedule_id}", headers=key))
    assert schedule["status"] == "scheduled" and schedule["fire_id"] == letter.fire_id
    assert schedule["due_at"] == first["redriven_due_at"] and schedule["attempts"] == 0
    again = await body(await api.post(path, json={"at": "2030-01-01T00:00:00Z"}, headers=key))
    assert again == first  # the same redrive; no second fire
    assert await body(await api.get(f"/v1/schedules/{letter.schedule_id}", headers=key)) == schedule


async def test_redrive_at_a_later_time(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    letter = await failed(api, store, key, client_id)
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    path = f"/v1/dead-letters/{letter_id(letter)}/redrive"
    done = await body(await api.post(path, json={"at": at.isoformat()}, headers=key))
    assert datetime.fromisoformat(done["redriven_due_at"]) == at
    schedule = await body(await api.get(f"/v1/schedules/{letter.schedule_id}", headers=key))
    assert datetime.fromisoformat(schedule["due_at"]) == at


async def test_redrive_a_page_with_a_cursor(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    letters = [await failed(api, store, key, client_id, ago_s=100 - i) for i in range(3)]
    first = await body(await api.post("/v1/dead-letters/redrive?limit=2", headers=key))
    assert len(first["redriven"]) == 2 and first["errors"] == [] and first["next_cursor"]
    rest = await body(await api.post(f"/v1/dead-letters/redrive?limit=2&cursor={first['next_cursor']}", headers=key))
    assert len(rest["redriven"]) == 1 and rest["next_cursor"] is None
    assert {d["fire_id"] for d in first["redriven"] + rest["redriven"]} == {letter.fire_id for letter in letters}
    none_left = await body(await api.post("/v1/dead-letters/redrive", headers=key))
    assert none_left == {"redriven": [], "errors": [], "next_cursor": None}


async def test_redrive_many_at_a_later_time_picks_letters_by_when_they_failed(
    api: Api, store: Store, register: Register
) -> None:
    """The default range is the last 7 days before now, not before ``at`` (found by the SDK's tests: with
    ``at`` over a week ahead, nothing was redriven)."""
    client_id, key = await register()
    letter = await failed(api, store, key, client_id)
    at = (datetime.now(UTC) + timedelta(days=20)).replace(microsecond=0).isoformat()
    done = await body(
        await api.post(f"/v1/dead-letters/redrive?schedule_id={letter.schedule_id}", json={"at": at}, headers=key)
    )
    assert [d["fire_id"] for d in done["redriven"]] == [letter.fire_id] and done["errors"] == []
    assert datetime.fromisoformat(done["redriven"][0]["redriven_due_at"]) == datetime.fromisoformat(at)


async def test_tenants_and_hostile_inputs(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    _, other = await register()
    letter = await failed(api, store, key, client_id)
    lid = letter_id(letter)
    assert (await api.get(f"/v1/dead-letters/{lid}", headers=other)).status == 404
    assert (await api.post(f"/v1/dead-letters/{lid}/redrive", headers=other)).status == 404
    assert (await body(await api.get("/v1/dead-letters", headers=other)))["dead_letters"] == []
    assert (await body(await api.post("/v1/dead-letters/redrive", headers=other)))["redriven"] == []
    for bad in ("nope", "1-2", f"99999999999999999-{letter.schedule_id}", f"{lid}x", "%F0%9F%92%A9"):
        resp = await api.get(f"/v1/dead-letters/{bad}", headers=key)
        assert resp.status == 400, (bad, await resp.text())
    assert (await api.get(f"/v1/dead-letters/999999999999999-{letter.schedule_id}", headers=key)).status == 404
    cases = [
        ({"cursor": "!!"}, "cursor"),
        ({"cursor": "AAAA"}, "cursor"),
        ({"schedule_id": "x"}, "schedule_id"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "to"),
        ({"from": "yesterday"}, "from"),
        ({"limit": "0"}, "limit"),
    ]
    for query, field in cases:
        resp = await api.get("/v1/dead-letters", params=query, headers=key)
        assert resp.status in (400, 422) and (await resp.json())["error"]["field"] == field, query
    resp = await api.post("/v1/dead-letters/redrive", params={"limit": "101"}, headers=key)
    assert resp.status == 400 and (await resp.json())["error"]["field"] == "limit"
    resp = await api.post(f"/v1/dead-letters/{lid}/redrive", json={"at": "soon"}, headers=key)
    assert resp.status == 400 and (await resp.json())["error"]["field"] == "at"
    resp = await api.post(f"/v1/dead-letters/{lid}/redrive", json={"when": 1}, headers=key)
    assert resp.status == 400
    resp = await api.post(f"/v1/dead-letters/{lid}/redrive", json={"at": "9999-12-31T23:59:59Z"}, headers=key)
    assert resp.status == 422 and (await resp.json())["error"]["code"] == "out_of_range"
    assert (await body(await api.get(f"/v1/dead-letters/{lid}", headers=key)))["redriven_at"] is None
    oldest = await body(
        await api.get(
            "/v1/dead-letters", params={"from": "0001-01-01T00:00:00Z", "to": "0001-01-02T00:00:00Z"}, headers=key
        )
    )
    assert oldest["dead_letters"] == []


@pytest.mark.parametrize(
    "path", ["/v1/dead-letters?to=0.5", "/v1/dead-letters?from=1e3", "/v1/schedules?from=0&to=0.5"]
)
async def test_a_time_in_a_query_is_rfc3339_or_whole_epoch_seconds(api: Api, register: Register, path: str) -> None:
    _, key = await register()
    resp = await api.get(path, headers=key)
    body = await resp.json()
    assert resp.status == 400, body
    assert body["error"]["field"] in ("from", "to")
