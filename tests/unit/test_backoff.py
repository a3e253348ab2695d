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


CAP = 60.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10000000000000", CAP),  # the value that crashed an instance in a loop (issue 25)
        ("9" * 64, CAP),  # the longest value read
        ("9999999999", CAP),  # ten digits: parsed, then clamped
        ("61", CAP),
        ("60", 60.0),
        ("59", 59.0),
        ("00000000000000000000000000000000000000000000000000000001", CAP),  # long: read as infinite
        ("1e309", None),  # a float literal that overflows to inf: not delta-seconds
        ("inf", None),
        ("NaN", None),
        ("-5", None),
        ("-0", None),
        ("+5", None),
        (" 3 ", 3.0),
        ("\t3\t", 3.0),
        ("\u00a03", None),  # a non-breaking space is not optional whitespace
        ("3\n", None),
        ("\uff13", None),  # a full-width digit
        ("\u0663", None),  # an Arabic-Indic digit
        ("3" * 65, None),  # longer than any value a server means: not parsed
        ("x" * 100_000, None),
        ("Fri, 31 Dec 9999 23:59:59 GMT", CAP),  # far in the future
        ("Wed, 21 Oct 99999999999999 07:28:00 GMT", CAP),  # a year past any integer: the future
        ("Wed, 21 Oct 10000 07:28:00 GMT", None),  # year 10000 is no date
        ("Mon, 01 Jan 1900 00:00:00 GMT", 0.0),  # far in the past: now
        ("Wed, 31 Feb 2015 07:28:00 GMT", None),  # an impossible day
        ("Wed, 21 Oct 2015 25:28:00 GMT", None),  # an impossible hour
        ("Wed, 21 Oct 2015 07:28:00 +9999", None),  # an offset of days
        ("\x00", None),
        ("\ud800", None),  # a lone surrogate
    ],
)
def test_retry_after_hostile_values_are_clamped_or_ignored(value: str, expected: float | None) -> None:
    assert backoff.retry_after_s(value, NOW, CAP) == expected


@given(st.text(max_size=80), st.floats(min_value=0.0, max_value=86_400.0))
def test_retry_after_never_leaves_zero_to_cap(value: str, cap: float) -> None:
    wait = backoff.retry_after_s(value, NOW, cap)
    assert wait is None or 0.0 <= wait <= cap


@given(st.integers(min_value=0, max_value=10**30).map(str), st.floats(min_value=0.0, max_value=86_400.0))
def test_retry_after_delta_seconds_is_min_of_value_and_cap(value: str, cap: float) -> None:
    assert backoff.retry_after_s(value, NOW, cap) == min(float(value) if len(value) <= 10 else cap, cap)


def test_retry_after_without_a_cap_is_clamped_to_the_longest_policy_cap() -> None:
    assert backoff.retry_after_s("10000000000000", NOW) == backoff.MAX_CAP_S


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(-1.0, 0.0), (float("-inf"), 0.0), (float("inf"), CAP), (1e308, CAP), (5.0, 5.0), (float("nan"), None)],
)
def test_clamp_wait(seconds: float, expected: float | None) -> None:
    assert backoff.clamp_wait_s(seconds, CAP) == expected


@pytest.mark.parametrize("asked", [float("inf"), 1e300, 10_000_000_000_000.0, float("nan"), -5.0, None])
def test_policy_wait_never_exceeds_the_cap(asked: float | None) -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=10.0)
    wait = policy.wait_s(asked, 3, random.Random(1))
    assert 0.0 <= wait <= 10.0
    if asked is not None and asked > 10.0:
        assert wait == 10.0


@pytest.mark.parametrize("cap", [86_400.5, float("inf"), float("nan")])
def test_policy_refuses_a_cap_beyond_a_day(cap: float) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(base_s=0.0, cap_s=cap)
