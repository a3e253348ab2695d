"""``aio.gather``: a task cancelled while a request it gathers fails in the same turn of the loop gets
its cancel, not the request's error (which retry loops catch: seed 56448's instance never stopped)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tickd.schema import aio
from tickd.schema.errors import StoreUnavailable

Gather = Callable[..., Awaitable[Any]]


async def _retry_loop_cancelled_as_a_request_fails(gather: Gather) -> str:
    """A loop that retries on StoreUnavailable (as the outcome writer does); its task is cancelled in the
    turn in which one of its two gathered requests fails. What does the loop see?"""
    me: list[asyncio.Task[str]] = []

    async def failing() -> None:
        await asyncio.sleep(0)
        asyncio.get_running_loop().call_soon(me[0].cancel)  # the stop lands right behind the failure
        raise StoreUnavailable("Unavailable")

    async def slow() -> None:
        await asyncio.sleep(10)

    async def loop() -> str:
        try:
            await gather(failing(), slow())
        except StoreUnavailable:
            return "went on, its cancel swallowed"
        return "finished"

    task = asyncio.create_task(loop())
    me.append(task)
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


async def test_the_race_swallows_a_cancel_with_asyncio_gather() -> None:
    # The defect itself (Python 3.11): if this ever says "cancelled", aio.gather may be retired.
    assert await _retry_loop_cancelled_as_a_request_fails(asyncio.gather) == "went on, its cancel swallowed"


async def test_aio_gather_hands_the_cancel_over() -> None:
    assert await _retry_loop_cancelled_as_a_request_fails(aio.gather) == "cancelled"


async def test_aio_gather_otherwise_is_gather() -> None:
    async def value(n: int) -> int:
        await asyncio.sleep(0)
        return n

    assert await aio.gather(value(1), value(2)) == [1, 2]

    async def fails() -> None:
        raise StoreUnavailable("down")

    with pytest.raises(StoreUnavailable):
        await aio.gather(fails(), value(3))
