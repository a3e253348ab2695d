"""The last read of a minute before its checkpoint: a row that landed with no hot mark to tell of it (a
create answered too late to be acknowledged, whose mark lost to a newer one) is fired, not passed.

The simulation found it (seed 5530 at 5fc62d2): the create's batch was held up 5 s in the store, so
its hot mark carried an older write timestamp than the mark a poller had written meanwhile and never
showed; the row sat "scheduled" behind the checkpoint for good, and a retry of the create with its
Idempotency-Key would have answered 200 for a schedule that never fires."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import structlog

from tickd.poller.checkpoint import Checkpointer
from tickd.poller.loader import MinuteLoader
from tickd.poller.metrics import Metrics
from tickd.poller.plan import FiringPlan
from tickd.poller.settings import PollerSettings
from tickd.schema.memory import memory_store
from tickd.schema.model import Client, HttpCallback, InstanceKey, Location, Schedule

MINUTE = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = MINUTE - timedelta(seconds=5)

    def __call__(self) -> datetime:
        return self.now


async def _read_whole(plan: FiringPlan, loader: MinuteLoader, clock: Clock, settings: PollerSettings) -> int:
    """Open MINUTE, read it whole as one slice, and run a re-read pass after it (as the loader's loop
    does); the rows read."""
    state = plan.open_minute(MINUTE, clock.now, settings.mark_settle_s)
    read = plan.slice_reading(state, None, clock.now)
    rows = await loader.read(MINUTE, None)
    plan.slice_read(read)
    plan.reread_pass_done(plan.reread_pass_begins())
    return rows


async def test_a_row_landing_unmarked_is_fired_before_the_checkpoint_passes_it() -> None:
    clock = Clock()
    store = memory_store(clock)
    born = clock.now - timedelta(days=1)
    client = Client("c0", 1, True, "hash", born, born)
    await store.create_client(client)
    instance = InstanceKey("c0", 0)
    claim = await store.claim(instance, "n0", None, clock.now)
    assert claim is not None
    settings = PollerSettings(node_id="n0", metrics_port=0)
    plan = FiringPlan(0, clock, lambda: True, see_ahead_s=1.0, recheck_s=0.5)
    log = structlog.get_logger("test")
    loader = MinuteLoader(instance, store, plan, settings, clock, log)
    checkpoints = Checkpointer(claim, lambda: client, store, plan, settings, Metrics(), clock, log, loader.sweep)

    assert await _read_whole(plan, loader, clock, settings) == 0
    # The late row: written straight into the partition, as a held-up batch lands (no mark is polled).
    due = MINUTE + timedelta(seconds=30)
    row = Schedule("c0", uuid.uuid4(), Location(0, due), due, b"{}", HttpCallback(url="https://x.test/"), clock.now)
    await store.create_schedule(row, clock.now - timedelta(seconds=60))  # not hot then: no mark at all

    clock.now = MINUTE + timedelta(seconds=60 + settings.minute_close_s + settings.sweep_spread_s + 1)
    plan.marks_polled(clock.now)  # a mark poll after the close point saw nothing new
    await checkpoints.close_ready_minutes()

    assert await store.get_checkpoint(instance) is None  # not passed ...
    assert plan.open[MINUTE].pending == 1  # ... but planned: it fires next
    taken = await plan.next_due()
    assert taken.schedule_id == row.schedule_id


async def test_each_instance_closes_its_minute_at_its_own_offset() -> None:
    """The last whole read, and so the checkpoint, waits for the instance's offset after the close point
    (instances of one node spread their whole-minute reads instead of making them at once)."""
    clock = Clock()
    store = memory_store(clock)
    born = clock.now - timedelta(days=1)
    client = Client("c0", 16, True, "hash", born, born)
    await store.create_client(client)
    settings = PollerSettings(node_id="n0", metrics_port=0, sweep_spread_s=20.0)
    log = structlog.get_logger("test")
    closed_at: dict[int, float] = {}
    for poller_id in (0, 5, 11):
        instance = InstanceKey("c0", poller_id)
        claim = await store.claim(instance, "n0", None, clock.now)
        assert claim is not None
        plan = FiringPlan(poller_id, clock, lambda: True, see_ahead_s=1.0, recheck_s=0.5)
        loader = MinuteLoader(instance, store, plan, settings, clock, log)
        checkpoints = Checkpointer(claim, lambda: client, store, plan, settings, Metrics(), clock, log, loader.sweep)
        clock.now = MINUTE - timedelta(seconds=5)
        await _read_whole(plan, loader, clock, settings)
        for tenth in range(0, 260):
            clock.now = MINUTE + timedelta(seconds=60 + settings.minute_close_s + tenth / 10)
            plan.marks_polled(clock.now)
            await checkpoints.close_ready_minutes()
            if MINUTE not in plan.open:
                closed_at[poller_id] = tenth / 10
                break
        checkpoint = await store.get_checkpoint(instance)
        assert checkpoint is not None and checkpoint.minute == MINUTE
    offsets = sorted(closed_at.values())
    assert len(closed_at) == 3 and all(0 <= o <= settings.sweep_spread_s for o in offsets)
    assert offsets[-1] - offsets[0] >= 3.0, closed_at  # not all at the close point
