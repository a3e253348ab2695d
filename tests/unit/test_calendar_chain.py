"""Issue 27, calendars: the chain step of a recurring schedule that names calendars, as an instance runs it
over the memory store. The next occurrence written is the first no calendar excludes, each stretch passed
over recorded in runs as skipped; an occurrence a calendar excludes by the time it is due (the calendar
changed after its row was written) is recorded skipped and never sent; excluded occurrences do not count
towards ``max_fires``; a calendar deleted since the schedule named it excludes nothing."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime

import msgspec
import structlog

from tests.unit.settling import Clock, Direct
from tickd.poller.calendars import CalendarBook
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire, FireContext, Settler
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.schema.calendars import Calendar
from tickd.schema.memory import memory_store
from tickd.schema.model import (
    Chain,
    Chained,
    Client,
    HttpCallback,
    InstanceKey,
    Location,
    Options,
    Repeat,
    Run,
    Schedule,
    Status,
)

START = datetime(2030, 4, 30, 12, 0, tzinfo=UTC)
NINE_BERLIN = Repeat(cron="0 9 * * *", timezone="Europe/Berlin")  # 07:00 UTC in May


def day(d: int) -> datetime:
    """09:00 in Berlin on 2030-05-d."""
    return datetime(2030, 5, d, 7, 0, tzinfo=UTC)


class Instance:
    def __init__(self) -> None:
        self.clock = Clock(START)
        self.store = memory_store(self.clock)
        self.client = Client("c1", 1, True, "", START, START)
        ctx = FireContext(
            client=lambda: self.client,
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=self.clock,
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
        )
        # Read afresh at each fire: what a calendar change reaches within TICKD_CLIENTS_REFRESH_S.
        book = CalendarBook(self.store, refresh_s=0)
        self.settler = Settler(ctx, self.store, Direct(self.store), book)  # type: ignore[arg-type]
        self.last_fire: Fire | None = None

    async def calendar(self, name: str, version: int, *days: int) -> None:
        calendar = Calendar(name, version, "Europe/Berlin", tuple(date(2030, 5, d) for d in days))
        assert await self.store.save_calendar("c1", calendar, self.clock())

    async def create(self, repeat: Repeat, first: datetime) -> Schedule:
        row = Schedule(
            "c1",
            uuid.uuid4(),
            Location(0, first),
            first,
            b"{}",
            HttpCallback(url="https://x.test/"),
            START,
            options=Options(repeat=repeat),
            seq=1,
        )
        await self.store.create_schedule(row, self.clock())
        return row

    async def current(self, row: Schedule) -> Schedule:
        current = await self.store.get_schedule("c1", row.schedule_id)
        assert current is not None
        return current

    async def due(self, row: Schedule, result: DeliveryResult | None = None) -> tuple[Schedule, Chained]:
        """The schedule's current occurrence comes due: chained, then (unless excluded) sent, ending as
        ``result`` says (delivered, if not given)."""
        current = await self.current(row)
        assert current.status is Status.SCHEDULED
        self.clock.now = current.location.due_at
        fire = Fire(current, OpenMinute(current.location.minute))
        chained = await self.settler.chain(fire)
        assert chained is not None
        if chained.outcome in (Chain.CHAINED, Chain.ALREADY):
            fire.went_out(self.clock.now)
            fire.result = result or DeliveryResult.delivered(1)
            await self.settler.settle(fire)
        return current, chained

    async def runs(self, row: Schedule) -> list[Run]:
        return sorted(await self.store.list_runs("c1", row.schedule_id, None, 100), key=lambda r: r.nominal_at)


async def test_the_next_occurrence_is_the_first_no_calendar_excludes_and_the_passed_ones_are_runs() -> None:
    inst = Instance()
    await inst.calendar("holidays", 1, 2, 3)
    row = await inst.create(msgspec.structs.replace(NINE_BERLIN, calendars=("holidays",)), day(1))
    _, chained = await inst.due(row)
    assert chained.outcome is Chain.CHAINED
    following = await inst.current(row)
    assert (following.fire_at, following.seq) == (day(4), 2)  # 2 and 3 May passed over; not fires
    runs = await inst.runs(row)
    assert [(r.nominal_at, r.status, r.fired_at) for r in runs] == [
        (day(1), Status.SUCCEEDED, day(1)),
        (day(2), Status.SKIPPED, None),
        (day(3), Status.SKIPPED, None),
    ]
    # One run per exclusion passed over: its first occurrence, the calendar and version, and until when
    # (a date: the local midnight after it).
    assert [r.last_error for r in runs[1:]] == [
        "skipped: calendar holidays v1 until 2030-05-02T22:00:00+00:00",
        "skipped: calendar holidays v1 until 2030-05-03T22:00:00+00:00",
    ]


async def test_an_occurrence_a_calendar_excludes_by_the_time_it_is_due_is_skipped_never_sent() -> None:
    inst = Instance()
    await inst.calendar("holidays", 1, 25)
    row = await inst.create(msgspec.structs.replace(NINE_BERLIN, calendars=("holidays",)), day(1))
    await inst.due(row)  # chains to 2 May, written before the calendar changes
    assert (await inst.current(row)).fire_at == day(2)
    await inst.calendar("holidays", 2, 25, 2)  # 2 May added after its row was written
    excluded, chained = await inst.due(row)
    assert chained.outcome is Chain.SKIPPED
    assert chained.following is not None and chained.following.fire_at == day(3)
    [stored] = [
        r
        async for page in inst.store.read_minute(InstanceKey("c1", 0), excluded.location.minute)
        for r in page
        if r.fire_at == day(2)
    ]
    assert stored.status is Status.SKIPPED
    assert (stored.attempts, stored.last_error) == (0, "skipped: calendar holidays v2")
    runs = {r.nominal_at: r for r in await inst.runs(row)}
    assert (runs[day(2)].status, runs[day(2)].fired_at, runs[day(2)].last_error) == (
        Status.SKIPPED,
        None,
        "skipped: calendar holidays v2",
    )
    following = await inst.current(row)
    assert (following.fire_at, following.seq, following.status) == (day(3), 2, Status.SCHEDULED)


async def test_excluded_occurrences_do_not_count_towards_max_fires() -> None:
    inst = Instance()
    await inst.calendar("holidays", 1, 2)
    repeat = msgspec.structs.replace(NINE_BERLIN, calendars=("holidays",), max_fires=2)
    row = await inst.create(repeat, day(1))
    await inst.due(row)
    await inst.calendar("holidays", 2, 2, 3)  # 3 May excluded once its row is written: skipped when due
    await inst.due(row)
    fired, chained = await inst.due(row)
    assert (fired.fire_at, chained.outcome, chained.following) == (day(4), Chain.CHAINED, None)
    statuses = [(r.nominal_at.day, r.status) for r in await inst.runs(row)]
    assert statuses == [(1, Status.SUCCEEDED), (2, Status.SKIPPED), (3, Status.SKIPPED), (4, Status.SUCCEEDED)]


async def test_a_calendar_deleted_since_the_schedule_named_it_excludes_nothing() -> None:
    inst = Instance()
    await inst.calendar("holidays", 1, 2)
    await inst.calendar("blackout", 1, 3)
    repeat = msgspec.structs.replace(NINE_BERLIN, calendars=("holidays", "blackout"))
    row = await inst.create(repeat, day(1))
    assert await inst.store.delete_calendar("c1", "holidays", 1)
    await inst.due(row)
    assert (await inst.current(row)).fire_at == day(2)  # holidays is gone; blackout still excludes 3 May
    await inst.due(row)
    assert (await inst.current(row)).fire_at == day(4)


class _Refusing(CalendarBook):
    async def named(self, client_id: str, names: Sequence[str]) -> list[Calendar]:
        raise AssertionError(f"calendars read for a schedule naming {list(names)}")


async def test_a_schedule_naming_no_calendar_reads_none() -> None:
    """The chain of a schedule that names no calendar costs no calendar read."""
    inst = Instance()
    inst.settler = Settler(inst.settler._ctx, inst.store, Direct(inst.store), _Refusing(inst.store, 0))  # type: ignore[arg-type]
    row = await inst.create(NINE_BERLIN, day(1))
    _, chained = await inst.due(row)
    assert chained.outcome is Chain.CHAINED and (await inst.current(row)).fire_at == day(2)


async def test_excluded_occurrences_between_failed_fires_leave_them_in_a_row() -> None:
    """pause_after_failures counts fires: one a calendar excluded (passed over by the chain, or skipped
    when due) sits between two failed fires without breaking their streak."""
    inst = Instance()
    await inst.calendar("holidays", 1, 2)
    failed = DeliveryResult.failed(1, "HTTP 500", retriable=False)
    repeat = msgspec.structs.replace(NINE_BERLIN, calendars=("holidays",))
    row = await inst.create(repeat, day(1))
    row = dataclasses.replace(row, options=Options(repeat=repeat, pause_after_failures=3))
    await inst.store.replace_schedule(await inst.current(row), row, inst.clock())
    await inst.due(row, failed)  # 1 May; 2 May passed over
    await inst.due(row, failed)  # 3 May; 4 May written
    await inst.calendar("holidays", 2, 2, 4)
    _, chained = await inst.due(row)  # 4 May: excluded when due
    assert chained.outcome is Chain.SKIPPED
    assert (await inst.current(row)).status is Status.SCHEDULED
    await inst.due(row, failed)  # 5 May: the third failed fire in a row
    assert (await inst.current(row)).status is Status.PAUSED
