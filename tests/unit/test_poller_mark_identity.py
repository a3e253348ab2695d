"""A poller tells a hot mark's new write from the one it saw by the mark's identity (time and write id),
never by its time alone: a create and its cancel in one millisecond leave the same time, and a cancel
whose mark looked unchanged was fired (simulation seed 102070)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import structlog

from tickd.poller.loader import MinuteLoader
from tickd.poller.plan import FiringPlan
from tickd.poller.settings import PollerSettings
from tickd.schema.memory import memory_store
from tickd.schema.model import HttpCallback, InstanceKey, Location, Schedule

MINUTE = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
INSTANCE = InstanceKey("c0", 0)


async def test_a_cancel_in_the_millisecond_of_its_create_makes_the_minute_hot_again() -> None:
    now = MINUTE + timedelta(seconds=20)
    store = memory_store(lambda: now)
    plan = FiringPlan(0, lambda: now, lambda: True, see_ahead_s=1.0, recheck_s=0.05)
    settings = PollerSettings(node_id="n0", metrics_port=0)
    loader = MinuteLoader(INSTANCE, store, plan, settings, lambda: now, structlog.get_logger("test"))
    state = plan.open_minute(MINUTE, now, settings.mark_settle_s)
    due = now + timedelta(seconds=3)
    s = Schedule("c0", uuid.uuid4(), Location(0, due), due, b"{}", HttpCallback("https://x.test/"), now)

    async def deliver_marks() -> bool:
        """One mark poll; whether it made the minute hot (a re-read owed)."""
        state.hot_until = state.first_touch = None  # the re-reads of earlier marks are done
        for mark in await store.hot_marks(MINUTE):
            if mark.instance == INSTANCE:
                loader.on_mark(mark, now)
        return state.hot_until is not None

    await store.create_schedule(s, now)
    assert await deliver_marks()  # the create's mark
    assert not await deliver_marks()  # the same mark again: nothing new
    await store.cancel_schedule(s, now)  # the same millisecond
    assert await deliver_marks()  # the cancel's mark is another write
