"""Every query parameter of every operation (``service.routes.operations()``), given the extremes of time
and number: years 0, 1, 9999 and 10000, huge and negative epochs, NaN and infinities, non-ASCII digits,
offsets past +23:59. Each answer is a 2xx or a 4xx naming a field, never a 5xx."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from tests.integration.api_helpers import ADMIN, Api, Register
from tickd.service.routes import operations

pytest_plugins = ["tests.integration.api_fixtures"]

EXTREMES = [
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59.999999-23:59",
    "10000-01-01T00:00:00Z",
    "2026-01-01T00:00:00+99:99",
    "2026-01-01T00:00:00+24:00",
    "2026-02-30T00:00:00Z",
    "0",
    "-1",
    "253402300799",
    "253402300800",
    "99999999999999999999999999",
    "-99999999999999999999999999",
    "1e308",
    "1e400",
    "NaN",
    "nan",
    "inf",
    "-Infinity",
    "0.5",
    "-0",
    "\u0661\u0662\u0663",  # Arabic-Indic digits
    "\uff11\uff12",  # full-width digits
    "\u00b2",  # a superscript digit
    "",
    " 1",
    "0x10",
    "1_000",
]


def _query_params() -> list[tuple[str, str, str]]:
    """(method, path, parameter) for every query parameter the API publishes."""
    found = []
    for op in operations():
        if op.query is None:
            continue
        for field in msgspec.structs.fields(op.query):
            found.append((op.method, op.path, field.encode_name))
    return found


PARAMS = _query_params()


def test_the_table_has_the_time_and_number_parameters() -> None:
    """The fuzz below covers what it should: the listings' times and limits, dead letters' ranges."""
    names = {(path, name) for _, path, name in PARAMS}
    assert {("/v1/schedules", "from"), ("/v1/schedules", "to"), ("/v1/schedules", "limit")} <= names
    assert {("/v1/dead-letters", "from"), ("/v1/dead-letters", "to"), ("/v1/dead-letters/redrive", "from")} <= names


def _url(path: str) -> str:
    return path.replace("{schedule_id}", str(uuid.uuid4())).replace("{dead_letter_id}", f"1-{uuid.uuid4()}")


def _base(path: str, name: str) -> dict[str, str]:
    """The other parameters an operation needs to reach ``name`` (a listing needs from and to)."""
    if path == "/v1/schedules":
        base = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T01:00:00Z"}
        return {k: v for k, v in base.items() if k != name}
    return {}


async def _wrong(api: Api, headers: dict[str, str], method: str, path: str, name: str, value: str) -> str | None:
    """What is wrong with the answer to ``name=value``: a 5xx, or a 4xx that names no field."""
    params = {**_base(path, name), name: value}
    resp = await api.request(method.upper(), _url(path), params=params, headers=headers)
    body: Any = await resp.json() if resp.content_type == "application/json" else await resp.text()
    if resp.status >= 500:
        return f"{name}={value!r}: {resp.status} {body}"
    if 400 <= resp.status < 500 and resp.status not in (401, 403, 404, 409, 429):
        error = body.get("error", {}) if isinstance(body, dict) else {}
        if not error.get("field"):
            return f"{name}={value!r}: {resp.status} names no field: {body}"
    return None


@pytest.mark.parametrize(("method", "path", "name"), PARAMS, ids=[f"{m} {p} {n}" for m, p, n in PARAMS])
async def test_query_extremes_are_4xx_naming_the_field(
    api: Api, register: Register, method: str, path: str, name: str
) -> None:
    _, key = await register()
    headers = {**key, **ADMIN} if path.startswith("/v1/admin") else key
    wrong = [await _wrong(api, headers, method, path, name, value) for value in EXTREMES]
    assert [w for w in wrong if w is not None] == []


BODY_EXTREMES: list[Any] = [
    *EXTREMES,
    -1,
    0,
    253402300800,
    10**30,
    -(10**30),
    1e308,
    0.5,
    True,
    None,
]


async def _body_wrong(api: Api, headers: dict[str, str], path: str, body: dict[str, Any]) -> str | None:
    resp = await api.post(path, data=msgspec.json.encode(body), headers={**headers, "Content-Type": "application/json"})
    answer: Any = await resp.json()
    if resp.status >= 500 or (resp.status >= 400 and not answer.get("error", {}).get("field")):
        return f"{body}: {resp.status} {answer}"
    return None


async def test_body_time_and_count_extremes_are_4xx_naming_the_field(api: Api, register: Register) -> None:
    """The times and counts requests carry in a body: a preview's ``after`` and ``count``, a redrive's ``at``."""
    _, key = await register()
    preview = "/v1/schedules/preview"
    wrong = [await _body_wrong(api, key, preview, {"cron": "0 * * * *", "after": v}) for v in BODY_EXTREMES]
    wrong += [await _body_wrong(api, key, preview, {"cron": "0 * * * *", "count": v}) for v in BODY_EXTREMES]
    wrong += [await _body_wrong(api, key, "/v1/dead-letters/redrive", {"at": v}) for v in BODY_EXTREMES]
    assert [w for w in wrong if w is not None] == []
