"""Pure retry math: exponential backoff with full jitter, Retry-After parsing, the retry policy.

No clock is read here: callers pass ``now`` and the random source.
"""

from __future__ import annotations

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


def upper_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The ceiling of the delay after failed attempt ``attempt`` (1-based): ``min(cap, base * 2**(n-1))``."""
    exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
    return min(cap_s, base_s * 2.0**exponent)


def delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """How long to wait after failed attempt ``attempt``: uniform in ``[0, upper_s]`` ("full jitter"),
    so clients failing together do not retry together."""
    return rng.uniform(0.0, upper_s(attempt, base_s, cap_s))


def retry_after_s(header_value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After value: delta-seconds or an HTTP-date; None when absent or bad.

    A date in the past means "now" (0.0).
    """
    if header_value is None:
        return None
    value = header_value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    return _seconds_until_http_date(value, now)


def _seconds_until_http_date(value: str, now: datetime) -> float | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": UTC with no claim about the local zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


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
        if self.inline_budget_s < 0:
            raise ConfigError(f"inline_budget_s must be >= 0, got {self.inline_budget_s}", field="inline_budget_s")

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return delay_s(attempt, self.base_s, self.cap_s, rng)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        env = os.environ if env is None else env
        return cls(
            max_attempts=env_int(env, "TICKD_CALLBACK_MAX_ATTEMPTS", cls.max_attempts, low=1, high=1000),
            base_s=env_float(env, "TICKD_CALLBACK_BACKOFF_BASE_S", cls.base_s, low=0.0, high=3600),
            cap_s=env_float(env, "TICKD_CALLBACK_BACKOFF_CAP_S", cls.cap_s, low=0.0, high=86400),
            inline_budget_s=env_float(env, "TICKD_CALLBACK_INLINE_BUDGET_S", cls.inline_budget_s, low=0.0, high=300),
        )
