"""A pause (an auto-pause, or a client's) races the poller chaining the occurrence it pauses: the pointer is
bumped, the row's paused status is on its way when the chain's compare-and-set fails and the poller marks
the occurrence superseded. The change must win, however the race ends (simulation seeds 200056, 200181):
- its status write landing after the mark still leaves the schedule paused (the mark is written just below
  the change's timestamp, not at the poller's clock);
- its status write lost, the pause tried again adopts the half-landed change and lands (a row marked moved
  at the pointer's place and the old version is that change's, not a conflict).
And an auto-pause counts failures "in a row" only over occurrences with nothing missing between them
(seed 200222: an occurrence late or in retry has no run yet, and was skipped over)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from tests.unit.test_auto_pause import FAILED, Instance, every_minute
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire
from tickd.poller.plan import OpenMinute
from tickd.schema import notices
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Chain, ClientSettings, Status


class HoldStatusWrite:
    """Store faults: the next paused-status write waits for ``release`` (``lose``: then fails, unapplied)."""

    def __init__(self, *, lose: bool = False) -> None:
        self.held, self.release, self.lose = asyncio.Event(), asyncio.Event(), lose
        self._armed = True

    async def before(self, op: str) -> None:
        if self._armed and op == "batch:set_status_version":
            self._armed = False
            self.held.set()
            await self.release.wait()
            if self.lose:
                raise StoreUnavailable("set_status_version: OperationTimedOut (simulated)")

    async def after(self, op: str) -> None:
        return None

    async def batchlog(self, op: str) -> None:
        return None


async def chained_while_paused(inst: Instance, faults: HoldStatusWrite) -> tuple[asyncio.Task[object], uuid.UUID]:
    """A pause held at its status write while the poller chains the occurrence it pauses; the pause's task,
    and the schedule's id."""
    row = await inst.create(every_minute())
    current = await inst.store.get_schedule("c1", row.schedule_id)
    assert current is not None
    inst.store.connection.faults = faults  # type: ignore[attr-defined]
    pause = asyncio.create_task(inst.store.pause_schedule(current, inst.clock()))
    await faults.held.wait()  # the pointer is bumped, the paused status not written
    inst.clock.now = current.location.due_at
    chained = await inst.settler.chain(Fire(current, OpenMinute(current.location.minute)))
    assert chained is not None and chained.outcome is Chain.CHANGED  # the occurrence is dropped, marked
    faults.release.set()
    await asyncio.gather(pause, return_exceptions=True)
    return pause, row.schedule_id


async def test_a_pause_landing_after_the_poller_marked_its_occurrence_still_pauses() -> None:
    inst = Instance(ClientSettings())
    pause, schedule_id = await chained_while_paused(inst, HoldStatusWrite())
    assert pause.exception() is None
    current = await inst.store.get_schedule("c1", schedule_id)
    assert current is not None and current.status is Status.PAUSED  # not "moved": neither paused nor firing


async def test_a_pause_whose_write_was_lost_is_finished_by_trying_again() -> None:
    inst = Instance(ClientSettings())
    faults = HoldStatusWrite(lose=True)
    pause, row_id = await chained_while_paused(inst, faults)
    assert isinstance(pause.exception(), StoreUnavailable)  # answered "unknown": the pointer bumped, no row
    current = await inst.store.get_schedule("c1", row_id)
    assert current is not None and current.status is Status.MOVED  # the poller's mark, below the change
    paused = await inst.store.pause_schedule(current, inst.clock())  # adopts the lost change, lands
    assert paused.status is Status.PAUSED
    stored = await inst.store.get_schedule("c1", row_id)
    assert stored is not None and stored.status is Status.PAUSED


async def test_failures_in_a_row_skip_over_no_occurrence() -> None:
    inst = Instance(ClientSettings(pause_after_failures=2))
    row = await inst.create(every_minute())
    await inst.occurrence(row, FAILED)  # occurrence 1: dead-lettered
    second = await inst.store.get_schedule("c1", row.schedule_id)
    assert second is not None and second.seq == 2
    inst.clock.now = second.location.due_at
    chained = await inst.settler.chain(Fire(second, OpenMinute(second.location.minute)))
    assert chained is not None  # occurrence 2 went on to 3 and is still out (late, or in retry): no run yet
    await inst.occurrence(row, FAILED)  # occurrence 3: dead-lettered
    assert await inst.status(row) is Status.SCHEDULED  # 1 and 3 are not two in a row
    await inst.occurrence(row, FAILED)  # occurrence 4: 3 and 4 are
    assert await inst.status(row) is Status.PAUSED


class LoseAnswerAfterPause:
    """Store faults: the first pointer read after a paused-status write fails after the write landed (the
    pause's last step: its answer is lost, and the pause is tried again)."""

    def __init__(self) -> None:
        self.paused = self.failed = False

    async def before(self, op: str) -> None:
        if self.paused and not self.failed and op == "get_ref":
            self.failed = True
            raise StoreUnavailable("get_ref: WriteTimeout after applying (simulated)")

    async def after(self, op: str) -> None:
        self.paused = self.paused or op == "batch:set_status_version"

    async def batchlog(self, op: str) -> None:
        return None


async def test_an_auto_pause_whose_answer_was_lost_is_still_recorded_and_announced() -> None:
    """Seed 200531: the pause landed, its last read failed, the retry found the schedule changed (by itself)
    and dropped the pause: no audit record, no notice."""
    inst = Instance(ClientSettings(pause_after_failures=1))
    row = await inst.create(every_minute())
    faults = LoseAnswerAfterPause()
    inst.store.connection.faults = faults  # type: ignore[attr-defined]
    await inst.occurrence(row, FAILED)
    assert faults.failed and await inst.status(row) is Status.PAUSED
    [change] = await inst.store.page_schedule_audit("c1", row.schedule_id, None, 10)
    assert change.action == "schedule.auto_pause"
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1


async def test_two_fires_dead_lettered_at_once_pause_and_announce_once() -> None:
    """Seed 300029: two occurrences dead-lettered in the same moment both paused the schedule; the one whose
    answer was lost took the other's pause for its own, and the schedule was announced paused twice."""
    inst = Instance(ClientSettings(pause_after_failures=1))
    row = await inst.create(every_minute())
    current = await inst.store.get_schedule("c1", row.schedule_id)
    assert current is not None
    inst.store.connection.faults = LoseAnswerAfterPause()  # type: ignore[attr-defined]
    failures = inst.settler._failures
    await asyncio.gather(*(failures.dead_lettered(inst.client, current, FAILED, inst.clock()) for _ in range(2)))
    assert await inst.status(row) is Status.PAUSED
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1
    changes = await inst.store.page_schedule_audit("c1", row.schedule_id, None, 10)
    assert [c.action for c in changes] == ["schedule.auto_pause"]


class LoseStatusWrite:
    """Store faults: the next paused-status write fails, unapplied (the pointer was bumped before it)."""

    def __init__(self) -> None:
        self.lost = asyncio.Event()

    async def before(self, op: str) -> None:
        if op == "batch:set_status_version" and not self.lost.is_set():
            self.lost.set()
            raise StoreUnavailable("set_status_version: OperationTimedOut (simulated)")

    async def after(self, op: str) -> None:
        return None

    async def batchlog(self, op: str) -> None:
        return None


async def test_an_auto_pause_lost_with_its_node_is_finished_by_the_next_owner() -> None:
    """Seed 400359: the auto-pause moved the pointer, its status write failed and its node died before
    trying again. The next owner found the next occurrence superseded (by that lost change) and dropped
    it: the schedule was left neither paused nor firing, for good. Now the next owner sees the pause owed
    (the occurrence before ended dead-lettered, pause_after_failures 1) and makes it, once."""
    inst = Instance(ClientSettings(pause_after_failures=1))
    row = await inst.create(every_minute())
    faults = LoseStatusWrite()
    inst.store.connection.faults = faults  # type: ignore[attr-defined]
    dying = asyncio.create_task(inst.occurrence(row, FAILED))  # dead-lettered: its auto-pause begins
    await faults.lost.wait()
    dying.cancel()  # the node dies while the pause waits to try again
    await asyncio.gather(dying, return_exceptions=True)
    stuck = await inst.store.get_schedule("c1", row.schedule_id)
    assert stuck is not None and stuck.status is Status.SCHEDULED and stuck.seq == 2  # the pause not landed
    inst.clock.now = stuck.location.due_at
    chained = await inst.settler.chain(Fire(stuck, OpenMinute(stuck.location.minute)))  # the next owner
    assert chained is not None and chained.outcome is Chain.CHANGED  # dropped: the lost change is ahead
    assert await inst.status(row) is Status.PAUSED
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1
    changes = await inst.store.page_schedule_audit("c1", row.schedule_id, None, 10)
    assert [c.action for c in changes] == ["schedule.auto_pause"]


async def test_a_streak_already_paused_and_resumed_is_not_paused_again() -> None:
    """The streak's pause was made (recorded) and the client resumed the schedule; then a change of the
    client's is in limbo (pointer moved, status write lost) when the next occurrence is chained. That
    occurrence is dropped, and no pause is owed: the client resumed past this streak."""
    inst = Instance(ClientSettings(pause_after_failures=1))
    row = await inst.create(every_minute())
    await inst.occurrence(row, FAILED)
    paused = await inst.store.get_schedule("c1", row.schedule_id)
    assert paused is not None and paused.status is Status.PAUSED
    resumed = await inst.store.resume_schedule(
        paused, dataclasses.replace(paused, status=Status.SCHEDULED), inst.clock()
    )
    faults = LoseStatusWrite()
    inst.store.connection.faults = faults  # type: ignore[attr-defined]
    with pytest.raises(StoreUnavailable):
        await inst.store.pause_schedule(resumed, inst.clock())  # the client's pause: pointer moved, rows lost
    inst.clock.now = resumed.location.due_at
    chained = await inst.settler.chain(Fire(resumed, OpenMinute(resumed.location.minute)))
    assert chained is not None and chained.outcome is Chain.CHANGED
    assert await inst.status(row) is Status.MOVED  # the client's change is theirs to retry: not paused by tickd
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1


async def test_an_owed_auto_pause_is_found_behind_an_occurrence_delivered_meanwhile() -> None:
    """Seed 404743: the dead-lettered occurrence had chained on before it failed for good, and the next one
    was delivered meanwhile; the auto-pause it set off was lost with its node. The next owner, finding the
    occurrence after that dropped, looked only at the run just before it (delivered): nothing owed, and the
    schedule was left neither paused nor firing. The streak is looked for among the recent runs."""
    inst = Instance(ClientSettings(pause_after_failures=1))
    row = await inst.create(every_minute())
    first = await inst.store.get_schedule("c1", row.schedule_id)
    assert first is not None
    inst.clock.now = first.location.due_at
    out = Fire(first, OpenMinute(first.location.minute))
    chained = await inst.settler.chain(out)  # occurrence 1 goes out (and is retried: no run yet)
    assert chained is not None and chained.outcome is Chain.CHAINED
    await inst.occurrence(row, DeliveryResult.delivered(1))  # occurrence 2, delivered
    faults = LoseStatusWrite()
    inst.store.connection.faults = faults  # type: ignore[attr-defined]
    out.went_out(first.location.due_at)
    out.result = FAILED
    dying = asyncio.create_task(inst.settler.settle(out))  # occurrence 1 dead-lettered: its pause begins
    await faults.lost.wait()
    dying.cancel()  # the node dies while the pause waits to try again
    await asyncio.gather(dying, return_exceptions=True)
    stuck = await inst.store.get_schedule("c1", row.schedule_id)
    assert stuck is not None and stuck.status is Status.SCHEDULED and stuck.seq == 3
    inst.clock.now = stuck.location.due_at
    chained = await inst.settler.chain(Fire(stuck, OpenMinute(stuck.location.minute)))  # the next owner
    assert chained is not None and chained.outcome is Chain.CHANGED
    assert await inst.status(row) is Status.PAUSED
    [change] = await inst.store.page_schedule_audit("c1", row.schedule_id, None, 10)
    assert change.action == "schedule.auto_pause" and first.fire_id in change.changes
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1
