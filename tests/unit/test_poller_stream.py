"""A minute streams into the plan in due-time slices: never more rows held than the cap allows (plus one
slice), every row fired once and in order; and a row loaded by a slice read fires only once a re-read
pass begun after that read vouches for it (a change acknowledged while the read ran may be missing)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tickd.poller.loader import MinuteLoader
from tickd.poller.plan import FiringPlan
from tickd.poller.settings import PollerSettings
from tickd.schema.memory import memory_store
from tickd.schema.model import HttpCallback, InstanceKey, Location, Schedule

MINUTE = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
INSTANCE = InstanceKey("c0", 0)


def row(due: datetime, created: datetime) -> Schedule:
    return Schedule("c0", uuid.uuid4(), Location(0, due), due, b"{}", HttpCallback(url="https://x.test/"), created)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_a_backlogged_minute_streams_in_slices_under_the_row_cap() -> None:
    clock = Clock(MINUTE + timedelta(seconds=120))  # the whole minute is due: only the cap paces it
    store = memory_store(clock)
    made = [row(MINUTE + timedelta(milliseconds=100 * i), MINUTE - timedelta(hours=1)) for i in range(600)]
    for i in range(0, len(made), 50):
        await store.create_schedules(made[i : i + 50], MINUTE - timedelta(hours=1))
    settings = PollerSettings(node_id="n0", metrics_port=0, read_slice_s=5.0, plan_max_rows=60)
    plan = FiringPlan(0, clock, lambda: True, see_ahead_s=1.0, recheck_s=0.05)
    loader = MinuteLoader(INSTANCE, store, plan, settings, clock, structlog.get_logger("test"))

    state = plan.open_minute(MINUTE, clock.now, 4.0)
    stream = asyncio.create_task(loader._stream(state))
    fired: list[Schedule] = []
    most_held = 0
    while len(fired) < len(made):
        plan.marks_polled(clock.now)
        plan.reread_pass_done(plan.reread_pass_begins())  # what the loader's re-read loop does
        most_held = max(most_held, plan.pending_through(MINUTE))
        taken = await asyncio.wait_for(plan.take_due(10), 5)
        for r in taken:
            plan.end_fire(plan.start_fire(r), settled=True)
        fired += taken
    await asyncio.wait_for(stream, 5)

    assert [r.schedule_id for r in fired] == [r.schedule_id for r in made]  # each once, in due order
    assert most_held <= 60 + 50  # the cap, plus the one slice (5 s of rows) read when under it
    assert state.horizon is None and state.reads == 0  # all of it read: the minute may close


async def test_a_sliced_row_waits_for_a_re_read_pass_begun_after_its_read() -> None:
    clock = Clock(MINUTE + timedelta(seconds=20))
    plan = FiringPlan(0, clock, lambda: True, see_ahead_s=1.0, recheck_s=0.01)
    state = plan.open_minute(MINUTE, clock.now, 4.0)
    plan.marks_polled(clock.now)

    # A row beyond what is loaded (a retry this owner stored) is left to the slice read that reaches it.
    plan.consider(row(MINUTE + timedelta(seconds=21), clock.now))
    assert plan.pending_through(MINUTE) == 0

    read = plan.slice_reading(state, MINUTE + timedelta(seconds=30), began=clock.now)
    late = row(MINUTE + timedelta(seconds=22), clock.now)
    plan.consider(late)  # in the slice being read: taken, as its read brings it
    clock.now += timedelta(seconds=1)
    plan.marks_polled(clock.now)  # polls go on while the slice is read: they do not vouch for it
    covered = plan.reread_pass_begins()  # a pass that begins before the read ends does not cover it
    plan.slice_read(read)
    plan.reread_pass_done(covered)

    clock.now = late.location.due_at + timedelta(seconds=1)
    plan.marks_polled(clock.now)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(plan.take_due(10), 0.1)
    plan.reread_pass_done(plan.reread_pass_begins())  # a pass begun after the read: now it may fire
    taken = await asyncio.wait_for(plan.take_due(10), 1)
    assert [r.schedule_id for r in taken] == [late.schedule_id]


async def test_re_reads_stop_at_the_loaded_horizon() -> None:
    """A hot mark's re-read finds only rows the plan may hold: one past the horizon waits for its slice."""
    clock = Clock(MINUTE + timedelta(seconds=1))
    store = memory_store(clock)
    settings = PollerSettings(node_id="n0", metrics_port=0)
    plan = FiringPlan(0, clock, lambda: True, see_ahead_s=1.0, recheck_s=0.05)
    loader = MinuteLoader(INSTANCE, store, plan, settings, clock, structlog.get_logger("test"))
    state = plan.open_minute(MINUTE, clock.now, 4.0)
    read = plan.slice_reading(state, MINUTE + timedelta(seconds=10), clock.now)
    assert await loader.read(MINUTE, MINUTE, MINUTE + timedelta(seconds=10)) == 0
    plan.slice_read(read)

    near, far = row(MINUTE + timedelta(seconds=5), clock.now), row(MINUTE + timedelta(seconds=40), clock.now)
    await store.create_schedules([near, far], clock.now)
    await loader.reread(MINUTE, MINUTE)
    assert plan.pending_through(MINUTE) == 1  # ``near`` only: ``far`` comes with the slice that reaches it
    assert state.horizon == MINUTE + timedelta(seconds=10) and state.reads == 0
