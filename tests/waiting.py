"""Waiting in tests: for a condition, with a deadline, never for a fixed time.

A test that sleeps a fixed time and then asserts is a coin on a loaded machine (too short: a failure that
is not tickd's; long enough: time wasted). ``until`` returns as soon as the condition holds and fails the
test, naming what it waited for, only when it did not hold by the deadline. To show that something did
*not* happen, wait for a later event that proves the system went past the point where it would have
(``make lint`` refuses a sleep followed directly by an assertion: ``tests/checks.py``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], object | Awaitable[object]], timeout_s: float = 10.0, what: str = "", poll_s: float = 0.01
) -> None:
    """Return once ``check()`` (a function or a coroutine function) is true; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = check()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what or getattr(check, '__name__', 'the condition')}")
        await asyncio.sleep(poll_s)


class CountedOps:
    """Store faults that inject nothing and count each request by op (``schema.memory.faults``): a test
    waits for the requests that prove a loop went round, instead of sleeping."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    async def before(self, op: str) -> None:
        self.counts[op] = self.counts.get(op, 0) + 1

    async def after(self, op: str) -> None:
        return None

    async def batchlog(self, op: str) -> None:
        return None

    def __getitem__(self, op: str) -> int:
        return self.counts.get(op, 0)
