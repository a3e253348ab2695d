"""A time budget for all the store requests of one piece of work (an API request), so that its answer,
a 503 if the store is slow, comes within a known bound however many requests it takes.

Each request a store sends is bounded on its own by the driver's request timeout, but a create is several
in turn (an Idempotency-Key reservation, sent again once if it timed out; a batch; without a batchlog, up
to four phases), and each can wait for a replica that has gone silent. Under ``budget(seconds)`` every
request gets only what is left of the budget, counted from the first one sent (not from the request's
arrival: a slow upload is the body reader's bound), and none is sent once it is spent. Tasks started
inside the budget share it, as the writes of a request's create group do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from tickd.schema.errors import StoreUnavailable


@dataclass(slots=True, eq=False)
class _Budget:
    seconds: float
    ends: float | None = None


_BUDGET: ContextVar[_Budget | None] = ContextVar("tickd_store_budget", default=None)


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """The store requests made inside share ``seconds`` (of the event loop's clock)."""
    token = _BUDGET.set(_Budget(seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def share_left() -> float | None:
    """The share of the budget not yet spent (1.0 before its first request; None: no budget), for work
    that can stop early with part of an answer, as a listing page can, rather than spend it all."""
    held = _BUDGET.get()
    if held is None:
        return None
    if held.ends is None:
        return 1.0
    return max(0.0, held.ends - asyncio.get_running_loop().time()) / held.seconds


def left_s(what: str) -> float | None:
    """The time left for the request ``what`` about to be sent (None: no budget), starting the budget's
    clock on its first request; ``StoreUnavailable`` once it is spent, before anything is sent."""
    held = _BUDGET.get()
    if held is None:
        return None
    now = asyncio.get_running_loop().time()
    if held.ends is None:
        held.ends = now + held.seconds
    left = held.ends - now
    if left <= 0:
        raise StoreUnavailable(f"{what}: not sent, the {held.seconds:g} s the store had for this request are spent")
    return left
