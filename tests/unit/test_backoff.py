import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.poller.callbacks import backoff
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.schema.errors import ConfigError

attempts = st.integers(min_value=1, max_value=10_000)
bases = st.floats(min_value=0.0, max_value=100.0)
caps = st.floats(min_value=0.0, max_value=86_400.0)
NOW = datetime(2015, 10, 21, 7, 27, 0, tzinfo=UTC)


@given(attempts, bases, caps, st.integers())
def test_delay_within_zero_and_cap(attempt: int, base: float, cap: float, seed: int) -> None:
    delay = backoff.delay_s(attempt, base, cap, random.Random(seed))
    assert 0.0 <= delay <= cap
    assert delay <= backoff.upper_s(attempt, base, cap)


@given(attempts, bases, caps)
def test_upper_bound_never_decreases(attempt: int, base: float, cap: float) -> None:
    assert backoff.upper_s(attempt, base, cap) <= backoff.upper_s(attempt + 1, base, cap)


def test_upper_bound_doubles_then_caps() -> None:
    assert [backoff.upper_s(n, 0.5, 3.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_spreads_delays() -> None:
    rng = random.Random(7)
    delays = {round(backoff.delay_s(4, 0.5, 60, rng), 6) for _ in range(100)}
    assert len(delays) > 90


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1.0),
        ("0", 0.0),
        (" 120 ", 120.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 60.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-15 07:28:00 GMT", 60.0),  # RFC 850
        ("Wed Oct 21 07:28:00 2015", 60.0),  # asctime
        ("Wed, 21 Oct 2015 07:00:00 GMT", 0.0),  # in the past: retry now
        ("Wed, 21 Oct 2015 07:28:00 -0000", 60.0),
        (None, None),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("soon", None),
        ("\u0661\u0662", None),  # non-ASCII digits
        ("Wed, 99 Oct 2015 07:28:00 GMT", None),
    ],
)
def test_retry_after(value: str | None, expected: float | None) -> None:
    assert backoff.retry_after_s(value, NOW) == expected


def test_retry_after_date_is_relative_to_now() -> None:
    later = NOW + timedelta(seconds=30)
    assert backoff.retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", later) == 30.0


def test_policy_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.base_s, policy.cap_s, policy.inline_budget_s) == (5, 0.5, 60.0, 5.0)


@pytest.mark.parametrize(
    "changes", [{"max_attempts": 0}, {"base_s": -1.0}, {"base_s": 10.0, "cap_s": 1.0}, {"inline_budget_s": -1.0}]
)
def test_policy_refuses_nonsense(changes: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**changes)  # type: ignore[arg-type]


def test_policy_from_env() -> None:
    env = {"TICKD_CALLBACK_MAX_ATTEMPTS": "3", "TICKD_CALLBACK_INLINE_BUDGET_S": "0"}
    assert RetryPolicy.from_env(env) == RetryPolicy(max_attempts=3, inline_budget_s=0.0)
    with pytest.raises(ConfigError, match="TICKD_CALLBACK_MAX_ATTEMPTS"):
        RetryPolicy.from_env({"TICKD_CALLBACK_MAX_ATTEMPTS": "many"})
