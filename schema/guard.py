"""A check made before every request a store sends, set per task by whoever must stop writing at once.

A poller node frozen (a GC pause, SIGSTOP) in the middle of a multi-request write, a durable retry's
move for one, wakes up with the rest of its requests still to send. By then another node may own the
instance, have fired the row and closed its minute, and the rest of the stale move would land behind
it (found by the simulation, seed 7812). A delivery sets ``REQUEST_GUARD`` to a check that raises once
the node's lease is gone, and both adapters call ``check()`` before each request they send, so such a
write stops at its next request. A request already sent is not recalled: that is what epochs and the
compare-and-sets are for.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

REQUEST_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("tickd_request_guard", default=None)


def check() -> None:
    """Raise whatever the current task's guard raises (nothing when none is set)."""
    guard = REQUEST_GUARD.get()
    if guard is not None:
        guard()
