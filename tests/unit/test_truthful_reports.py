"""Issue 28: what the reports say of a fire is what happened to it. Lateness is sent minus due, the due time
being after jitter, window spread, backoff or redrive (not the nominal time); a run keeps its first attempt's
time and every attempt; a dead letter is dated when its last attempt failed and carries every attempt.

The poller's settler over the memory store (its outcomes written at once), then the store's runs and dead
letters as the API shows them (``service.views``)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from msgspec import UnsetType

from tests.unit.settling import Clock, Direct
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire, FireContext, Settler
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.stats import TenantStats
from tickd.schema import redrives, stats, timing
from tickd.schema.memory import memory_store
from tickd.schema.model import (
    MAX_TRIES,
    Client,
    HttpCallback,
    Location,
    Options,
    Repeat,
    Schedule,
    Status,
    Try,
    add_tries,
)
from tickd.service import recurring
from tickd.service.views import dead_letter_view, run_view

START = datetime(2030, 5, 1, 9, 0, 0, tzinfo=UTC)


class Node:
    """A settler and the context its fires are counted in, on the memory store."""

    def __init__(self) -> None:
        self.clock = Clock(START)
        self.store = memory_store(self.clock)
        self.stats = TenantStats(self.store, "n0", self.clock, structlog.get_logger())
        client = Client("c1", 1, True, "", START, START)
        self.ctx = FireContext(
            client=lambda: client,
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=self.clock,
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
            stats=self.stats,
        )
        self.settler = Settler(self.ctx, self.store, Direct(self.store))  # type: ignore[arg-type]

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


def _retry(attempts: int, error: str = "HTTP 503") -> DeliveryResult:
    return dataclasses.replace(DeliveryResult.failed(attempts, error, retriable=True), sent=((attempts, 0.0, error),))


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


async def test_a_jittered_run_delivered_on_time_reports_no_lateness(node: Node) -> None:
    """A recurring fire due 12.256 s after its nominal time (its jitter), delivered then."""
    options = Options(repeat=Repeat(every_s=3600), jitter_ms=20_000)
    row = await node.create(12.256, options, seq=1)
    await node.fire(row, row.location.due_at, DeliveryResult.delivered(1), row.location.due_at)
    (run,) = await node.store.list_runs("c1", row.schedule_id, None, 10)
    view = run_view(row.schedule_id, run)
    assert view.lateness_s == 0.0 and view.fired_at == row.location.due_at
    assert view.nominal_at == row.fire_at  # the nominal time stays visible


async def test_a_one_time_run_after_a_stored_retry_keeps_its_first_attempt(node: Node) -> None:
    row = await node.create()
    first_sent = row.location.due_at + timedelta(seconds=0.25)
    await node.fire(row, first_sent, _retry(1), first_sent + timedelta(seconds=1))
    retry = await node.current(row)
    assert retry.attempts == 1 and retry.location.due_at > first_sent and len(retry.tries) == 1
    second_sent = retry.location.due_at + timedelta(seconds=0.5)
    await node.fire(retry, second_sent, DeliveryResult.delivered(2), second_sent)
    (run,) = recurring.one_time_runs(await node.current(row))
    view = run_view(row.schedule_id, run)
    assert view.fired_at == first_sent and view.lateness_s == 0.25  # the first attempt's, not the last's
    assert isinstance(view.tries, list)
    assert [(t.attempt, t.outcome, t.error, t.lateness_s) for t in view.tries] == [
        (1, "retry", "HTTP 503", 0.25),
        (2, "delivered", None, 0.5),  # late from its backoff's due time, not from the nominal time
    ]
    assert view.tries[1].due_at == retry.location.due_at


async def test_a_dead_letter_is_dated_when_its_last_attempt_failed_and_keeps_every_attempt(node: Node) -> None:
    row = await node.create()
    sent = row.location.due_at
    # Three attempts in memory, 2 s and 6 s after the first; the last fails for good 7 s after the first.
    result = dataclasses.replace(
        DeliveryResult.failed(3, "HTTP 500", retriable=False),
        sent=((1, 0.0, "HTTP 502"), (2, 2.0, "HTTP 503"), (3, 6.0, "HTTP 500")),
    )
    failed_at = sent + timedelta(seconds=7)
    await node.fire(row, sent, result, failed_at)
    (letter,) = await node.store.list_dead_letters("c1", failed_at.date())
    assert letter.failed_at == failed_at  # not the first attempt's time
    view = dead_letter_view(letter)
    assert isinstance(view.tries, list)
    assert [(t.attempt, t.sent_at, t.outcome, t.error) for t in view.tries] == [
        (1, sent, "retry", "HTTP 502"),
        (2, sent + timedelta(seconds=2), "retry", "HTTP 503"),
        (3, sent + timedelta(seconds=6), "failed", "HTTP 500"),
    ]
    assert isinstance(dead_letter_view(letter, payload=False).tries, UnsetType)  # a listing's item: omitted


async def test_a_redriven_fire_is_late_from_its_redriven_due_time(node: Node) -> None:
    """A fire redriven 103 s after its nominal time and sent then: it is not 103 s late."""
    row = await node.create()
    sent = row.location.due_at
    await node.fire(row, sent, DeliveryResult.failed(1, "HTTP 410", retriable=False), sent)
    (letter,) = await node.store.list_dead_letters("c1", sent.date())
    node.clock.now = row.fire_at + timedelta(seconds=103)
    await redrives.redrive(node.store, letter, node.clock.now, node.clock.now, late_s=5.0)
    redriven = await node.current(row)
    assert redriven.status is Status.SCHEDULED and redriven.attempts == 0
    fire = await node.fire(redriven, redriven.location.due_at, DeliveryResult.delivered(1), redriven.location.due_at)
    assert fire.lateness_s == 0.0
    (run,) = recurring.one_time_runs(await node.current(row))
    view = run_view(row.schedule_id, run)
    assert view.fired_at == sent and view.lateness_s == 0.0  # the first attempt, on its due time
    assert isinstance(view.tries, list)
    # Two rounds: the one that ended in the dead letter, then the redriven one, each late from its due time.
    assert [(t.outcome, t.due_at, t.lateness_s) for t in view.tries] == [
        ("failed", row.location.due_at, 0.0),
        ("delivered", redriven.location.due_at, 0.0),
    ]


def test_attempts_are_bounded_to_the_first_and_the_latest() -> None:
    tries = tuple(Try(n, START, START, "retry", "HTTP 503") for n in range(1, 31))
    kept = add_tries(tries[:1], tries[1:])
    assert len(kept) == MAX_TRIES and kept[0].attempt == 1 and [t.attempt for t in kept[1:]] == list(range(12, 31))
    assert add_tries((), tries[:3]) == tries[:3]
