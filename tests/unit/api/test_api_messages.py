"""Error messages a person can act on: a value that does not match a field's pattern is answered with what
the field asks for, in words, never with the regular expression (issue 28: "Expected `str` matching regex
'^[Hh][Tt][Tt][Pp][Ss]?://...'" told a user nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import msgspec
import pytest
from msgspec import Meta

from tests.integration.api_helpers import ADMIN, Api, Register, http_callback, schedule_body
from tickd.service.validation import PATTERN_WORDS, invalid_from

pytest_plugins = ["tests.integration.api_fixtures"]


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            else:
                yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


async def test_every_pattern_the_spec_publishes_has_words(api: Api) -> None:
    spec = await (await api.get("/openapi.json")).json()
    published = set(_patterns(spec))
    assert len(published) >= 10, sorted(published)  # bodies, paths, queries and headers all publish theirs
    assert sorted(published - set(PATTERN_WORDS)) == []


# (where, request, field, words the message must hold)
CASES: list[tuple[str, str, str, dict[str, Any] | None, str, str]] = [
    ("url", "POST", "/v1/schedules", schedule_body(callback=http_callback(url="ftp://h/x")), "callback.url", "http://"),
    (
        "method",
        "POST",
        "/v1/schedules",
        schedule_body(callback=http_callback(method="TRACE")),
        "callback.method",
        "GET",
    ),
    (
        "zone",
        "POST",
        "/v1/schedules",
        schedule_body(delay_s=None, cron="0 * * * *", timezone="1/x"),
        "timezone",
        "IANA",
    ),
    ("every", "POST", "/v1/schedules", schedule_body(delay_s=None, every="5 minutes"), "every", "30s"),
    (
        "header",
        "POST",
        "/v1/schedules",
        schedule_body(callback=http_callback(headers={"a b": "1"})),
        "callback.headers",
        "header name",
    ),
]


@pytest.mark.parametrize(("name", "method", "path", "body", "field", "words"), CASES, ids=[c[0] for c in CASES])
async def test_a_body_field_that_does_not_match_says_what_it_wants(
    api: Api, register: Register, name: str, method: str, path: str, body: dict[str, Any], field: str, words: str
) -> None:
    _, key = await register()
    resp = await api.request(method, path, json=body, headers=key)
    error = (await resp.json())["error"]
    assert resp.status == 400, error
    assert error["field"].startswith(field), error
    assert words in error["message"] and "regex" not in error["message"], error


async def test_path_and_query_values_say_what_they_want(api: Api, register: Register) -> None:
    _, key = await register()
    resp = await api.post("/v1/events/not-an-event/release", headers=key)
    error = (await resp.json())["error"]
    assert resp.status == 400 and "event id as delivered" in error["message"], error
    for url, headers, words in (
        ("/v1/clients/Not%20A%20Name", ADMIN, "a-z, 0-9"),
        ("/v1/dead-letters/x-y", key, "dead letter id"),
        ("/v1/dead-letters?cursor=%21%21", key, "next_cursor"),
    ):
        resp = await api.get(url, headers=headers)
        error = (await resp.json())["error"]
        assert resp.status == 400, (url, error)
        assert words in error["message"] and "regex" not in error["message"], (url, error)


def test_a_pattern_without_words_still_names_no_regex() -> None:
    """A pattern someone adds without ``worded``: the message points to the documentation instead."""
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.convert({"x": "b"}, dict[str, Annotated[str, Meta(pattern="^a(?!\\n)$")]])
    error = invalid_from(str(refused.value))
    assert "regex" in str(refused.value)
    assert "regex" not in error.message and "/docs" in error.message, error.message


async def test_an_unknown_query_parameter_is_refused_naming_it(api: Api, register: Register) -> None:
    """``GET /v1/stats?client_id=other`` answered the caller's own statistics, as if it had asked for them."""
    _, key = await register()
    for url, headers in (
        ("/v1/stats?client_id=other", key),
        ("/v1/throttle-policies?limit=5", key),
        ("/v1/schedules/runs?x=1", key),
        ("/v1/clients?client_id=a", ADMIN),
        ("/v1/schedules?from=2030-01-01T00:00:00Z&to=2030-01-01T01:00:00Z&client_id=other", key),
    ):
        resp = await api.get(url, headers=headers)
        error = (await resp.json())["error"]
        assert (resp.status, error["code"]) == (400, "unknown_field"), (url, error)
        assert error["field"] in ("client_id", "limit", "x"), (url, error)
    assert (await api.get("/v1/stats", headers=key)).status == 200
    assert (await api.get("/healthz?probe=lb")).status == 200  # probes add their own
