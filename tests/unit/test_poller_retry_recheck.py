"""Before a durable retry of a one-time schedule is sent, the pipeline reads the schedule again
(``DeliveryPipeline._still_wanted``, issue 25): a cancel, pause or change accepted while the fire was in
retry drops it, whatever the instance's re-reads of its minutes have seen. The rule, over the memory
store, on a pipeline holding only what that read uses."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from tickd.poller.delivery import DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.poller.pipeline import DeliveryPipeline
from tickd.schema import timing
from tickd.schema.memory import MemoryStore
from tickd.schema.model import HttpCallback, Location, Options, Repeat, Schedule, Status


class Outcomes:
    def __init__(self) -> None:
        self.recorded: list[tuple[uuid.UUID, Status, str | None]] = []

    async def record(self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime) -> None:
        self.recorded.append((row.schedule_id, status, result.error))


def pipeline(store: MemoryStore, outcomes: Outcomes) -> DeliveryPipeline:
    """A pipeline with only the parts ``_still_wanted`` uses (the store, its outcomes, a clock, logs)."""
    p = object.__new__(DeliveryPipeline)
    p._store, p._outcomes, p._metrics = store, outcomes, Metrics()  # type: ignore[assignment]
    p._log, p._now = structlog.get_logger(), lambda: datetime.now(UTC)
    return p


async def in_retry(store: MemoryStore, options: Options | None = None) -> Schedule:
    now = datetime.now(UTC)
    sid = uuid.uuid4()
    location = Location(timing.poller_id_for(sid, 1), timing.due_time(now + timedelta(seconds=30), now))
    row = Schedule(
        "c1", sid, location, location.due_at, b"{}", HttpCallback(url="https://x.test/"), now, options=options
    )
    await store.create_schedule(row, now)
    return await store.requeue_schedule(row, now + timedelta(seconds=40), 1, "HTTP 503", now)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(lambda: datetime.now(UTC))


async def test_an_unchanged_retry_goes_out(store: MemoryStore) -> None:
    outcomes = Outcomes()
    assert await pipeline(store, outcomes)._still_wanted(await in_retry(store))
    assert outcomes.recorded == []


@pytest.mark.parametrize(("change", "status"), [("cancel", Status.CANCELLED), ("pause", Status.PAUSED)])
async def test_a_cancelled_or_paused_retry_is_dropped_keeping_the_clients_mark(
    store: MemoryStore, change: str, status: Status
) -> None:
    retry, outcomes = await in_retry(store), Outcomes()
    write = store.cancel_schedule if change == "cancel" else store.pause_schedule
    await write(retry, datetime.now(UTC))
    assert not await pipeline(store, outcomes)._still_wanted(retry)
    assert outcomes.recorded == []  # the row keeps CANCELLED / PAUSED, not MOVED over it
    stored = await store.get_schedule("c1", retry.schedule_id)
    assert stored is not None and stored.status is status


async def test_a_retry_of_a_rescheduled_schedule_is_dropped_as_moved(store: MemoryStore) -> None:
    retry, outcomes = await in_retry(store), Outcomes()
    later = Location(retry.location.poller_id, retry.location.due_at + timedelta(minutes=5))
    await store.replace_schedule(retry, dataclasses.replace(retry, location=later, attempts=0), datetime.now(UTC))
    assert not await pipeline(store, outcomes)._still_wanted(retry)
    assert outcomes.recorded == [(retry.schedule_id, Status.MOVED, "superseded: the schedule was changed")]


async def test_first_attempts_and_recurring_rows_are_not_read_again(store: MemoryStore) -> None:
    """No read for a first attempt (the API's guard holds for it) nor for a recurring schedule's row (the
    chain's compare-and-set keeps those): a store that raises on any read proves it."""
    retry = await in_retry(store)

    class NoReads(MemoryStore):
        async def get_schedule(self, client_id: str, schedule_id: uuid.UUID) -> Schedule | None:
            raise AssertionError("read")

    p = pipeline(NoReads(lambda: datetime.now(UTC)), Outcomes())
    assert await p._still_wanted(dataclasses.replace(retry, attempts=0))
    recurring = Options(repeat=Repeat(every_s=60))
    assert await p._still_wanted(dataclasses.replace(retry, options=recurring))
