"""``aio.gather``: a task cancelled while a request it gathers fails in the same turn of the loop gets
its cancel, not the request's error (which retry loops catch: seed 56448's instance never stopped)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tickd.poller.errors import LeaseLost
from tickd.schema import aio, batchlog, guard
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


async def test_what_a_guarded_task_gathers_is_guarded_too() -> None:
    """A fire's write fanned out (a batch sent again unlogged, phase by phase, ``schema.batchlog``) is the
    fire's: once its lease is gone, no part of it is sent (seed 440102: the stale node's unlogged phases,
    gathered in tasks of their own, went out past the lease and left a stale row behind the next owner's
    checkpoint). A task with no guard gathers unguarded, as before."""
    sent: list[str] = []

    async def send(writes: list[tuple[str, dict[str, Any]]], *, logged: bool) -> None:
        guard.check()  # as the store's bridge does before each request
        sent.extend(name for name, _ in writes)

    writes = [("insert_schedule", {}), ("mark_hot", {}), ("set_status", {})]
    lease = {"held": True}

    def check() -> None:
        if not lease["held"]:
            raise LeaseLost("gone")

    async def fire() -> None:
        guard.set_guard(check)
        await batchlog.send_in_phases(writes, [n for n, _ in writes], send)

    await asyncio.create_task(fire())
    assert sorted(sent) == sorted(n for n, _ in writes)
    sent.clear()
    lease["held"] = False
    with pytest.raises(LeaseLost):
        await asyncio.create_task(fire())
    assert sent == []
    await batchlog.send_in_phases(writes, [n for n, _ in writes], send)  # no guard here: all sent
    assert sorted(sent) == sorted(n for n, _ in writes)
