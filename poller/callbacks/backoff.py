"""Pure retry math: exponential backoff with full jitter, Retry-After parsing, the retry policy.

No clock is read here: callers pass ``now`` and the random source.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tickd.schema.errors import ConfigError
from tickd.schema.settings import env_float, env_int

# 2**63 * any sane base is far beyond any cap; stop doubling there instead of overflowing.
_MAX_EXPONENT = 63
# The longest cap a retry policy may have (a day): also the clamp of a Retry-After read with no policy.
MAX_CAP_S = 86_400.0
# A Retry-After longer than this is no value a server means (an HTTP-date is 29 characters, its obsolete
# forms at most 37): not parsed at all.
_MAX_VALUE_CHARS = 64
# Delta-seconds of more digits are beyond any cap (11 digits: over 3,000 years): read as infinite.
_MAX_DELTA_DIGITS = 10
# Optional whitespace around a header value (RFC 9110): spaces and tabs, nothing else.
_OWS = " \t"


def upper_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The ceiling of the delay after failed attempt ``attempt`` (1-based): ``min(cap, base * 2**(n-1))``."""
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    return min(cap_s, base_s * 2.0**exponent)


def delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """How long to wait after failed attempt ``attempt``: uniform in ``[0, upper_s]`` ("full jitter"),
    so clients failing together do not retry together."""
    return rng.uniform(0.0, upper_s(attempt, base_s, cap_s))


def retry_after_s(header_value: str | None, now: datetime, cap_s: float = MAX_CAP_S) -> float | None:
    """Seconds to wait from a Retry-After value (delta-seconds or an HTTP-date), within ``[0, cap_s]``;
    None when absent or malformed (the caller's own backoff applies).

    The value is a third party's: a longer wait than the retry policy's cap would park a fire for years
    (or overflow the due time's arithmetic), so it is clamped to the cap, never taken as is. A date in the
    past means "now" (0.0); a number too long to be meant (or a date past year 9999) means "the cap".
    """
    if header_value is None or len(header_value) > _MAX_VALUE_CHARS:
        return None
    value = header_value.strip(_OWS)
    if value.isascii() and value.isdigit():
        seconds: float | None = float(value) if len(value) <= _MAX_DELTA_DIGITS else math.inf
    else:
        seconds = _seconds_until_http_date(value, now)
    return None if seconds is None else clamp_wait_s(seconds, cap_s)


def clamp_wait_s(seconds: float, cap_s: float) -> float | None:
    """A wait within ``[0, cap_s]``: negative ones are 0, longer or infinite ones the cap; None for NaN."""
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), max(cap_s, 0.0))


def _seconds_until_http_date(value: str, now: datetime) -> float | None:
    try:
        when = parsedate_to_datetime(value)
    except OverflowError:  # a year with more digits than a C integer holds: far in the future
        return math.inf
    except (TypeError, ValueError, IndexError):
        return None  # garbage, an impossible date, or an offset of 24 h or more
    if when.tzinfo is None:  # "-0000": UTC with no claim about the local zone
        when = when.replace(tzinfo=UTC)
    return (when - now).total_seconds()


@dataclass(frozen=True)
class RetryPolicy:
    """How a fire is retried.

    Retries are held in memory (sleeping between attempts) only while the time since the first
    attempt of this delivery stays within ``inline_budget_s``; beyond that the fire is handed back to
    the engine, which stores a *durable* retry. After ``max_attempts`` attempts an HTTP fire fails for
    good (status FAILED + dead letter).
    """

    max_attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 60.0
    inline_budget_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}", field="max_attempts")
        if not 0 <= self.base_s <= self.cap_s:
            raise ConfigError(f"need 0 <= base_s <= cap_s, got {self.base_s} and {self.cap_s}", field="base_s")
        if not self.cap_s <= MAX_CAP_S:  # also refuses NaN
            raise ConfigError(f"cap_s must be at most {MAX_CAP_S:g}, got {self.cap_s}", field="cap_s")
        if self.inline_budget_s < 0:
            raise ConfigError(f"inline_budget_s must be >= 0, got {self.inline_budget_s}", field="inline_budget_s")

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return delay_s(attempt, self.base_s, self.cap_s, rng)

    def wait_s(self, retry_after: float | None, attempt: int, rng: random.Random) -> float:
        """The wait before the attempt after ``attempt``: the backoff, or longer if the server asked for
        longer, never beyond ``cap_s`` (a server's value is clamped again here, whoever read it)."""
        jittered = self.delay_s(attempt, rng)
        asked = None if retry_after is None else clamp_wait_s(retry_after, self.cap_s)
        return jittered if asked is None else max(asked, jittered)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        env = os.environ if env is None else env
        return cls(
            max_attempts=env_int(env, "TICKD_CALLBACK_MAX_ATTEMPTS", cls.max_attempts, low=1, high=1000),
            base_s=env_float(env, "TICKD_CALLBACK_BACKOFF_BASE_S", cls.base_s, low=0.0, high=3600),
            cap_s=env_float(env, "TICKD_CALLBACK_BACKOFF_CAP_S", cls.cap_s, low=0.0, high=MAX_CAP_S),
            inline_budget_s=env_float(env, "TICKD_CALLBACK_INLINE_BUDGET_S", cls.inline_budget_s, low=0.0, high=300),
        )
