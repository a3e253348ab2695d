"""The in-memory retry loop both dispatchers run around their single attempts.

An attempt returns a ``DeliveryResult`` for that one try. The loop sleeps between retriable failures
(backoff with full jitter, at least the server's Retry-After) while the time since the first attempt
stays within the policy's inline budget; past it, the fire is handed back as retriable with the next
delay, so the engine stores a durable retry instead of holding the fire in memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.delivery import DeliveryResult
from tickd.schema.model import Schedule

Attempt = Callable[[int], Awaitable[DeliveryResult]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]
# Binds the fire's ids to a logger; called only when there is something to log (not per success).
LogFactory = Callable[[], structlog.typing.FilteringBoundLogger]

logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("tickd.callbacks")


def fire_logger(schedule: Schedule, channel: str) -> LogFactory:
    """A ``LogFactory`` for one fire: its ids are formatted only if something is logged."""
    return lambda: logger.bind(
        client_id=schedule.client_id, schedule_id=str(schedule.schedule_id), fire_id=schedule.fire_id, channel=channel
    )


class Retrier:
    """Runs the attempts of one fire under a ``RetryPolicy``.

    ``give_up``: whether ``max_attempts`` ends retrying with a final failure (HTTP: the endpoint keeps
    failing). Kafka passes False: a broker outage is tickd's problem, not the subscriber's, so its fires
    stay retriable however long the outage lasts.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        give_up: bool = True,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.policy = policy
        self._give_up = give_up
        self._rng = rng or random.Random()
        self._clock = clock
        self._sleep = sleep

    async def run(
        self,
        attempt_fn: Attempt,
        first_attempt: int,
        log: LogFactory,
        *,
        first: DeliveryResult | None = None,
        started_at: float | None = None,
    ) -> DeliveryResult:
        """Attempt ``first_attempt`` (or take its result ``first``) and retry as the policy allows."""
        started = self._clock() if started_at is None else started_at
        attempt = first_attempt
        result = first if first is not None else await attempt_fn(attempt)
        sent = [(attempt, 0.0, result.error)]  # each attempt: when, after the first, and its error
        maybe_received = False  # any attempt of this call may have reached the subscriber
        while True:
            maybe_received = maybe_received or result.maybe_received
            step = self._next_step(result, attempt, started, log)
            if isinstance(step, DeliveryResult):
                final = dataclasses.replace(step, maybe_received=maybe_received) if not step.ok else step
                return dataclasses.replace(final, sent=tuple(sent))
            log().info("callback_retried", attempt=attempt, error=result.error, wait_s=round(step, 3))
            await self._sleep(step)
            attempt += 1
            at_s = self._clock() - started
            result = await attempt_fn(attempt)
            sent.append((attempt, at_s, result.error))

    def _next_step(
        self, result: DeliveryResult, attempt: int, started: float, log: LogFactory
    ) -> DeliveryResult | float:
        """The final result of this call, or how long to sleep before the next attempt."""
        if result.ok:
            return result
        if not result.retriable or (self._give_up and attempt >= self.policy.max_attempts):
            log().warning("callback_failed", attempts=attempt, error=result.error, status_code=result.status_code)
            return DeliveryResult.failed(
                attempt, result.error or "failed", retriable=False, status_code=result.status_code
            )
        wait = self._wait_s(result, attempt)
        if self._clock() + wait - started > self.policy.inline_budget_s:
            log().info("callback_deferred", attempts=attempt, error=result.error, retry_after_s=round(wait, 3))
            return DeliveryResult.failed(
                attempt, result.error or "failed", retriable=True, retry_after_s=wait, status_code=result.status_code
            )
        return wait

    def _wait_s(self, result: DeliveryResult, attempt: int) -> float:
        return self.policy.wait_s(result.retry_after_s, attempt, self._rng)
