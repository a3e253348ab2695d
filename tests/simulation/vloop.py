"""An asyncio event loop on virtual time: a simulated hour passes as fast as its callbacks run.

The loop never waits. When nothing is ready, asyncio asks its selector to wait until the next timer;
our selector jumps the clock to that timer instead and polls the real file descriptors (only the loop's
own self-pipe exists here) without blocking. ``loop.time()`` is the virtual clock, so ``asyncio.sleep``,
``asyncio.timeout`` and ``call_later`` all run on it. With one thread and no real I/O, the order of
callbacks depends only on the program and its seed: a run replays exactly.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
from collections import defaultdict
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

T = TypeVar("T")

# Which simulated process a callback belongs to: tasks inherit it from the task that created them.
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("ACTOR", default=None)


class Deadlock(RuntimeError):
    """Every task waits for something no timer will ever bring: the simulated system is stuck."""


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Deadlock("no task is ready and no timer is pending")
        if timeout > 0:
            self._loop.advance(timeout)
        return super().select(0)


class VirtualLoop(asyncio.SelectorEventLoop):
    """``time()`` starts at 0 and moves only when the loop would otherwise sleep.

    Actors can be frozen: while an actor is paused, every callback scheduled in its context (task
    steps, future callbacks) is parked instead of run, as if its process got SIGSTOP; its timers still
    come due, but nothing of it runs until ``resume``. A killed actor is paused for good (kill -9).
    """

    def __init__(self) -> None:
        self._virtual = 0.0
        super().__init__(_JumpingSelector(self))
        self._clock_resolution = 1e-9
        self._paused: set[str] = set()
        self._parked: defaultdict[str, list[asyncio.Handle]] = defaultdict(list)

    def time(self) -> float:
        return self._virtual

    def advance(self, seconds: float) -> None:
        self._virtual += seconds

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        ctx = context if context is not None else contextvars.copy_context()
        actor = ctx.get(ACTOR)
        if actor is not None and actor in self._paused:
            handle = asyncio.Handle(callback, args, self, ctx)
            self._parked[actor].append(handle)
            return handle
        return super().call_soon(callback, *args, context=ctx)

    def pause(self, actor: str) -> None:
        self._paused.add(actor)

    def resume(self, actor: str) -> None:
        self._paused.discard(actor)
        for handle in self._parked.pop(actor, []):
            if not handle.cancelled():
                self._ready.append(handle)  # type: ignore[attr-defined]

    def kill(self, actor: str) -> None:
        """The actor never runs again during the run (its parked steps only run at cleanup, cancelled)."""
        self._paused.add(actor)

    def release_all(self) -> None:
        """At the end of a run: let every parked step run, so leftover tasks can be cancelled."""
        for actor in list(self._paused):
            self.resume(actor)

    def is_paused(self, actor: str) -> bool:
        return actor in self._paused


class VirtualClock:
    """Wall-clock datetimes on the loop's virtual time, optionally skewed (a node's wrong clock)."""

    def __init__(self, loop: VirtualLoop, start: datetime, skew_s: float = 0.0) -> None:
        self._loop = loop
        self._start = start
        self.skew_s = skew_s

    def __call__(self) -> datetime:
        return self._start + timedelta(seconds=self._loop.time() + self.skew_s)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh virtual loop and close it."""
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        _cancel_leftovers(loop)
        loop.close()


def _cancel_leftovers(loop: VirtualLoop) -> None:
    loop.release_all()
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
