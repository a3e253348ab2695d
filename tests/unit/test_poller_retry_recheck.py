"""Before a durable retry of a one-time schedule is sent, the pipeline reads the schedule again
(``Settler.still_wanted``, issue 25): a cancel, pause or change accepted while the fire was in
retry drops it, whatever the instance's re-reads of its minutes have seen. The rule, over the memory
store, on a settler holding only what that read uses."""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import Fire, FireContext, Settler
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import memory_store
from tickd.schema.model import Debounce, HttpCallback, Location, Options, Repeat, Schedule, Status


class Outcomes:
    def __init__(self) -> None:
        self.recorded: list[tuple[uuid.UUID, Status, str | None]] = []

    async def record(
        self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime, write_ts: int | None = None
    ) -> None:
        self.recorded.append((row.schedule_id, status, result.error))


class Wanted:
    """``still_wanted`` of a settler with only the parts it uses (the store, its outcomes, a clock, logs)."""

    def __init__(self, store: CassandraStore, outcomes: Outcomes) -> None:
        ctx = FireContext(
            client=lambda: None,  # type: ignore[arg-type,return-value]
            settings=PollerSettings(node_id="n0", metrics_port=0),
            metrics=Metrics(),
            clock=lambda: datetime.now(UTC),
            lease=lambda since=None: True,
            log=structlog.get_logger(),
            rng=random.Random(0),
        )
        self._settler = Settler(ctx, store, outcomes)  # type: ignore[arg-type]

    async def still_wanted(self, row: Schedule) -> bool:
        return await self._settler.still_wanted(Fire(row, OpenMinute(row.location.minute)))


def settler(store: CassandraStore, outcomes: Outcomes) -> Wanted:
    return Wanted(store, outcomes)


async def in_retry(store: CassandraStore, options: Options | None = None) -> Schedule:
    now = datetime.now(UTC)
    sid = uuid.uuid4()
    location = Location(timing.poller_id_for(sid, 1), timing.due_time(now + timedelta(seconds=30), now))
    row = Schedule(
        "c1", sid, location, location.due_at, b"{}", HttpCallback(url="https://x.test/"), now, options=options
    )
    await store.create_schedule(row, now)
    return await store.requeue_schedule(row, now + timedelta(seconds=40), 1, "HTTP 503", now)


@pytest.fixture
def store() -> CassandraStore:
    return memory_store(lambda: datetime.now(UTC))


async def test_an_unchanged_retry_goes_out(store: CassandraStore) -> None:
    outcomes = Outcomes()
    assert await settler(store, outcomes).still_wanted(await in_retry(store))
    assert outcomes.recorded == []


@pytest.mark.parametrize(("change", "status"), [("cancel", Status.CANCELLED), ("pause", Status.PAUSED)])
async def test_a_cancelled_or_paused_retry_is_dropped_keeping_the_clients_mark(
    store: CassandraStore, change: str, status: Status
) -> None:
    retry, outcomes = await in_retry(store), Outcomes()
    write = store.cancel_schedule if change == "cancel" else store.pause_schedule
    await write(retry, datetime.now(UTC))
    assert not await settler(store, outcomes).still_wanted(retry)
    assert outcomes.recorded == []  # the row keeps CANCELLED / PAUSED, not MOVED over it
    stored = await store.get_schedule("c1", retry.schedule_id)
    assert stored is not None and stored.status is status


async def test_a_retry_of_a_rescheduled_schedule_is_dropped_as_moved(store: CassandraStore) -> None:
    retry, outcomes = await in_retry(store), Outcomes()
    later = Location(retry.location.poller_id, retry.location.due_at + timedelta(minutes=5))
    await store.replace_schedule(retry, dataclasses.replace(retry, location=later, attempts=0), datetime.now(UTC))
    assert not await settler(store, outcomes).still_wanted(retry)
    assert outcomes.recorded == [(retry.schedule_id, Status.MOVED, "superseded: the schedule was changed")]


async def test_first_attempts_and_recurring_rows_are_not_read_again(store: CassandraStore) -> None:
    """No read for a first attempt (the API's guard holds for it) nor for a recurring schedule's row (the
    chain's compare-and-set keeps those): a store that raises on any read proves it."""
    retry = await in_retry(store)

    class NoReads(CassandraStore):
        async def get_schedule(self, client_id: str, schedule_id: uuid.UUID) -> Schedule | None:
            raise AssertionError("read")

    p = settler(memory_store(lambda: datetime.now(UTC), kind=NoReads), Outcomes())
    assert await p.still_wanted(dataclasses.replace(retry, attempts=0))
    recurring = Options(repeat=Repeat(every_s=60))
    assert await p.still_wanted(dataclasses.replace(retry, options=recurring))


async def test_a_debounced_first_attempt_is_read_again_and_dropped_once_pushed_back(store: CassandraStore) -> None:
    """Issue 27, debounce: a PUT may push a debounced fire back inside the mutation guard, so its first
    attempt is read again before it goes out; the version pushed back is dropped, marked moved."""
    now = timing.truncate_ms(datetime.now(UTC))
    sid = uuid.uuid4()
    location = Location(timing.poller_id_for(sid, 1), now + timedelta(seconds=1))
    debounced = Options(debounce=Debounce(window_ms=1000, first_at=now, last_at=now))
    row = Schedule(
        "c1", sid, location, location.due_at, b"{}", HttpCallback(url="https://x.test/"), now, options=debounced
    )
    await store.create_schedule(row, now)
    assert row.rechecked and row.attempts == 0
    outcomes = Outcomes()
    assert await settler(store, outcomes).still_wanted(row)  # as written: it goes out
    later = Location(location.poller_id, location.due_at + timedelta(seconds=1))
    await store.replace_schedule(row, dataclasses.replace(row, location=later, fire_at=later.due_at), now)
    assert not await settler(store, outcomes).still_wanted(row)
    assert outcomes.recorded == [(sid, Status.MOVED, "superseded: the schedule was changed")]
