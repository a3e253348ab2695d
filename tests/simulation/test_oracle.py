"""The oracle's rules where a first version proved too strict: rows left scheduled behind a checkpoint
(``World.left_behind``: a loss, unless every write to the row was sent before its fire was completed; a
stale owner's late write, seed 12016), and versions in doubt after a later change (``_late_maybes``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from tests.simulation import vloop
from tests.simulation.oracle import Delivery, Oracle, Promise
from tests.simulation.world import SimConfig, World
from tickd.schema import timing
from tickd.schema.memory.engine import micros
from tickd.schema.model import HttpCallback, InstanceKey, Location, Options, Repeat, Run, Schedule, Status

EPOCH = datetime(2030, 1, 1, tzinfo=UTC)  # the virtual clock's start (only the missed-fire checks read it)


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
    seen.append(world.left_behind(row))  # written after it was given up on: a loss (a redrive's row is one)
    world.oracle.delivered_us[row.fire_id] = written - 1
    seen.append(world.left_behind(row))  # written after it was delivered: a copy, nothing owed (seed 631861)
    world.oracle.dead_letters.add(row.fire_id)
    seen.append(world.left_behind(row))  # delivered once, but dead-lettered since: its redrive is owed
    return seen


def test_only_rows_written_before_their_fire_completed_are_stale_copies() -> None:
    assert vloop.run(_check()) == [True, False, True, False, True]


async def _check_skipped() -> list[bool]:
    """An occurrence given up by its missed-fire policy (its run recorded skipped) is finished then."""
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
        options=Options(repeat=Repeat(every_s=5)),
        seq=1,
    )
    await world.memory.create_schedule(row, now)
    seen = [world.left_behind(row)]  # neither delivered nor skipped: a loss
    skip = Run(row.fire_at, Status.SKIPPED, 0, None, "skipped: missed", seq=1)
    await world.memory.add_runs("c0", row.schedule_id, [skip])  # written after the row: a stale copy
    seen.append(world.left_behind(row))
    return seen


def test_a_row_of_an_occurrence_recorded_skipped_before_it_was_written_is_a_stale_copy() -> None:
    assert vloop.run(_check_skipped()) == [True, False]


def _late_maybe_verdicts(expanded_at: float | None, delivered_at: float, event: bool) -> list[str]:
    """A version in doubt (a reschedule's answer was lost), then a cancel acknowledged at t=50: its
    fire or one of its events delivered at ``delivered_at``."""
    sid = uuid.uuid4()
    now = datetime(2030, 1, 1, tzinfo=UTC)
    promise = Promise("c0", sid, now, events=3 if event else 0)
    promise.unsure(promise.fire_id)
    promise.settled(50.0)
    promise.cancelled_at = now
    oracle = Oracle(guard_s=2.0, start=EPOCH)
    oracle.promises[sid] = promise
    if expanded_at is not None:
        oracle.expanded_at[promise.fire_id] = expanded_at
    key = f"{promise.fire_id}:1" if event else None
    instance = InstanceKey("c0", 0)
    oracle.deliveries.append(Delivery(delivered_at, "n0#1", instance, 1, promise.fire_id, key, sid, 1, True))
    return oracle.violations()


def test_a_doubtful_fire_is_judged_by_when_it_fired_and_its_events_by_when_it_expanded() -> None:
    """Seed 54851: a batch trigger's version in doubt expanded before the cancel was acknowledged; its
    events then went out over the window, after the cancel. Not a violation; an expansion after it is."""
    assert _late_maybe_verdicts(expanded_at=45.0, delivered_at=66.0, event=True) == []
    assert "expanded at t=58.00" in _late_maybe_verdicts(expanded_at=58.0, delivered_at=66.0, event=True)[0]
    assert "delivered at t=66.00" in _late_maybe_verdicts(expanded_at=None, delivered_at=66.0, event=False)[0]
    assert _late_maybe_verdicts(expanded_at=None, delivered_at=54.0, event=False) == []  # within the grace


def _cancel_verdicts(delivered_at: float) -> list[str]:
    """A fire in retry cancelled (acknowledged at t=50); an attempt of it delivered at ``delivered_at``
    whose outcome its node never recorded (it crashed)."""
    sid = uuid.uuid4()
    now = datetime(2030, 1, 1, tzinfo=UTC)
    promise = Promise("c0", sid, now)
    promise.cancelled_at, promise.cancelled_t = now + timedelta(seconds=30), 50.0
    oracle = Oracle(guard_s=2.0, start=EPOCH)
    oracle.promises[sid] = promise
    instance = InstanceKey("c0", 0)
    oracle.deliveries.append(Delivery(delivered_at, "n0#1", instance, 1, promise.fire_id, None, sid, 3, True))
    return oracle.violations()


def test_a_cancel_forbids_deliveries_after_it_not_before_seed_65464() -> None:
    assert _cancel_verdicts(40.0) == []
    assert any("delivered after a cancel" in v for v in _cancel_verdicts(60.0))


def _superseded_verdicts(delivered_at: float) -> list[str]:
    """A fire delivered (by a node that did not record it) at ``delivered_at``, then moved by a
    reschedule acknowledged at t=50 to a new time, which is delivered too."""
    sid = uuid.uuid4()
    now = datetime(2030, 1, 1, tzinfo=UTC)
    promise = Promise("c0", sid, now)
    old = promise.fire_id
    promise.old_fire_ids[old] = 50.0
    promise.fire_at = now + timedelta(minutes=1)
    oracle = Oracle(guard_s=2.0, start=EPOCH)
    oracle.promises[sid] = promise
    instance = InstanceKey("c0", 0)
    oracle.deliveries.append(Delivery(delivered_at, "n0#1", instance, 1, old, None, sid, 1, True))
    oracle.deliveries.append(Delivery(120.0, "n0#1", instance, 1, promise.fire_id, None, sid, 1, True))
    return oracle.violations()


def test_a_superseded_fire_delivered_before_the_reschedule_was_acknowledged_is_no_violation() -> None:
    assert _superseded_verdicts(40.0) == []
    assert len(_superseded_verdicts(50.0)) == 1 and "superseded" in _superseded_verdicts(60.0)[0]


def _auto_pause_verdicts(
    dead: list[int],
    paused_by: int,
    delivered: list[int],
    pause_after: int = 2,
    notices: int = 1,
    retrying: tuple[int, ...] | list[int] = (),
) -> list[str]:
    """A schedule firing every 10 s from t0, pause_after_failures=2, auto-paused 5 s after its occurrence
    ``paused_by`` (an index) failed (its retries took that long); the occurrences ``dead`` dead-lettered,
    ``delivered`` delivered."""
    sid = uuid.uuid4()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    nominal = [t0 + timedelta(seconds=10 * i) for i in range(12)]
    promise = Promise("c0", sid, t0, repeat=Repeat(every_s=10, start_at=t0), until=nominal[-1])
    promise.pause_after = pause_after
    promise.paused_at = nominal[paused_by] + timedelta(seconds=5)
    promise.paused_by = timing.fire_id(sid, nominal[paused_by])
    promise.pause_notices = notices
    oracle = Oracle(guard_s=2.0, start=EPOCH)
    oracle.promises[sid] = promise
    oracle.dead_letters.update(timing.fire_id(sid, nominal[i]) for i in dead)
    instance = InstanceKey("c0", 0)
    for i in delivered:
        key = timing.fire_id(sid, nominal[i])
        oracle.deliveries.append(Delivery(10.0 * i, "n0#1", instance, 1, key, None, sid, 1, True))
    for i in retrying:  # an attempt that failed, its retry dropped by the pause
        key = timing.fire_id(sid, nominal[i])
        oracle.deliveries.append(Delivery(10.0 * i, "n0#1", instance, 1, key, None, sid, 1, False))
    return oracle.violations()


def test_an_auto_pause_needs_its_streak_and_ends_the_timeline() -> None:
    assert _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0, 1]) == []
    # The next occurrence, due within the guard (and grace) of the pause, may have been out already;
    # nothing later may fire, and nothing after the trigger is owed.
    assert _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0, 1, 4]) == []
    assert any("after its auto-pause" in v for v in _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0, 1, 6]))
    assert any("without 2 dead letters" in v for v in _auto_pause_verdicts(dead=[3], paused_by=3, delivered=[0, 1, 2]))
    assert any(
        "never asked" in v for v in _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0, 1], pause_after=0)
    )
    assert any(
        "notified 2 times" in v for v in _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0, 1], notices=2)
    )
    # Before the pause every occurrence is still owed, but one in retry when it landed (seed 55).
    assert any("skipped" in v for v in _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0]))
    assert _auto_pause_verdicts(dead=[2, 3], paused_by=3, delivered=[0], retrying=[1]) == []


def _backfill_verdicts(live: list[int], backfilled: list[int], written: list[int]) -> list[str]:
    """A schedule every 10 s from EPOCH + 100 s; its timeline delivered the occurrences ``live`` (seconds
    after EPOCH), a backfill wrote fires for ``written`` (all due by the end) and delivered ``backfilled``."""
    sid = uuid.uuid4()
    first = EPOCH + timedelta(seconds=100)
    promise = Promise("c0", sid, first, repeat=Repeat(every_s=10, start_at=first))
    promise.until = EPOCH + timedelta(seconds=125)
    oracle = Oracle(guard_s=2.0, start=EPOCH)
    oracle.promises[sid] = promise
    oracle.backfill_until = EPOCH + timedelta(seconds=500)
    oracle.backfilled[sid] = {
        timing.to_epoch_ms(EPOCH + timedelta(seconds=s)): EPOCH + timedelta(seconds=300) for s in written
    }
    instance = InstanceKey("c0", 0)
    for s in live:
        fire_id = timing.fire_id(sid, EPOCH + timedelta(seconds=s))
        oracle.deliveries.append(Delivery(s + 0.5, "n0#1", instance, 1, fire_id, None, sid, 1, True))
    for s in backfilled:
        fire_id = timing.fire_id(sid, EPOCH + timedelta(seconds=s), backfill=True)
        oracle.deliveries.append(Delivery(300.0, "n0#1", instance, 1, fire_id, None, sid, 1, True))
    return oracle.violations()


def test_a_backfill_fires_each_occurrence_it_wrote_once_and_none_the_timeline_sent() -> None:
    # Before the timeline (80, 90) and one it passed over (110): fine, and 110 counts as done for it.
    assert _backfill_verdicts([100, 120], [80, 90, 110], [80, 90, 110]) == []
    both = _backfill_verdicts([100, 110, 120], [110], [110])
    assert any("by the timeline and by a backfill" in v for v in both), both
    lost = _backfill_verdicts([100, 120], [80], [80, 90, 110])
    assert any("backfill fire" in v and "never delivered" in v for v in lost), lost
    stray = _backfill_verdicts([100, 110, 120], [70], [])
    assert any("that no backfill wrote" in v for v in stray), stray
