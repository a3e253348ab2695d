"""Run one seed of the simulation and say what broke.

``python -m tests.simulation --seeds 1000`` runs many (``make simulate SEEDS=N``); pytest runs a sample
and the regression seeds (``test_simulation.py``). A run is a pure function of its seed and config:
``python -m tests.simulation --seed 1234 -v`` replays one exactly, with the log of the last events.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import structlog

from tests.simulation import vloop
from tests.simulation.workload import Workload
from tests.simulation.world import SimConfig, World, _rows
from tickd.schema.model import InstanceKey, Status


@dataclass(frozen=True)
class Outcome:
    seed: int
    violations: list[str]
    deliveries: int
    promises: int
    fingerprint: str  # a digest of every delivery: equal for two runs of one seed
    log_tail: list[str]
    virtual_s: float

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        head = f"seed {self.seed}: {len(self.violations)} violation(s), {self.deliveries} deliveries, "
        head += f"{self.promises} acknowledged schedules, {self.virtual_s:.0f} s simulated"
        lines = [head, *(f"  - {v}" for v in self.violations[:30])]
        if self.violations:
            lines.append(f"  replay: PYTHONHASHSEED=0 .venv/bin/python -m tests.simulation --seed {self.seed} -v")
        return "\n".join(lines)


def run_seed(seed: int, **overrides: Any) -> Outcome:
    config = replace(SimConfig(seed=seed), **overrides)
    with _captured_logs() as tail:
        violations, world = vloop.run(_simulate(config))
    oracle = world.oracle
    digest = hashlib.sha256(repr(oracle.deliveries).encode()).hexdigest()[:16]
    return Outcome(
        seed,
        violations,
        len(oracle.deliveries),
        len(oracle.promises),
        digest,
        list(tail),
        world.loop.time(),
    )


async def _simulate(config: SimConfig) -> tuple[list[str], World]:
    world = World(config)
    # The workload takes run_s + settle_s and its heal; a run far past that is stuck, not slow.
    limit_s = 2 * (config.run_s + config.settle_s + config.settle_extra_s) + 300
    try:
        async with asyncio.timeout(limit_s):
            await Workload(world).run()
    except TimeoutError:
        world.oracle.saw(f"the run did not end within {limit_s:.0f} simulated seconds")
        return world.oracle.violations(), world
    await _sweep_checkpoints(world)
    return world.oracle.violations(), world


async def _sweep_checkpoints(world: World) -> None:
    """After the run: no instance's checkpoint has a still-scheduled row at or before it."""
    store = world.memory
    clients = await world.oracle_call(store.list_clients)
    for client in clients:
        for poller_id in range(client.poller_span):
            key = InstanceKey(client.client_id, poller_id)
            checkpoint = await world.oracle_call(lambda k=key: store.get_checkpoint(k))  # type: ignore[misc]
            if checkpoint is None:
                continue
            minute = world.start.replace(second=0, microsecond=0)
            while minute <= checkpoint.minute:
                rows = await world.oracle_call(lambda k=key, m=minute: _rows(store, k, m))  # type: ignore[misc]
                for row in rows:
                    if row.status is Status.SCHEDULED and world.left_behind(row):
                        world.oracle.saw(f"end: {key} checkpoint {checkpoint.minute} passes {row.schedule_id}")
                minute += timedelta(minutes=1)


def _loop_time() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return -1.0


@contextmanager
def _captured_logs(keep: int = 400) -> Iterator[deque[str]]:
    """Nodes log as in production; the simulation keeps the last lines (printed for a failing seed)."""
    tail: deque[str] = deque(maxlen=keep)
    old = structlog.get_config()

    def keep_line(_: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        tail.append(f"{_loop_time():8.2f} {method} {event.pop('event', '')} {dict(event)}")
        raise structlog.DropEvent

    structlog.configure(processors=[keep_line], cache_logger_on_first_use=False)
    try:
        yield tail
    finally:
        structlog.configure(**old)
