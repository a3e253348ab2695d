"""``gather`` for code that catches the errors of what it gathers: a cancel is never turned into one.

Python 3.11's ``asyncio.gather``, cancelled while one of its awaitables fails in the same turn of the
loop, raises that awaitable's error instead of ``CancelledError``. A caller that retries on that error
(``StoreUnavailable``: the outcome writer, ``durably``, the node's loops) then swallows its own
cancellation and runs on: the instance it belongs to never stops, and a node's SIGTERM never
finishes (simulation seed 56448: a paused node resumed, its parked store requests failed in the very
turn the node stopped its instances). Here the caller's pending cancel wins, as it would have had the
failure come a moment later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from tickd.schema import guard

T = TypeVar("T")


async def gather(*aws: Awaitable[T]) -> list[T]:
    """``asyncio.gather(*aws)``; if it fails while the calling task is being cancelled, the cancel. The
    calling task's store guard (``schema.guard``) guards what it gathers too: a fire's write fanned out
    (``schema.batchlog.send_in_phases`` after a batch could not be logged) stops at the lease as the rest
    of the fire does (simulation seed 440102: a node's batch in flight 32 s, past the instance's handover,
    then sent again unlogged from tasks no guard covered; the stale row it wrote was left behind the next
    owner's checkpoint)."""
    check = guard.current()
    if check is not None:
        aws = tuple(guard.under(check, aw) for aw in aws)
    try:
        return list(await asyncio.gather(*aws))
    except Exception as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError() from exc
        raise


async def gather_limited(calls: Iterable[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """``gather`` of what ``calls`` return, in order, at most ``limit`` running at a time. A call is made
    only once it has a place, so a cancelled gather leaves no awaitable made and never awaited."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return await gather(*(one(call) for call in calls))
