"""Which event loop a tickd process runs on: ``TICKD_EVENT_LOOP`` is ``asyncio`` (the standard
library's, the default) or ``uvloop`` (libuv underneath: less CPU per callback, socket read and timer,
which a node firing thousands of callbacks a second spends most of its time in).

Read once by each entry point (``tickd-api``, ``tickd-poller``, ``tickd-dev``); an unknown name stops the
process at start, naming the variable.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from tickd.schema.errors import ConfigError

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
CHOICES = ("asyncio", "uvloop")


def loop_factory(env: Mapping[str, str] | None = None) -> LoopFactory:
    """The factory of the event loop ``TICKD_EVENT_LOOP`` names."""
    env = os.environ if env is None else env
    choice = env.get("TICKD_EVENT_LOOP", "asyncio").strip().lower() or "asyncio"
    if choice == "asyncio":
        return asyncio.new_event_loop
    if choice == "uvloop":
        import uvloop  # only when chosen: the standard loop needs nothing more

        return uvloop.new_event_loop
    raise ConfigError(f"TICKD_EVENT_LOOP must be one of {', '.join(CHOICES)}, not {choice!r}", field="TICKD_EVENT_LOOP")


def run(main: Coroutine[Any, Any, T], factory: LoopFactory) -> T:
    """``asyncio.run`` on the chosen loop (SIGINT handling, async generators and executors closed alike)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
