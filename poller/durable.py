"""Storage calls an instance must see through: retried while the store is unavailable.

Only ``StoreUnavailable`` is retried (with backoff up to 5 s); any other error propagates to the caller
(a delivery, whose minute it poisons, or a loop of the instance's task group, which it stops)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

from tickd.poller.metrics import Metrics
from tickd.schema.errors import StoreUnavailable

# Ceiling of the wait between attempts to write a fire's outcome while Cassandra does not answer.
_MAX_STORE_RETRY_S = 5.0
T = TypeVar("T")


async def durably(
    log: FilteringBoundLogger, what: str, call: Callable[[], Awaitable[T]], metrics: Metrics | None = None
) -> T:
    """Run a storage call until it succeeds (it must be safe to repeat), backing off up to 5 s, and
    return what its successful try returned. Each failed try counts in ``metrics`` (if given) as a
    store error of operation ``what``."""
    delay = 0.1
    while True:
        try:
            return await call()
        except StoreUnavailable as exc:
            if metrics is not None:
                metrics.store_error(what)
            log.warning("store_write_retried", what=what, error=str(exc), wait_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_STORE_RETRY_S)
