from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import (
    ADMIN,
    Api,
    Register,
    Rows,
    http_callback,
    schedule_body,
    serve,
    with_settings,
)
from tickd.schema.model import FireOutcome, Status
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def create(api: Api, key: dict[str, str], **changes: Any) -> dict[str, Any]:
    resp = await api.post("/v1/schedules", json=schedule_body(**changes), headers=key)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def test_create_and_get(api: Api, register: Register) -> None:
    _, key = await register()
    fire_at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=123000)
    headers = {"type": "http", "url": "https://example.com/x", "method": "put", "headers": {"X-A": "1"}}
    created = await create(api, key, delay_s=None, fire_at=rfc3339(fire_at), callback=headers)
    assert created["status"] == "scheduled"
    assert datetime.fromisoformat(created["fire_at"]) == fire_at

    got = await (await api.get(f"/v1/schedules/{created['schedule_id']}", headers=key)).json()
    assert got["payload"] == {"order": 42} and got["attempts"] == 0 and got["fired_at"] is None
    assert got["callback"]["method"] == "PUT" and got["callback"]["headers"] == {"X-A": "1"}
    assert got["last_error"] is None and datetime.fromisoformat(got["fire_at"]) == fire_at


async def test_epoch_and_past_times(api: Api, register: Register) -> None:
    _, key = await register()
    epoch = int(datetime.now(UTC).timestamp()) + 600
    body = await create(api, key, delay_s=None, fire_at=epoch)
    assert datetime.fromisoformat(body["fire_at"]).timestamp() == epoch
    past = await create(api, key, delay_s=None, fire_at="2020-01-01T00:00:00+02:00")
    got = await (await api.get(f"/v1/schedules/{past['schedule_id']}", headers=key)).json()
    assert got["fire_at"].startswith("2019-12-31T22:00:00")
    assert datetime.fromisoformat(got["due_at"]) > datetime.now(UTC) - timedelta(minutes=1)


async def test_kafka_topics_must_be_granted(api: Api, register: Register) -> None:
    _, key = await register(kafka_topics=["orders.*", "billing"])
    for topic in ("orders.fired", "billing"):
        await create(api, key, callback={"type": "kafka", "topic": topic})
    for topic in ("orders", "billingx", "other.topic"):
        resp = await api.post(
            "/v1/schedules", json=schedule_body(callback={"type": "kafka", "topic": topic}), headers=key
        )
        error = (await resp.json())["error"]
        assert resp.status == 422 and error["code"] == "topic_not_allowed" and error["field"] == "callback.topic"


async def test_cancel_then_cancel_again(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key)
    url = f"/v1/schedules/{created['schedule_id']}"
    first = await api.delete(url, headers=key)
    assert first.status == 200 and (await first.json())["status"] == "cancelled"
    again = await api.delete(url, headers=key)
    assert again.status == 200 and (await again.json())["status"] == "cancelled"
    assert (await (await api.get(url, headers=key)).json())["status"] == "cancelled"
    patched = await api.patch(url, json={"delay_s": 10}, headers=key)
    assert patched.status == 409 and (await patched.json())["error"]["code"] == "already_cancelled"


async def test_reschedule_and_change_payload(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(api, key)
    url = f"/v1/schedules/{created['schedule_id']}"
    new_time = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    resp = await api.patch(url, json={"fire_at": rfc3339(new_time), "payload": [1, 2]}, headers=key)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert datetime.fromisoformat(body["fire_at"]) == new_time and body["payload"] == [1, 2]
    got = await (await api.get(url, headers=key)).json()
    assert got == body

    cb = await api.patch(url, json={"callback": http_callback(url="http://127.0.0.1:9/other")}, headers=key)
    assert (await cb.json())["callback"]["url"] == "http://127.0.0.1:9/other"
    schedule = await store.get_schedule(client_id, uuid.UUID(created["schedule_id"]))
    assert schedule is not None and schedule.version == 3


async def test_mutation_guard(api: Api, register: Register) -> None:
    _, key = await register()
    soon = await create(api, key, delay_s=1)
    url = f"/v1/schedules/{soon['schedule_id']}"
    for resp in (await api.delete(url, headers=key), await api.patch(url, json={"delay_s": 100}, headers=key)):
        assert resp.status == 409 and (await resp.json())["error"]["code"] == "fire_imminent"


async def test_fired_schedule_cannot_change(api: Api, register: Register, store: Store) -> None:
    client_id, key = await register()
    created = await create(api, key)
    schedule = await store.get_schedule(client_id, uuid.UUID(created["schedule_id"]))
    assert schedule is not None
    fired = datetime.now(UTC).replace(microsecond=0)
    outcome = FireOutcome(client_id, schedule.schedule_id, schedule.location, Status.SUCCEEDED, 1, fired)
    await store.record_outcomes([outcome])
    url = f"/v1/schedules/{created['schedule_id']}"
    got = await (await api.get(url, headers=key)).json()
    assert got["status"] == "succeeded" and got["attempts"] == 1 and datetime.fromisoformat(got["fired_at"]) == fired
    for resp in (await api.delete(url, headers=key), await api.patch(url, json={"delay_s": 100}, headers=key)):
        assert resp.status == 409 and (await resp.json())["error"]["code"] == "already_fired"


async def test_concurrent_changes_conflict(api: Api, register: Register) -> None:
    _, key = await register()
    created = await create(api, key)
    url = f"/v1/schedules/{created['schedule_id']}"
    responses = await asyncio.gather(*(api.patch(url, json={"delay_s": 500 + i}, headers=key) for i in range(4)))
    statuses = sorted(r.status for r in responses)
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 409}
    for r in responses:
        if r.status == 409:
            assert (await r.json())["error"]["code"] == "conflict"


async def test_tenant_isolation(api: Api, register: Register) -> None:
    _, key_a = await register()
    _, key_b = await register()
    b_schedule = await create(api, key_b)
    url = f"/v1/schedules/{b_schedule['schedule_id']}"
    assert (await api.get(url, headers=key_a)).status == 404
    assert (await api.delete(url, headers=key_a)).status == 404
    assert (await api.patch(url, json={"delay_s": 50}, headers=key_a)).status == 404
    start = datetime.now(UTC) - timedelta(minutes=1)
    query = {"from": rfc3339(start), "to": rfc3339(start + timedelta(hours=2))}
    listed = await (await api.get("/v1/schedules", params=query, headers=key_a)).json()
    for _ in range(10):  # a page reads a bounded number of partitions: follow the cursor to the end
        assert listed["schedules"] == []
        if listed["next_cursor"] is None:
            break
        listed = await (
            await api.get("/v1/schedules", params={**query, "cursor": listed["next_cursor"]}, headers=key_a)
        ).json()
    assert listed == {"schedules": [], "next_cursor": None}
    assert (await (await api.get(url, headers=key_b)).json())["status"] == "scheduled"


async def test_list_pages_in_order_and_filters_status(api: Api, register: Register) -> None:
    _, key = await register(poller_count=3)
    start = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=10)
    ids = []
    for i in range(7):
        ids.append(
            (await create(api, key, delay_s=None, fire_at=rfc3339(start + timedelta(seconds=50 * i))))["schedule_id"]
        )
    await api.delete(f"/v1/schedules/{ids[3]}", headers=key)
    await api.patch(f"/v1/schedules/{ids[0]}", json={"fire_at": rfc3339(start + timedelta(seconds=1000))}, headers=key)

    query = {"from": rfc3339(start), "to": rfc3339(start + timedelta(hours=1)), "limit": "2"}
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        page = await (
            await api.get("/v1/schedules", params={**query, **({"cursor": cursor} if cursor else {})}, headers=key)
        ).json()
        seen += [s["schedule_id"] for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [*ids[1:], ids[0]]  # the moved one only once, at its new time

    cancelled = await (await api.get("/v1/schedules", params={**query, "status": "cancelled"}, headers=key)).json()
    assert [s["schedule_id"] for s in cancelled["schedules"]] == [ids[3]]


async def test_idempotent_create(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    headers = {**key, "Idempotency-Key": "order-42-reminder"}
    first = await api.post("/v1/schedules", json=schedule_body(), headers=headers)
    second = await api.post("/v1/schedules", json=schedule_body(), headers=headers)
    assert first.status == 201 and second.status == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert (await first.json())["schedule_id"] == (await second.json())["schedule_id"]
    assert await rows(client_id) == {"schedules": 1, "refs": 1, "idempotency": 1}


async def test_batch_with_good_and_bad_items(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    items = [
        schedule_body(),
        schedule_body(delay_s="soon"),
        schedule_body(callback={"type": "kafka", "topic": "nope"}),
        schedule_body(delay_s=None),
        schedule_body(payload={"n": 2}),
        {"bogus": 1},
    ]
    resp = await api.post("/v1/schedules/batch", json={"schedules": items}, headers=key)
    assert resp.status == 200
    results = (await resp.json())["results"]
    assert [r["index"] for r in results] == list(range(6))
    good = [r for r in results if "schedule_id" in r]
    assert [r["index"] for r in good] == [0, 4]
    assert [(r["error"]["code"], r["error"]["field"]) for r in results if "error" in r] == [
        ("wrong_type", "delay_s"),
        ("topic_not_allowed", "callback.topic"),
        ("missing_field", "fire_at"),
        ("unknown_field", "bogus"),
    ]
    rows = await rows(client_id)
    assert rows["refs"] == 2 and rows["schedules"] == 2
    got = await (await api.get(f"/v1/schedules/{good[1]['schedule_id']}", headers=key)).json()
    assert got["payload"] == {"n": 2}


async def test_large_batch(api: Api, register: Register) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()] * 1000}, headers=key)
    results = (await resp.json())["results"]
    assert resp.status == 200 and len(results) == 1000 and all("schedule_id" in r for r in results)
    too_many = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()] * 1001}, headers=key)
    assert too_many.status == 400 and (await too_many.json())["error"]["field"] == "schedules"


async def test_rate_limit(api_settings: ApiSettings, store: Store) -> None:
    settings = with_settings(api_settings, create_rate_per_s=0.5, create_burst=2)
    async for api in serve(settings, store):
        client_id = f"t{uuid.uuid4().hex[:12]}"
        resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
        key = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
        statuses = [(await api.post("/v1/schedules", json=schedule_body(), headers=key)).status for _ in range(3)]
        assert statuses == [201, 201, 429]
        limited = await api.post("/v1/schedules", json=schedule_body(), headers=key)
        assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1
        assert (await limited.json())["error"]["code"] == "rate_limited"


async def test_private_targets_denied_unless_allowed(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, callback_allow_private=False), store):
        client_id = f"t{uuid.uuid4().hex[:12]}"
        resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
        key = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
        for url in (
            "http://127.0.0.1/x",
            "http://10.1.2.3/",
            "http://169.254.169.254/latest",
            "http://[::1]:80/",
            "http://localhost:8080/",
            "http://192.168.0.1/",
            "http://[::ffff:127.0.0.1]/",
        ):
            bad = await api.post("/v1/schedules", json=schedule_body(callback=http_callback(url=url)), headers=key)
            error = (await bad.json())["error"]
            assert bad.status == 422 and error["code"] == "forbidden_target" and error["field"] == "callback.url", url
        ok = await api.post(
            "/v1/schedules", json=schedule_body(callback=http_callback(url="https://8.8.8.8/")), headers=key
        )
        assert ok.status == 201


async def test_deactivated_client_can_still_read_and_cancel(api: Api, register: Register) -> None:
    client_id, key = await register()
    created = await create(api, key)
    await api.patch(f"/v1/clients/{client_id}", json={"active": False}, headers=ADMIN)
    url = f"/v1/schedules/{created['schedule_id']}"
    assert (await api.get(url, headers=key)).status == 200
    assert (await api.delete(url, headers=key)).status == 200
    batch = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()]}, headers=key)
    assert batch.status == 403
