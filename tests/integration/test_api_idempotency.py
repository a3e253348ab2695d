"""Idempotency-Key against the real Cassandra: a key is bound to its first request (method, path,
canonical body); the same request again replays the first answer, another one is refused (422); 20
concurrent retries create one schedule; a retry after a first attempt that reserved the key and never
wrote completes it with the same schedule id and fire id; one while the first is in flight gets 409."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register, Rows, schedule_body, with_settings
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import IdempotencyKey
from tickd.service.idempotency import request_digest
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]

WAIT_S = 0.5


@pytest.fixture
def api_settings(api_settings: ApiSettings) -> ApiSettings:
    """The API tests' settings (api_fixtures), waiting briefly for a first request still in flight."""
    return with_settings(api_settings, idempotency_wait_s=WAIT_S, idempotency_takeover_s=30.0)


def _raw(body: dict[str, Any], *, indent: int | None = None, reverse: bool = False) -> bytes:
    ordered = dict(reversed(body.items())) if reverse else body
    return json.dumps(ordered, indent=indent).encode()


async def _post(api: Api, key: dict[str, str], idem: str, raw: bytes) -> tuple[int, dict[str, Any], Any]:
    headers = {**key, "Idempotency-Key": idem, "Content-Type": "application/json"}
    resp = await api.post("/v1/schedules", data=raw, headers=headers)
    return resp.status, await resp.json(), resp.headers


def _ms(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


async def test_a_retry_replays_the_first_answer(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    body = schedule_body(payload={"order": 1, "items": [1, 2]})
    status, first, _ = await _post(api, key, "order-1", _raw(body))
    assert status == 201, first
    # The same request serialised differently (key order, spaces) is the same request.
    status, again, headers = await _post(api, key, "order-1", _raw(body, indent=2, reverse=True))
    assert status == 200 and headers["Idempotent-Replayed"] == "true"
    assert again == first
    assert await rows(client_id) == {"schedules": 1, "refs": 1, "idempotency": 1}


async def test_the_same_key_with_another_body_is_422_naming_the_header(
    api: Api, register: Register, rows: Rows
) -> None:
    client_id, key = await register()
    status, first, _ = await _post(api, key, "k", _raw(schedule_body()))
    assert status == 201
    for other in (schedule_body(payload={"order": 43}), schedule_body(delay_s=7200)):
        status, answer, _ = await _post(api, key, "k", _raw(other))
        assert status == 422, answer
        assert answer["error"]["field"] == "Idempotency-Key"
        assert answer["error"]["code"] == "idempotency_key_reused"
    assert await rows(client_id) == {"schedules": 1, "refs": 1, "idempotency": 1}
    status, again, _ = await _post(api, key, "k", _raw(schedule_body()))
    assert status == 200 and again == first


async def test_twenty_concurrent_retries_create_one_schedule(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    raw = _raw(schedule_body(delay_s=600))
    answers = await asyncio.gather(*(_post(api, key, "burst", raw) for _ in range(20)))
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * 19 + [201], [a[1] for a in answers]
    bodies = [body for _, body, _ in answers]
    assert all(body == bodies[0] for body in bodies)
    assert len({(b["schedule_id"], b["fire_id"]) for b in bodies}) == 1
    assert await rows(client_id) == {"schedules": 1, "refs": 1, "idempotency": 1}


async def test_a_retry_after_a_lost_first_attempt_writes_its_fire(
    api: Api, register: Register, rows: Rows, store: CassandraStore
) -> None:
    """The first attempt reserved the key a minute ago, then timed out before its write: the retry
    writes that schedule, under the reserved id and at the fire time the first attempt computed."""
    client_id, key = await register()
    raw = _raw(schedule_body(delay_s=3600))
    first_at = _ms(datetime.now(UTC) - timedelta(seconds=60))
    reserved = IdempotencyKey(client_id, "lost", uuid.uuid4(), request_digest("POST", "/v1/schedules", raw), first_at)
    assert await store.reserve_idempotency_key(reserved) == reserved
    status, answer, _ = await _post(api, key, "lost", raw)
    assert status == 201, answer
    fire_at = first_at + timedelta(seconds=3600)
    fire_ms = int(fire_at.timestamp() * 1000)
    assert answer["schedule_id"] == str(reserved.schedule_id)
    assert answer["fire_id"] == f"{reserved.schedule_id}:{fire_ms}"
    # Should the first attempt's write land after all, it is the very same row.
    written = await store.get_schedule(client_id, reserved.schedule_id)
    assert written is not None and written.fire_at == fire_at
    await store.create_schedule(written, datetime.now(UTC))
    status, again, _ = await _post(api, key, "lost", raw)
    assert status == 200 and again == answer
    assert await rows(client_id) == {"schedules": 1, "refs": 1, "idempotency": 1}


async def test_a_retry_while_the_first_is_in_flight_is_409_with_retry_after(
    api: Api, register: Register, rows: Rows, store: CassandraStore
) -> None:
    client_id, key = await register()
    raw = _raw(schedule_body())
    now = _ms(datetime.now(UTC))
    reserved = IdempotencyKey(client_id, "busy", uuid.uuid4(), request_digest("POST", "/v1/schedules", raw), now)
    await store.reserve_idempotency_key(reserved)
    started = asyncio.get_running_loop().time()
    status, answer, headers = await _post(api, key, "busy", raw)
    assert status == 409, answer
    assert asyncio.get_running_loop().time() - started >= WAIT_S
    assert answer["error"]["code"] == "idempotency_key_in_progress"
    assert answer["error"]["field"] == "Idempotency-Key"
    assert 1 <= int(headers["Retry-After"]) <= 30
    assert await rows(client_id) == {"schedules": 0, "refs": 0, "idempotency": 1}
