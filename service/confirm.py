"""Answer a write only once it is confirmed in time (the handlers, and the simulation's API, use this).

A one-time schedule's change must be written before its guard point (``left_s``): later, it may land
after the old version fired. A write that leaves a hot mark (a due time within the hot window) must be
confirmed within the hot-write deadline of its request time: later, it may land after the pollers'
re-reads of its minute are over. Past either, ``StoreUnavailable`` (a 503, outcome unknown), never a
success; the write itself goes on (shielded: never cut between its steps) and may still apply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import structlog

from tickd.schema import timing
from tickd.schema.errors import StoreUnavailable

T = TypeVar("T")
log = structlog.get_logger("tickd.api")


async def confirmed(
    write: Awaitable[T],
    *,
    at: datetime,
    dues: Sequence[datetime],
    left_s: float | None,
    hot_window_s: float,
    deadline_s: float,
    now: Callable[[], datetime],
) -> T:
    limits = [] if left_s is None else [left_s]
    if any(timing.is_hot(due, at, hot_window_s) for due in dues):
        limits.append(deadline_s - (now() - at).total_seconds())
    if not limits:
        return await write  # nothing to bound: no task on the common path
    task = asyncio.ensure_future(write)
    try:
        async with asyncio.timeout(max(0.0, min(limits))):
            return await asyncio.shield(task)
    except TimeoutError:
        task.add_done_callback(_settled_late)
        raise StoreUnavailable(
            "the write was not confirmed in time: it may or may not apply; read the schedule"
        ) from None


def _settled_late(task: asyncio.Future[Any]) -> None:
    """A write answered 503 finished later: its outcome is no longer anyone's; retrieve it quietly."""
    if not task.cancelled() and task.exception() is not None:
        log.info("late_write_failed", error=str(task.exception()))
