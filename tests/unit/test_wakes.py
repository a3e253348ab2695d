"""Issue 27, timed pause: the instance that owns the minute where a pause ends resumes the schedule
(``poller.wakes``) as the client's resume would: its missed-fire policy decides about the occurrences
that fell meanwhile, the skipped ones are in its runs, a notice says so. A client's change made meanwhile
wins (the wake finds the row no longer current), and a wake repeated (a crash before the minute was
checkpointed) changes nothing. Over the memory store; the firing plan takes such rows (and only those
of the paused ones)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tests.contract.conftest import FailOn
from tests.unit.settling import Clock
from tickd.poller.calendars import CalendarBook
from tickd.poller.fire import FireContext
from tickd.poller.metrics import Metrics
from tickd.poller.plan import FiringPlan
from tickd.poller.settings import PollerSettings
from tickd.poller.wakes import Waker
from tickd.schema import pauses
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import memory_store
from tickd.schema.memory.connection import MemoryConnection
from tickd.schema.memory.engine import Tables
from tickd.schema.missed import Missed
from tickd.schema.model import (
    Client,
    ClientSettings,
    HttpCallback,
    Location,
    Options,
    PauseNote,
    Repeat,
    RowStamp,
    Schedule,
    Status,
    with_pause,
)

START = datetime(2030, 5, 1, 9, 0, 0, tzinfo=UTC)
UNTIL = START + timedelta(minutes=10, seconds=30)


class Node:
    """One instance's waker for client c1 over the memory store, its clock at START."""

    def __init__(self, settings: ClientSettings | None = None) -> None:
        self.clock = Clock(START)
        self.connection = MemoryConnection(Tables(self.clock))
        self.store = memory_store(self.connection)
        self.client = Client("c1", 1, True, "", START, START, settings=settings or ClientSettings())
        ctx = FireContext(
            client=lambda: self.client,
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=self.clock,
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
        )
        self.waker = Waker(ctx, self.store, CalendarBook(self.store, 60))

    async def paused_every_minute(self, missed: Missed | None = None, until: datetime | None = UNTIL) -> Schedule:
        """A schedule firing each minute from START + 1 min, paused at START with a pause ending ``until``."""
        repeat = Repeat(every_s=60, start_at=START + timedelta(minutes=1), missed=missed)
        nominal = START + timedelta(minutes=1)
        row = Schedule(
            "c1", uuid.uuid4(), Location(0, nominal), nominal, b"{}", HttpCallback(url="https://x.test/"), START,
            options=Options(repeat=repeat), seq=1,
        )  # fmt: skip
        await self.store.create_schedule(row, START)
        return await self.pause(row, until, "window")

    async def pause(self, current: Schedule, until: datetime | None, note: str | None) -> Schedule:
        pause = PauseNote(at=self.clock(), until=until, note=note)
        location = Location(0, until) if until is not None else current.location
        parked = dataclasses.replace(current, location=location, options=with_pause(current.options, pause))
        return await self.store.pause_schedule(current, self.clock(), parked)

    async def current(self, row: Schedule) -> Schedule:
        found = await self.store.get_schedule("c1", row.schedule_id)
        assert found is not None
        return found


async def test_the_pause_ends_at_until_and_the_timeline_goes_on_from_there() -> None:
    node = Node()
    parked = await node.paused_every_minute()
    assert parked.wakes and parked.location.due_at == UNTIL and parked.status is Status.PAUSED
    node.clock.now = UNTIL
    resumed = await node.waker.wake(parked)
    assert resumed is not None and resumed.status is Status.SCHEDULED and resumed.pause is None
    assert resumed.fire_at == START + timedelta(minutes=11)  # the first occurrence from the pause's end on
    assert await node.current(parked) == resumed
    runs = await node.store.list_runs("c1", parked.schedule_id, None, 50)
    skipped = sorted(r.nominal_at for r in runs if r.status is Status.SKIPPED)
    assert skipped == [START + timedelta(minutes=m) for m in range(1, 11)]  # every one that fell meanwhile
    feed = await node.store.page_notices("c1", START.date(), None, 10)
    assert [n.action for n in feed] == ["schedule.resumed"]
    trail = await node.store.page_schedule_audit("c1", parked.schedule_id, None, 10)
    assert [r.action for r in trail] == ["schedule.resume_at_until"] and trail[0].actor == "tickd"
    assert await node.waker.wake(parked) is None  # again (a crash before the checkpoint): nothing more
    assert await node.current(parked) == resumed


async def test_the_missed_fire_policy_decides_about_the_occurrences_in_between() -> None:
    node = Node()
    once = await node.paused_every_minute(Missed("fire_once", 3600))
    node.clock.now = UNTIL
    resumed = await node.waker.wake(once)
    assert resumed is not None and resumed.fire_at == START + timedelta(minutes=10)  # the latest, once, now
    assert resumed.location.due_at > UNTIL  # not on the woken row's key, which its instance holds as fired
    every = await node.paused_every_minute(Missed("fire_all", 3600))
    resumed = await node.waker.wake(every)
    assert resumed is not None and resumed.fire_at == START + timedelta(minutes=1)  # from the first, late


async def test_the_clients_change_made_meanwhile_wins() -> None:
    node = Node()
    parked = await node.paused_every_minute()
    later = await node.pause(parked, UNTIL + timedelta(hours=1), "longer")  # paused again, to another end
    node.clock.now = UNTIL
    assert await node.waker.wake(parked) is None
    assert await node.current(parked) == later
    forever = await node.pause(later, None, "indefinitely")
    node.clock.now = later.location.due_at
    assert not forever.wakes and await node.waker.wake(later) is None
    assert (await node.current(parked)).status is Status.PAUSED


async def test_a_rule_with_nothing_left_ends_at_the_pause_end() -> None:
    node = Node()
    repeat = Repeat(every_s=60, start_at=START + timedelta(minutes=1), end_at=START + timedelta(minutes=5))
    nominal = START + timedelta(minutes=1)
    row = Schedule(
        "c1", uuid.uuid4(), Location(0, nominal), nominal, b"{}", HttpCallback(url="https://x.test/"), START,
        options=Options(repeat=repeat), seq=1,
    )  # fmt: skip
    await node.store.create_schedule(row, START)
    parked = await node.pause(row, UNTIL, None)
    node.clock.now = UNTIL
    assert await node.waker.wake(parked) is None
    assert (await node.current(parked)).status is Status.CANCELLED


def test_the_plan_takes_a_paused_row_only_where_its_pause_ends() -> None:
    clock = Clock(START)
    plan = FiringPlan(0, clock, lambda since=None: True, see_ahead_s=1.0, recheck_s=1.0)
    minute = UNTIL.replace(second=0)
    state = plan.open_minute(minute, START, 0.0)
    state.horizon = None  # all of it loaded
    row = Schedule(
        "c1", uuid.uuid4(), Location(0, UNTIL), START, b"{}", HttpCallback(url="https://x.test/"), START,
        Status.PAUSED, options=with_pause(None, PauseNote(at=START, until=UNTIL)),
    )  # fmt: skip
    plain = dataclasses.replace(row, schedule_id=uuid.uuid4(), options=with_pause(None, PauseNote(at=START)))
    stamp = RowStamp(UNTIL, plain.schedule_id, 1, Status.PAUSED, 0)
    assert plan.changed(minute, stamp)  # unknown and paused: it may be one to wake, so read whole
    plan.consider(plain)
    plan.consider(row)
    assert plan.pending_through(minute) == 1  # only the one whose pause ends here
    assert not plan.changed(minute, stamp)  # read whole once: it rests, until its stamp moves on
    assert plan.changed(minute, stamp._replace(version=2))
    assert not plan.changed(minute, RowStamp(UNTIL, row.schedule_id, row.version, Status.PAUSED, 0))
    assert plan.changed(minute, RowStamp(UNTIL, row.schedule_id, row.version + 1, Status.MOVED, 0))
    plan.consider(dataclasses.replace(row, status=Status.MOVED, version=row.version + 1))
    assert plan.pending_through(minute) == 0  # resumed by the client meanwhile: nothing to wake


async def test_a_late_wake_skips_only_what_fell_while_paused() -> None:
    """Its node was down at until: the occurrences due since until are late fires (as after an outage,
    its missed-fire policy deciding in the chain step), not ones the pause passed over."""
    node = Node()
    parked = await node.paused_every_minute()
    node.clock.now = UNTIL + timedelta(minutes=3)
    resumed = await node.waker.wake(parked)
    assert resumed is not None and resumed.fire_at == START + timedelta(minutes=11)  # the first from until on
    assert resumed.location.due_at == UNTIL + timedelta(minutes=3)  # due now (not in a minute gone by)
    runs = await node.store.list_runs("c1", parked.schedule_id, None, 50)
    assert max(r.nominal_at for r in runs if r.status is Status.SKIPPED) == START + timedelta(minutes=10)


async def test_a_wake_cut_short_is_finished_by_the_next_owner() -> None:
    """The resume moved the pointer and its rows were lost (its node stopped in between): the next
    owner, reading the parked row again, takes that change over (simulation seed 530044: it found the
    pointer on the schedule's old row and dropped the wake; the schedule never fired again)."""
    node = Node()
    parked = await node.paused_every_minute(until=START + timedelta(seconds=30))  # before its first fire
    node.clock.now = parked.location.due_at
    client = node.client
    plan = pauses.resume(parked, client, node.clock.now)
    assert plan.resumed is not None and plan.resumed.location.due_at == START + timedelta(minutes=1)
    node.connection.faults = FailOn(before=("batch:insert_schedule",))  # the rows lost, the pointer moved
    with pytest.raises(StoreUnavailable):
        await node.store.resume_schedule(parked, plan.resumed, node.clock.now)
    resumed = await node.waker.wake(parked)  # the next owner
    assert resumed is not None and resumed.status is Status.SCHEDULED
    assert resumed.fire_at == START + timedelta(minutes=1)
    assert await node.current(parked) == resumed
