"""Reads that span more than one page: every row comes back, not just the first ``page_size``.

A store with ``page_size=50`` writes well past a page into one partition of each multi-row read
(hot marks, throttle tokens, throttle policies, live nodes, a run's events) and reads it all back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import (
    EventOf,
    FireOutcome,
    InstanceKey,
    Location,
    NodeInfo,
    Schedule,
    Status,
    ThrottlePolicy,
    Token,
)
from tickd.schema.settings import StoreSettings

from .conftest import later

pytestmark = pytest.mark.integration
PAGE = 50
ROWS = 2 * PAGE + 17  # three pages, the last one partial


@pytest.fixture
async def small_pages(store_settings: StoreSettings) -> AsyncIterator[CassandraStore]:
    settings = dataclasses.replace(store_settings, page_size=PAGE, cluster_name=f"paging-{uuid.uuid4().hex[:8]}")
    store = await CassandraStore.connect(settings)
    yield store
    await store.close()


async def in_slices(writes: Sequence[Coroutine[Any, Any, object]], width: int = 32) -> None:
    """Await the writes a slice at a time (not all at once on a shared 2-core machine)."""
    for start in range(0, len(writes), width):
        await asyncio.gather(*writes[start : start + width])


async def test_hot_marks_past_one_page(
    small_pages: CassandraStore, client_id: str, new_schedule: Callable[..., Schedule]
) -> None:
    due = later(20)  # inside the hot window: every create leaves a hot mark for its instance
    schedules = [new_schedule(due, poller_id=i) for i in range(ROWS)]
    now = datetime.now(UTC)
    await in_slices([small_pages.create_schedule(s, now) for s in schedules])
    marks = await small_pages.hot_marks(schedules[0].location.minute)
    ours = {m.instance for m in marks if m.instance.client_id == client_id}
    assert ours == {InstanceKey(client_id, i) for i in range(ROWS)}


async def test_tokens_past_one_page(small_pages: CassandraStore, client_id: str) -> None:
    taken = datetime.now(UTC).replace(microsecond=0)
    tokens = [Token(client_id, "p", slot, f"e{slot}", "node-a", taken) for slot in range(ROWS)]
    await in_slices([small_pages.take_token(t, 600) for t in tokens])
    assert sorted(await small_pages.tokens(client_id, "p"), key=lambda t: t.slot) == tokens


async def test_policies_past_one_page(small_pages: CassandraStore, client_id: str) -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    policies = [ThrottlePolicy(client_id, f"p{i:03}", 5, 60, at, at) for i in range(ROWS)]
    await in_slices([small_pages.put_policy(p) for p in policies])
    assert sorted(await small_pages.list_policies(client_id), key=lambda p: p.name) == policies


async def test_live_nodes_past_one_page(small_pages: CassandraStore) -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    nodes = [NodeInfo(f"node-{i:03}", "127.0.0.1", 9000 + i, at, at) for i in range(ROWS)]
    await in_slices([small_pages.heartbeat(n, 600) for n in nodes])
    assert sorted(await small_pages.live_nodes(), key=lambda n: n.node_id) == nodes


async def test_run_events_past_one_page(small_pages: CassandraStore, client_id: str) -> None:
    schedule_id, nominal = uuid.uuid4(), later(-60)
    loc = Location(0, nominal)
    fire = FireOutcome(client_id, schedule_id, loc, Status.SUCCEEDED, 1, nominal, nominal_at=nominal, events=ROWS)
    events = [
        FireOutcome(
            client_id,
            uuid.uuid4(),
            loc,
            Status.SUCCEEDED,
            1,
            nominal + timedelta(milliseconds=i),
            nominal_at=nominal,
            event=EventOf(schedule_id, i, ROWS),
        )
        for i in range(ROWS)
    ]
    await small_pages.record_outcomes([fire, *events])
    (run,) = await small_pages.list_runs(client_id, schedule_id, None, 10)
    assert (run.events, run.events_done) == (ROWS, ROWS)
    assert run.last_event_at == nominal + timedelta(milliseconds=ROWS - 1)
