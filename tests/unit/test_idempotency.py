"""The pure parts of Idempotency-Key handling: the request digest and when a reservation may be taken over."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema.model import IdempotencyKey
from tickd.service import idempotency

AT = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_the_digest_is_of_the_canonical_body_method_and_path() -> None:
    digest = idempotency.request_digest("POST", "/v1/schedules", b'{"a": 1, "b": {"d": [1, 2], "c": null}}')
    assert digest == idempotency.request_digest("POST", "/v1/schedules", b'{"b":{"c":null,"d":[1,2]},"a":1}')
    assert digest != idempotency.request_digest("POST", "/v1/schedules", b'{"a": 1, "b": {"d": [2, 1], "c": null}}')
    assert digest != idempotency.request_digest("PUT", "/v1/schedules", b'{"a": 1, "b": {"d": [1, 2], "c": null}}')
    assert digest != idempotency.request_digest("POST", "/v1/other", b'{"a": 1, "b": {"d": [1, 2], "c": null}}')


def _key(digest: str | None, created_at: datetime | None) -> IdempotencyKey:
    return IdempotencyKey("c", "k", uuid.uuid4(), digest, created_at)


def test_another_request_is_refused_naming_the_header() -> None:
    idempotency.check_same_request(_key("d1", AT), "d1")
    idempotency.check_same_request(_key(None, None), "d1")  # kept from before digests: not comparable
    with pytest.raises(idempotency.KeyReused) as refused:
        idempotency.check_same_request(_key("d1", AT), "d2")
    assert refused.value.status == 422 and refused.value.field == "Idempotency-Key"


@pytest.mark.parametrize(
    ("age_s", "abandoned", "retry_after"), [(0, False, "30"), (29.5, False, "1"), (30, True, None)]
)
def test_a_reservation_is_taken_over_only_past_the_takeover_age(
    age_s: float, abandoned: bool, retry_after: str | None
) -> None:
    key = _key("d", AT)
    at = AT + timedelta(seconds=age_s)
    assert idempotency.abandoned(key, at, 30.0) is abandoned
    if retry_after is not None:
        busy = idempotency.in_progress(key, at, 30.0)
        assert busy.status == 409 and busy.headers == {"Retry-After": retry_after}
    assert idempotency.abandoned(_key("d", None), at, 30.0)
