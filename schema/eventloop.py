"""Which event loop a tickd process runs on: ``TICKD_EVENT_LOOP`` is ``asyncio`` (the standard
library's, the default) or ``uvloop`` (libuv underneath: less CPU per callback, socket read and timer,
which a node firing thousands of callbacks a second spends most of its time in).

Read once by each entry point (``tickd-api``, ``tickd-poller``, ``tickd-dev``); an unknown name stops the
process at start, naming the variable.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from tickd.schema.errors import ConfigError

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]
CHOICES = ("asyncio", "uvloop")
# How long a thread that holds the GIL keeps it while another waits (Python's default is 5 ms).
LOOP_SWITCH_INTERVAL_S = 0.001


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


def favour_the_loop() -> None:
    """Let the event loop's thread have the GIL back within ``LOOP_SWITCH_INTERVAL_S`` of asking.

    The API runs Python in other threads beside its loop: the Cassandra driver's I/O thread and the cron
    rule searches (``service.recurring``). At the default 5 ms a request takes the GIL back from them
    several times on its way through (read, store round trips, answer), and waited that long each time:
    beside one client's 1,000-rule batch another client's single reads went from 10 ms to over 130 ms
    (``make bench-isolation``); at 1 ms they stayed under 60 ms."""
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
