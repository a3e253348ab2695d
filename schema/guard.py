"""A check made before every request a store sends, set per task by whoever must stop writing at once.

A poller node frozen (a GC pause, SIGSTOP) in the middle of a multi-request write, a durable retry's
move for one, wakes up with the rest of its requests still to send. By then another node may own the
instance, have fired the row and closed its minute, and the rest of the stale move would land behind
it (found by the simulation, seed 7812). A delivery sets a guard: a check that raises once
the node's lease is gone, and the bridge calls ``check()`` before each request it sends (on either
session), so such a write stops at its next request. A request already sent is not recalled: that is what epochs and the
compare-and-sets are for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_GUARD: ContextVar[tuple[asyncio.Task[Any], Callable[[], None]] | None] = ContextVar("tickd_guard", default=None)


def set_guard(check: Callable[[], None]) -> None:
    """Guard the current task's store requests with ``check`` (which raises to refuse one). Only this
    task's: tasks it starts inherit the context but not the guard (they are not its writes)."""
    task = asyncio.current_task()
    assert task is not None
    _GUARD.set((task, check))


def check() -> None:
    """Raise whatever the current task's guard raises (nothing when none is set)."""
    guard = _GUARD.get()
    if guard is not None and guard[0] is asyncio.current_task():
        guard[1]()


def current() -> Callable[[], None] | None:
    """The current task's guard, if it has one."""
    guard = _GUARD.get()
    return guard[1] if guard is not None and guard[0] is asyncio.current_task() else None


async def under(check: Callable[[], None], work: Awaitable[T]) -> T:
    """Await ``work`` (a coroutine: it runs in the awaiting task) guarded by ``check``: a store's fan-out
    of one write (``schema.aio.gather``) in tasks of their own is still the guarded task's write."""
    set_guard(check)
    return await work
