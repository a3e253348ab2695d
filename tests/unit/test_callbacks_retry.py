import dataclasses
import random

import pytest
import structlog
from structlog.testing import capture_logs

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.retry import Retrier
from tickd.poller.delivery import DeliveryResult

_LOGGER: structlog.typing.FilteringBoundLogger = structlog.get_logger("tickd.callbacks")


def log() -> structlog.typing.FilteringBoundLogger:
    return _LOGGER


class FakeTime:
    """A clock that only moves when the retrier sleeps (or an attempt says it took time)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def scripted(*results: DeliveryResult) -> tuple[list[int], object]:
    calls: list[int] = []

    async def attempt(n: int) -> DeliveryResult:
        calls.append(n)
        template = results[min(len(calls), len(results)) - 1]
        return dataclasses.replace(template, attempts=n)

    return calls, attempt


def retrier(time: FakeTime, give_up: bool = True, **policy: float) -> Retrier:
    return Retrier(RetryPolicy(**policy), give_up=give_up, rng=random.Random(1), clock=time.clock, sleep=time.sleep)  # type: ignore[arg-type]


FAIL = DeliveryResult.failed(0, "HTTP 500", retriable=True, status_code=500)
OK = DeliveryResult.delivered(0, 200)


async def test_retries_until_delivered() -> None:
    time = FakeTime()
    calls, attempt = scripted(FAIL, FAIL, OK)
    with capture_logs() as logs:
        result = await retrier(time).run(attempt, 1, log)  # type: ignore[arg-type]
    assert result.ok and result.attempts == 3 and calls == [1, 2, 3]
    assert [e["event"] for e in logs] == ["callback_retried", "callback_retried"]
    assert all(0 <= s <= 0.5 * 2**i for i, s in enumerate(time.sleeps))


async def test_gives_up_after_max_attempts() -> None:
    time = FakeTime()
    calls, attempt = scripted(FAIL)
    with capture_logs() as logs:
        result = await retrier(time, max_attempts=3, base_s=0.01).run(attempt, 1, log)  # type: ignore[arg-type]
    assert (result.ok, result.retriable, result.attempts, result.status_code) == (False, False, 3, 500)
    assert calls == [1, 2, 3]
    assert logs[-1]["event"] == "callback_failed"


async def test_resumed_delivery_counts_earlier_attempts() -> None:
    calls, attempt = scripted(FAIL)
    result = await retrier(FakeTime(), max_attempts=5, base_s=0.01).run(attempt, 4, log)  # type: ignore[arg-type]
    assert calls == [4, 5] and result.attempts == 5 and not result.retriable


async def test_hands_back_when_budget_is_spent() -> None:
    time = FakeTime()
    calls, attempt = scripted(FAIL)
    with capture_logs() as logs:
        result = await retrier(time, max_attempts=1000, base_s=1.0, cap_s=1.0, inline_budget_s=2.5).run(attempt, 1, log)  # type: ignore[arg-type]
    assert result.retriable and not result.ok
    assert sum(time.sleeps) <= 2.5
    assert result.retry_after_s is not None and sum(time.sleeps) + result.retry_after_s > 2.5
    assert result.attempts == len(calls)
    assert logs[-1]["event"] == "callback_deferred"


async def test_zero_budget_means_one_attempt() -> None:
    calls, attempt = scripted(FAIL)
    result = await retrier(FakeTime(), inline_budget_s=0.0).run(attempt, 1, log)  # type: ignore[arg-type]
    assert calls == [1] and result.retriable and result.retry_after_s is not None


async def test_retry_after_is_a_minimum_wait() -> None:
    time = FakeTime()
    throttled = DeliveryResult.failed(0, "HTTP 429", retriable=True, retry_after_s=3.0, status_code=429)
    _, attempt = scripted(throttled, OK)
    result = await retrier(time, base_s=0.01, inline_budget_s=10).run(attempt, 1, log)  # type: ignore[arg-type]
    assert result.ok and time.sleeps == [3.0]


async def test_retry_after_beyond_budget_is_handed_back() -> None:
    throttled = DeliveryResult.failed(0, "HTTP 503", retriable=True, retry_after_s=50.0, status_code=503)
    calls, attempt = scripted(throttled)
    result = await retrier(FakeTime()).run(attempt, 1, log)  # type: ignore[arg-type]
    assert calls == [1] and result.retriable and result.retry_after_s == 50.0


async def test_retry_after_beyond_the_cap_is_handed_back_clamped() -> None:
    """A server's wait longer than the policy's cap (here 60 s) is the cap: never a fire parked for years."""
    throttled = DeliveryResult.failed(0, "HTTP 503", retriable=True, retry_after_s=1e13, status_code=503)
    calls, attempt = scripted(throttled)
    result = await retrier(FakeTime()).run(attempt, 1, log)  # type: ignore[arg-type]
    assert calls == [1] and result.retriable and result.retry_after_s == 60.0


async def test_permanent_failure_is_not_retried() -> None:
    time = FakeTime()
    calls, attempt = scripted(DeliveryResult.failed(0, "HTTP 400", retriable=False, status_code=400))
    result = await retrier(time).run(attempt, 1, log)  # type: ignore[arg-type]
    assert calls == [1] and not result.retriable and time.sleeps == []


async def test_without_give_up_an_outage_stays_retriable() -> None:
    calls, attempt = scripted(FAIL)
    result = await retrier(FakeTime(), give_up=False, max_attempts=2, base_s=0.01).run(attempt, 7, log)  # type: ignore[arg-type]
    assert result.retriable and len(calls) > 2


async def test_first_result_and_start_time_can_be_given() -> None:
    time = FakeTime()
    calls, attempt = scripted(OK)
    result = await retrier(time).run(attempt, 1, log, first=FAIL, started_at=time.now)  # type: ignore[arg-type]
    assert result.ok and calls == [2]


async def test_a_timed_out_attempt_leaves_the_call_maybe_received() -> None:
    """A timeout (the subscriber may have the request), then a refused connection: the call's result
    still says maybe received, so a throttled event keeps its token."""
    timeout = DeliveryResult.failed(0, "timeout", retriable=True, maybe_received=True)
    refused = DeliveryResult.failed(0, "refused", retriable=True)
    _, attempt = scripted(timeout, refused)
    result = await retrier(FakeTime(), max_attempts=2, base_s=0.01).run(attempt, 1, log)  # type: ignore[arg-type]
    assert (result.ok, result.maybe_received) == (False, True)
    _, attempt = scripted(refused)
    result = await retrier(FakeTime(), max_attempts=2, base_s=0.01).run(attempt, 1, log)  # type: ignore[arg-type]
    assert not result.maybe_received


async def test_the_result_says_when_each_attempt_went_out_and_how_it_ended() -> None:
    """Issue 28: a run and a dead letter show every attempt, in-memory retries included."""
    time = FakeTime()
    _, attempt = scripted(FAIL, FAIL, OK)
    result = await retrier(time).run(attempt, 2, log)  # type: ignore[arg-type]  # a durable retry's call
    assert [(n, error) for n, _, error in result.sent] == [(2, "HTTP 500"), (3, "HTTP 500"), (4, None)]
    offsets = [after_s for _, after_s, _ in result.sent]
    assert offsets == pytest.approx([0.0, time.sleeps[0], time.sleeps[0] + time.sleeps[1]])
