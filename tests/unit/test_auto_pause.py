"""Issue 28: a recurring schedule whose fires end dead-lettered N times in a row is paused, and each dead
letter and the pause are notices in the client's feed and, with a notify target, notification schedules
of the client's. The poller's settler over the memory store: occurrences chained, fired and failed as an
instance does it, then what the store holds."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tests.unit.settling import Clock, Direct
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire, FireContext, Settler
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.schema import notices, timing
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import memory_store
from tickd.schema.model import (
    Chain,
    Client,
    ClientSettings,
    HttpCallback,
    InstanceKey,
    Location,
    Options,
    Repeat,
    Schedule,
    Status,
)

START = datetime(2030, 5, 1, 9, 0, 0, tzinfo=UTC)
TARGET = HttpCallback(url="https://notices.test/hook")
FAILED = DeliveryResult.failed(3, "HTTP 500", retriable=False)


class Instance:
    """One instance's settler for client c1 (its settings as given) on the memory store."""

    def __init__(self, settings: ClientSettings) -> None:
        self.clock = Clock(START)
        self.store = memory_store(self.clock)
        self.client = Client("c1", 1, True, "", START, START, settings=settings)
        ctx = FireContext(
            client=lambda: self.client,
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=self.clock,
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
        )
        self.settler = Settler(ctx, self.store, Direct(self.store))  # type: ignore[arg-type]

    async def create(self, options: Options) -> Schedule:
        sid = uuid.uuid4()
        nominal = START + timedelta(minutes=1)
        callback = HttpCallback(url="https://x.test/")
        row = Schedule("c1", sid, Location(0, nominal), nominal, b"{}", callback, START, options=options, seq=1)
        await self.store.create_schedule(row, self.clock())
        return row

    async def occurrence(self, row: Schedule, result: DeliveryResult) -> None:
        """The schedule's current occurrence chained, sent at its due time with ``result``, and settled."""
        current = await self.store.get_schedule("c1", row.schedule_id)
        assert current is not None and current.status is Status.SCHEDULED
        self.clock.now = current.location.due_at
        fire = Fire(current, OpenMinute(current.location.minute))
        chained = await self.settler.chain(fire)
        assert chained is not None and chained.outcome is not Chain.CHANGED
        fire.went_out(self.clock.now)
        fire.result = result
        await self.settler.settle(fire)

    async def status(self, row: Schedule) -> Status:
        current = await self.store.get_schedule("c1", row.schedule_id)
        assert current is not None
        return current.status

    async def feed(self) -> list[str]:
        found = []
        for day in {START.date(), self.clock.now.date()}:
            found += await self.store.page_notices("c1", day, None, 100)
        return [n.action for n in sorted(found, key=lambda n: (n.at, n.audit_id))]

    async def deliveries(self) -> list[Schedule]:
        """The client's notification schedules (the notice rows in its one poller's minutes so far)."""
        rows: list[Schedule] = []
        minute = timing.minute_bucket(START)
        while minute <= self.clock.now + timedelta(minutes=1):
            async for page in self.store.read_minute(InstanceKey("c1", 0), minute):
                rows += [r for r in page if notices.is_notice(r)]
            minute += timedelta(minutes=1)
        return rows


def every_minute(pause_after: int | None = None) -> Options:
    return Options(repeat=Repeat(every_s=60, start_at=START + timedelta(minutes=1)), pause_after_failures=pause_after)


@pytest.fixture
def notify() -> ClientSettings:
    return ClientSettings(notify=TARGET)


async def test_two_failed_fires_in_a_row_pause_the_schedule_and_say_so(notify: ClientSettings) -> None:
    inst = Instance(notify)
    row = await inst.create(every_minute(pause_after=2))
    await inst.occurrence(row, FAILED)
    assert await inst.status(row) is Status.SCHEDULED  # one failure is not two in a row
    await inst.occurrence(row, FAILED)
    assert await inst.status(row) is Status.PAUSED
    assert await inst.feed() == [notices.DEAD_LETTERED, notices.DEAD_LETTERED, notices.AUTO_PAUSED]
    [change] = await inst.store.page_schedule_audit("c1", row.schedule_id, None, 10)
    paused = await inst.store.get_schedule("c1", row.schedule_id)
    assert (change.action, change.actor) == ("schedule.auto_pause", "tickd")
    assert paused is not None and change.version == paused.version
    sent = await inst.deliveries()
    assert len(sent) == 3 and all(r.callback == TARGET and r.options == Options(notice=True) for r in sent)
    assert sum(b'"schedule.auto_paused"' in r.payload for r in sent) == 1


async def test_a_success_between_failures_breaks_the_streak() -> None:
    inst = Instance(ClientSettings())
    row = await inst.create(every_minute(pause_after=2))
    await inst.occurrence(row, FAILED)
    await inst.occurrence(row, DeliveryResult.delivered(1))
    await inst.occurrence(row, FAILED)
    assert await inst.status(row) is Status.SCHEDULED
    await inst.occurrence(row, FAILED)
    assert await inst.status(row) is Status.PAUSED
    assert await inst.deliveries() == []  # no target: the feed only
    assert (await inst.feed()).count(notices.AUTO_PAUSED) == 1


async def test_the_clients_default_applies_unless_the_schedule_says_otherwise() -> None:
    inst = Instance(ClientSettings(pause_after_failures=1))
    defaulted = await inst.create(every_minute())
    await inst.occurrence(defaulted, FAILED)
    assert await inst.status(defaulted) is Status.PAUSED
    never = await inst.create(every_minute(pause_after=0))
    for _ in range(3):
        await inst.occurrence(never, FAILED)
    assert await inst.status(never) is Status.SCHEDULED


async def test_a_notification_that_fails_for_good_notifies_nothing(notify: ClientSettings) -> None:
    inst = Instance(notify)
    row = await inst.create(every_minute(pause_after=5))
    await inst.occurrence(row, FAILED)
    [delivery] = await inst.deliveries()
    fire = Fire(delivery, OpenMinute(delivery.location.minute))
    fire.went_out(inst.clock.now)
    fire.result = FAILED
    await inst.settler.settle(fire)  # its dead letter is written, and nothing more
    assert await inst.feed() == [notices.DEAD_LETTERED]
    assert len(await inst.deliveries()) == 1


async def test_an_owed_pause_lost_with_its_node_is_found_again_by_the_next_owner(notify: ClientSettings) -> None:
    """Simulation seed 421069: a pause whose pointer moved but whose status write was lost (its node died)
    leaves the schedule's next occurrence dropped as changed. The owner that drops it makes the owed pause
    before marking it moved: if that owner dies in between too, the row is still scheduled and the next
    owner drops it again and makes the pause."""
    inst = Instance(notify)
    row = await inst.create(every_minute(pause_after=2))

    async def lost(*_: object) -> None:
        return None  # the pause these failures set off is lost with its node

    inst.settler._failures._pause_once = lost  # type: ignore[method-assign]
    await inst.occurrence(row, FAILED)
    await inst.occurrence(row, FAILED)
    current = await inst.store.get_schedule("c1", row.schedule_id)
    assert current is not None and current.status is Status.SCHEDULED

    async def status_lost(*_: object, **__: object) -> None:
        raise StoreUnavailable("the pause's status write, lost")

    inst.store._write_status = status_lost  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await inst.store.pause_schedule(current, inst.clock())  # its pointer moved, its status not written
    del inst.store._write_status

    async def dies(*_: object) -> None:
        raise RuntimeError("the node died while making the owed pause")

    inst.settler._failures._pause_once = dies  # type: ignore[method-assign]
    inst.clock.now = current.location.due_at
    with pytest.raises(RuntimeError):
        await inst.settler.chain(Fire(current, OpenMinute(current.location.minute)))
    left = await inst.store.get_schedule("c1", row.schedule_id)
    assert left is not None and left.status is Status.SCHEDULED  # not marked moved: the next owner will look

    next_owner = Settler(inst.settler._ctx, inst.store, Direct(inst.store))  # type: ignore[arg-type]
    chained = await next_owner.chain(Fire(current, OpenMinute(current.location.minute)))
    assert chained is not None and chained.outcome is Chain.CHANGED
    assert await inst.status(row) is Status.PAUSED
