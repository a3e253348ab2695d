"""When a failed call is tried again, and after how long: pure functions of the failure and the attempt.

What is retried: 429 (the API writes nothing for a 4xx), and, for a call that is safe to repeat, 502/503/504,
409 ``idempotency_key_in_progress`` (a create or trigger whose key another request holds), 409
``key_in_progress`` (a PUT by business key whose schedule another PUT is still creating) and a connection
lost mid-request. A connection that never opened is retried for any call. A call that is not safe to repeat
(a POST without an Idempotency-Key) is never sent twice once it may have reached the server.

Whether a call is safe to repeat is the call's own ``repeatable`` (set per operation in
``tickd_client.calls``), not its HTTP method. Safe: reads; a PUT (a policy, or a schedule by business key:
it sets the state to the body whatever was there, except a body with ``delay_s``, which counts from when
the API reads it, so a repeat would move the fire, or with ``debounce``, which a repeat would push back
again); a PATCH without ``delay_s``; cancels; the POSTs that
do no more the second time (pause, redriving dead letters, preview, an event's release); creates and
triggers sent with an Idempotency-Key. Not: a resume or a policy's delete (a repeat of one that went
through answers 409 or 404, not the result), and a create, trigger or batch without a key. The wait is
``Retry-After`` when the API sends it, else exponential backoff with full jitter.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tickd_client.errors import TickdError

_SAFE_TO_REPEAT_STATUSES = frozenset({502, 503, 504})
# 409s that mean "another request is still at it": the same request again gets the answer once it is done.
_IN_PROGRESS = frozenset({"idempotency_key_in_progress", "key_in_progress"})


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts the first try (1: never retry). A ``Retry-After`` above ``max_retry_after_s``
    is not waited out: the error is raised with its ``retry_after``."""

    attempts: int = 4
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0

    @property
    def enabled(self) -> bool:
        return self.attempts > 1


NO_RETRY = RetryPolicy(attempts=1)


def backoff_s(policy: RetryPolicy, attempt: int, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(max, base * 2^(attempt-1))]."""
    return rng.uniform(0, min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1)))


def retriable(error: TickdError, *, repeatable: bool) -> bool:
    if error.status is None:
        return not error.request_sent or repeatable
    if error.status == 429:
        return True
    if error.status in _SAFE_TO_REPEAT_STATUSES:
        return repeatable
    return error.status == 409 and error.code in _IN_PROGRESS and repeatable


def delay_s(
    policy: RetryPolicy, attempt: int, error: TickdError, *, repeatable: bool, rng: random.Random
) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``, or None: raise ``error``."""
    if attempt >= policy.attempts or not retriable(error, repeatable=repeatable):
        return None
    if error.retry_after is None:
        return backoff_s(policy, attempt, rng)
    if error.retry_after > policy.max_retry_after_s:
        return None
    # At least what the server asked; a little more, so clients told the same second do not return together.
    return error.retry_after + rng.uniform(0, policy.base_delay_s)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (RFC 9110); None if absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is not None:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
