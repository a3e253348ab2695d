"""Issue 28: what the reports say of a fire is what happened to it. Lateness is sent minus due, the due time
being after jitter, window spread, backoff or redrive (not the nominal time).

The poller's settler over the memory store (its outcomes written at once), and the statistics it counts."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire, FireContext
from tickd.poller.metrics import Metrics
from tickd.poller.outcomes import outcome_of
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.settle import Settler
from tickd.poller.stats import TenantStats
from tickd.schema import stats, timing
from tickd.schema.memory import MemoryStore
from tickd.schema.model import HttpCallback, Location, Options, Schedule, Status

START = datetime(2030, 5, 1, 9, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Direct:
    """The outcome writer, writing each outcome at once (the real one waits for its flush)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def record(self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime) -> None:
        await self._store.record_outcomes([outcome_of(row, status, result, fired_at)])


class Plan:
    def consider(self, row: Schedule) -> None:
        pass


class Node:
    """A settler and the context its fires are counted in, on the memory store."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = MemoryStore(self.clock)
        self.stats = TenantStats(self.store, "n0", self.clock, structlog.get_logger())
        self.ctx = FireContext(
            client=lambda: None,  # type: ignore[arg-type,return-value]
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=self.clock,
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
            stats=self.stats,
        )
        self.settler = Settler(self.ctx, self.store, Plan(), Direct(self.store), None)  # type: ignore[arg-type]

    async def create(self, due_after_s: float = 0.0, options: Options | None = None, seq: int = 0) -> Schedule:
        sid = uuid.uuid4()
        nominal = START + timedelta(minutes=5)
        due = timing.truncate_ms(nominal + timedelta(seconds=due_after_s))
        location = Location(timing.poller_id_for(sid, 1), due)
        callback = HttpCallback(url="https://x.test/")
        row = Schedule("c1", sid, location, nominal, b"{}", callback, START, options=options, seq=seq)
        await self.store.create_schedule(row, self.clock())
        return row

    async def fire(self, row: Schedule, sent_at: datetime, result: DeliveryResult, done_at: datetime) -> Fire:
        """``row`` goes out at ``sent_at``; its delivery (in-memory retries included) ends at ``done_at``."""
        self.clock.now = sent_at
        fire = Fire(row, OpenMinute(row.location.minute))
        fire.went_out(sent_at)
        fire.result = result
        self.clock.now = done_at
        self.ctx.count_in_stats(fire)
        await self.settler.settle(fire)
        return fire

    async def current(self, row: Schedule) -> Schedule:
        found = await self.store.get_schedule(row.client_id, row.schedule_id)
        assert found is not None
        return found


@pytest.fixture
def node() -> Node:
    return Node()


async def test_jittered_fires_sent_on_their_due_times_are_not_late(node: Node) -> None:
    """Three jittered fires delivered on their due times: /v1/stats said p50 14.56 s (from nominal)."""
    for offset_s in (9.87, 14.56, 17.2):
        row = await node.create(offset_s, Options(jitter_ms=20_000))
        fire = await node.fire(row, row.location.due_at, DeliveryResult.delivered(1), row.location.due_at)
        assert fire.lateness_s == 0.0
    await node.stats.flush()
    rows = await node.store.read_stats("c1", START, START + timedelta(hours=1))
    window = stats.summarize(rows, START + timedelta(minutes=6), 300)
    assert window.fired == 3 and window.lateness_max_s == 0.0 and window.lateness_p99_s == 0.0
