"""The oracle's rule for rows left scheduled behind a checkpoint (``World.left_behind``): a loss, unless
every write to the row was sent before its fire was completed (a stale owner's late write, seed 12016)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from tests.simulation import vloop
from tests.simulation.world import SimConfig, World
from tickd.schema.memory.engine import micros
from tickd.schema.model import HttpCallback, Location, Schedule


async def _check() -> list[bool]:
    world = World(SimConfig(seed=1))
    now = world.true_clock()
    row = Schedule(
        client_id="c0",
        schedule_id=uuid.uuid4(),
        location=Location(0, now + timedelta(seconds=30)),
        fire_at=now + timedelta(seconds=30),
        payload=b"{}",
        callback=HttpCallback(url="http://127.0.0.1:9/cb"),
        created_at=now,
    )
    await world.memory.create_schedule(row, now)
    written = micros(now)
    seen = [world.left_behind(row)]  # never completed: a loss
    world.oracle.completed_us[row.fire_id] = written + 1_000_000
    seen.append(world.left_behind(row))  # written before its fire completed: a stale copy
    world.oracle.completed_us[row.fire_id] = written - 1
    seen.append(world.left_behind(row))  # written after: a loss
    return seen


def test_only_rows_written_before_their_fire_completed_are_stale_copies() -> None:
    assert vloop.run(_check()) == [True, False, True]
