"""Every bad input gets a 4xx naming the field, and nothing is written: 400 when the request does not
match /openapi.json, 422 when it does but a rule no schema carries refuses it."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN, Api, Register, Rows, http_callback, schedule_body

pytest_plugins = ["tests.integration.api_fixtures"]

BIG = "x" * (64 * 1024)
cb = http_callback

# (id, body or raw bytes, status, code, field) for POST /v1/schedules
CREATE_CASES: list[tuple[str, Any, int, str, str | None]] = [
    ("malformed-json", b'{"delay_s": 1,', 400, "malformed_json", None),
    ("not-an-object", b"[1, 2]", 400, "wrong_type", None),
    ("empty-body", b"", 400, "malformed_json", None),
    ("unknown-field", schedule_body(extra=1), 400, "unknown_field", "extra"),
    ("no-time", schedule_body(delay_s=None), 422, "missing_field", "fire_at"),
    ("both-times", schedule_body(fire_at=2000000000), 422, "missing_field", "fire_at"),
    ("naive-fire-at", schedule_body(delay_s=None, fire_at="2030-01-01T00:00:00"), 400, "invalid_value", "fire_at"),
    ("date-only", schedule_body(delay_s=None, fire_at="2030-01-01"), 400, "invalid_value", "fire_at"),
    ("garbage-time", schedule_body(delay_s=None, fire_at="tomorrow"), 400, "invalid_value", "fire_at"),
    ("bool-time", schedule_body(delay_s=None, fire_at=True), 400, "wrong_type", "fire_at"),
    ("float-epoch", schedule_body(delay_s=None, fire_at=1.5), 400, "wrong_type", "fire_at"),
    ("negative-epoch", schedule_body(delay_s=None, fire_at=-5), 400, "out_of_range", "fire_at"),
    ("beyond-horizon", schedule_body(delay_s=None, fire_at="2099-01-01T00:00:00Z"), 422, "out_of_range", "fire_at"),
    ("negative-delay", schedule_body(delay_s=-1), 400, "out_of_range", "delay_s"),
    ("string-delay", schedule_body(delay_s="10"), 400, "wrong_type", "delay_s"),
    ("payload-too-big", schedule_body(payload=BIG), 413, "payload_too_large", "payload"),
    ("no-callback", schedule_body(callback=None), 400, "missing_field", "callback"),
    ("callback-not-object", schedule_body(callback="http://x"), 400, "wrong_type", "callback"),
    ("callback-no-type", schedule_body(callback={"url": "http://x/"}), 400, "missing_field", "callback.type"),
    ("callback-bad-type", schedule_body(callback={"type": "ftp"}), 400, "invalid_value", "callback.type"),
    ("callback-extra", schedule_body(callback=cb(retries=3)), 400, "unknown_field", "callback.retries"),
    ("no-url", schedule_body(callback={"type": "http"}), 400, "missing_field", "callback.url"),
    ("ftp-url", schedule_body(callback=cb(url="ftp://host/x")), 400, "invalid_value", "callback.url"),
    ("no-host", schedule_body(callback=cb(url="http:///path")), 400, "invalid_value", "callback.url"),
    ("relative-url", schedule_body(callback=cb(url="/just/a/path")), 400, "invalid_value", "callback.url"),
    ("bad-port", schedule_body(callback=cb(url="http://h:99999/")), 422, "invalid", "callback.url"),
    ("credentials", schedule_body(callback=cb(url="http://u:p@h/")), 400, "invalid_value", "callback.url"),
    ("space-in-url", schedule_body(callback=cb(url="http://h/a b")), 400, "invalid_value", "callback.url"),
    ("bad-method", schedule_body(callback=cb(method="TRACE")), 400, "invalid_value", "callback.method"),
    ("timeout-low", schedule_body(callback=cb(timeout_s=0.01)), 400, "out_of_range", "callback.timeout_s"),
    ("timeout-high", schedule_body(callback=cb(timeout_s=61)), 400, "out_of_range", "callback.timeout_s"),
    ("timeout-type", schedule_body(callback=cb(timeout_s="5")), 400, "wrong_type", "callback.timeout_s"),
    ("header-host", schedule_body(callback=cb(headers={"Host": "x"})), 422, "invalid", "callback.headers.Host"),
    (
        "header-hop",
        schedule_body(callback=cb(headers={"Connection": "close"})),
        422,
        "invalid",
        "callback.headers.Connection",
    ),
    (
        "header-tickd",
        schedule_body(callback=cb(headers={"X-Tickd-Fire-Id": "1"})),
        422,
        "invalid",
        "callback.headers.X-Tickd-Fire-Id",
    ),
    (
        "header-crlf",
        schedule_body(callback=cb(headers={"X-A": "a\r\nB: c"})),
        400,
        "invalid_value",
        "callback.headers",
    ),
    (
        "header-name",
        schedule_body(callback=cb(headers={"Bad Name": "v"})),
        400,
        "invalid_value",
        "callback.headers",
    ),
    ("header-value-type", schedule_body(callback=cb(headers={"X-A": 1})), 400, "wrong_type", "callback.headers"),
    (
        "too-many-headers",
        schedule_body(callback=cb(headers={f"X-{i}": "v" for i in range(33)})),
        400,
        "out_of_range",
        "callback.headers",
    ),
    ("kafka-no-topic", schedule_body(callback={"type": "kafka"}), 400, "missing_field", "callback.topic"),
    (
        "kafka-bad-topic",
        schedule_body(callback={"type": "kafka", "topic": "a/b"}),
        400,
        "invalid_value",
        "callback.topic",
    ),
    (
        "kafka-not-granted",
        schedule_body(callback={"type": "kafka", "topic": "other"}),
        422,
        "topic_not_allowed",
        "callback.topic",
    ),
]


@pytest.mark.parametrize(
    ("body", "status", "code", "field"), [c[1:] for c in CREATE_CASES], ids=[c[0] for c in CREATE_CASES]
)
async def test_bad_create_is_refused_and_writes_nothing(
    api: Api, register: Register, rows: Rows, body: Any, status: int, code: str, field: str | None
) -> None:
    client_id, key = await register(kafka_topics=["orders.*"])
    before = await rows(client_id)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**key, "Content-Type": "application/json", "Idempotency-Key": "k1"}
    resp = await api.post("/v1/schedules", data=data, headers=headers)
    assert resp.status == status, await resp.text()
    error = (await resp.json())["error"]
    assert (error["code"], error["field"]) == (code, field), error
    assert error["message"]
    assert await rows(client_id) == before == {"schedules": 0, "refs": 0, "idempotency": 0}


async def test_wrong_content_type_and_oversize_body(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    resp = await api.post(
        "/v1/schedules", data=json.dumps(schedule_body()), headers={**key, "Content-Type": "text/plain"}
    )
    assert resp.status == 415 and (await resp.json())["error"]["field"] == "Content-Type"
    huge = json.dumps(schedule_body(payload="x" * 200_000))
    resp = await api.post("/v1/schedules", data=huge, headers={**key, "Content-Type": "application/json"})
    assert resp.status == 413 and (await resp.json())["error"]["code"] == "too_large"
    assert (await rows(client_id))["refs"] == 0


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"client_id": "Bad_Upper", "poller_count": 1}, "invalid_value", "client_id"),
        ({"client_id": "x" * 65, "poller_count": 1}, "invalid_value", "client_id"),
        ({"client_id": "", "poller_count": 1}, "invalid_value", "client_id"),
        ({"client_id": "ok", "poller_count": 0}, "out_of_range", "poller_count"),
        ({"client_id": "ok", "poller_count": 1025}, "out_of_range", "poller_count"),
        ({"client_id": "ok", "poller_count": "4"}, "wrong_type", "poller_count"),
        ({"client_id": "ok"}, "missing_field", "poller_count"),
        ({"client_id": "ok", "poller_count": 1, "admin": True}, "unknown_field", "admin"),
        ({"client_id": "ok", "poller_count": 1, "kafka_topics": ["*"]}, "invalid_value", "kafka_topics.0"),
        ({"client_id": "ok", "poller_count": 1, "kafka_topics": ["a", "orders*"]}, "invalid_value", "kafka_topics.1"),
        ({"client_id": "ok", "poller_count": 1, "kafka_topics": "orders"}, "wrong_type", "kafka_topics"),
    ],
)
async def test_bad_client_registration(api: Api, rows: Rows, body: dict[str, Any], code: str, field: str) -> None:
    if body.get("client_id") == "ok":
        body = {**body, "client_id": f"t{uuid.uuid4().hex[:12]}"}
    resp = await api.post("/v1/clients", json=body, headers=ADMIN)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert (error["code"], error["field"]) == (code, field)
    if isinstance(body.get("client_id"), str) and body["client_id"]:
        assert (await api.get(f"/v1/clients/{body['client_id']}", headers=ADMIN)).status in (400, 404)


@pytest.mark.parametrize(
    ("params", "status", "code", "field"),
    [
        ({"to": "2030-01-01T00:00:00Z"}, 422, "missing_field", "from"),  # optional when a tag is given
        ({"from": "2030-01-01T00:00:00Z"}, 422, "missing_field", "to"),
        ({"from": "2030-01-01T00:00:00", "to": "2030-01-01T01:00:00Z"}, 400, "invalid_value", "from"),
        ({"from": "yesterday", "to": "2030-01-01T01:00:00Z"}, 400, "invalid_value", "from"),
        ({"from": "2030-01-01T01:00:00Z", "to": "2030-01-01T00:00:00Z"}, 422, "out_of_range", "to"),
        ({"from": "2030-01-01T00:00:00Z", "to": "2030-01-03T00:00:00Z"}, 422, "out_of_range", "to"),
        ({"from": "1900000000", "to": "1900003600", "limit": "0"}, 400, "out_of_range", "limit"),
        ({"from": "1900000000", "to": "1900003600", "limit": "1001"}, 400, "out_of_range", "limit"),
        ({"from": "1900000000", "to": "1900003600", "status": "moved"}, 400, "invalid_value", "status"),
        ({"from": "1900000000", "to": "1900003600", "cursor": "not-a-cursor"}, 422, "invalid", "cursor"),
        ({"from": "1900000000", "to": "1900003600", "page": "2"}, 400, "unknown_field", "page"),
    ],
)
async def test_bad_list_queries(
    api: Api, register: Register, params: dict[str, str], status: int, code: str, field: str
) -> None:
    _, key = await register()
    resp = await api.get("/v1/schedules", params=params, headers=key)
    assert resp.status == status
    error = (await resp.json())["error"]
    assert (error["code"], error["field"]) == (code, field)


async def test_bad_patches_change_nothing(api: Api, register: Register, rows: Rows) -> None:
    client_id, key = await register()
    created = await (await api.post("/v1/schedules", json=schedule_body(), headers=key)).json()
    url = f"/v1/schedules/{created['schedule_id']}"
    before = await (await api.get(url, headers=key)).json()
    cases = [
        ({}, "missing_field", None),
        ({"fire_at": "2030-01-01T00:00:00"}, "invalid_value", "fire_at"),
        ({"payload": "x" * 70_000}, "payload_too_large", "payload"),
        ({"callback": cb(url="gopher://x/")}, "invalid_value", "callback.url"),
        ({"status": "cancelled"}, "unknown_field", "status"),
    ]
    for body, code, field in cases:
        resp = await api.patch(url, json=body, headers=key)
        error = (await resp.json())["error"]
        assert 400 <= resp.status < 500 and (error["code"], error["field"]) == (code, field), body
    assert await (await api.get(url, headers=key)).json() == before
    bad_id = await api.get("/v1/schedules/not-a-uuid", headers=key)
    assert bad_id.status == 400 and (await bad_id.json())["error"]["field"] == "schedule_id"
    assert (await rows(client_id))["schedules"] == 1
