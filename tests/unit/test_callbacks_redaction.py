"""A callback URL's credentials and query string never reach ``last_error``, logs or dead letters: every
error text an HTTP attempt produces goes through ``redacted`` (issue 25, hardening)."""

import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpDispatcher, HttpSettings, classify_error, redacted
from tickd.schema.model import HttpCallback, Location, Schedule

SECRET = "s3cr3t-T0KEN"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "url='https://bob:pw@h.example:8443/a/b?token=x&y=1#f'",
            "url='https://[redacted]@h.example:8443/a/b?[redacted]'",
        ),
        ("InvalidURL: http://u@h/p?q", "InvalidURL: http://[redacted]@h/p?[redacted]"),
        ("http://h.example/path", "http://h.example/path"),
        ("HTTPS://H/x#frag", "HTTPS://H/x?[redacted]"),
        (
            "two: http://a?b and http://c/d?e",
            "two: http://a?[redacted] and http://c/d?[redacted]",
        ),
        ("no url at all: HTTP 503", "no url at all: HTTP 503"),
        ("URL('http://h/p?k=v')", "URL('http://h/p?[redacted]')"),
        ("http://h/@user?x", "http://h/@user?[redacted]"),
    ],
)
def test_urls_in_error_texts_lose_credentials_and_query(text: str, expected: str) -> None:
    assert redacted(text) == expected


def test_an_attempts_error_naming_the_url_is_redacted() -> None:
    exc = aiohttp.InvalidURL(f"http://admin:{SECRET}@hooks.example/cb?token={SECRET}")
    result = classify_error(exc, 1, 5.0)
    assert result.error is not None and SECRET not in result.error
    assert "hooks.example/cb" in result.error  # where it went stays readable


async def test_a_refused_private_target_does_not_carry_its_token() -> None:
    """The poller's own refusal names the target, not its secrets (on 6bb5212 the whole URL went in)."""
    fire_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    url = f"http://user:{SECRET}@127.0.0.1:8080/hook?token={SECRET}"
    schedule = Schedule("acme", uuid.uuid4(), Location(0, fire_at), fire_at, b"{}", HttpCallback(url=url), fire_at)
    async with HttpDispatcher(HttpSettings(allow_private=False), RetryPolicy(max_attempts=1)) as dispatcher:
        result = await dispatcher.deliver(schedule, 1, datetime.now(UTC))
    assert (result.ok, result.retriable) == (False, False)
    assert result.error is not None and "refused target" in result.error
    assert SECRET not in result.error and "127.0.0.1:8080/hook" in result.error
