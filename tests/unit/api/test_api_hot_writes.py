"""A write that leaves a hot mark is acknowledged only if it is confirmed within the hot-write deadline:
a slower one may land after the pollers' re-reads of its minute are over, behind a newer mark (found by
the simulation, seeds 5287 and 5337 with outcomes flushed on demand). Past the deadline: 503, and the
write goes on and lands whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.integration.api_helpers import Api, Register, Rows, schedule_body, serve, with_settings
from tests.waiting import until
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import MemoryConnection, Tables, memory_store
from tickd.schema.memory.faults import NoFaults
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


class SlowWrites(NoFaults):
    """Every batch write of schedule rows (a create is one; audit records are not) takes ``delay_s`` before
    it applies, or, once ``held``, waits until the test lets it go (``let_go``): an answer given meanwhile
    was given before the write landed."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.held: asyncio.Event | None = None
        self.applied = 0

    async def before(self, op: str) -> None:
        if _rows(op) and self.held is not None:
            await self.held.wait()
        elif _rows(op) and self.delay_s:
            await asyncio.sleep(self.delay_s)

    async def after(self, op: str) -> None:
        if _rows(op):
            self.applied += 1

    def hold(self) -> None:
        self.held = asyncio.Event()

    def let_go(self) -> None:
        assert self.held is not None
        self.held.set()


def _rows(op: str) -> bool:
    return op.startswith("batch") and "audit" not in op


@pytest.fixture
def slow() -> SlowWrites:
    return SlowWrites()


@pytest.fixture
def store(slow: SlowWrites) -> CassandraStore:
    return memory_store(MemoryConnection(Tables(lambda: datetime.now(UTC)), slow))


@pytest.fixture
async def api(api_settings: ApiSettings, store: CassandraStore) -> AsyncIterator[Api]:
    async for client in serve(with_settings(api_settings, hot_write_deadline_s=0.5), store):
        yield client


async def test_a_hot_create_slower_than_the_deadline_is_a_503_and_still_lands(
    api: Api, register: Register, rows: Rows, slow: SlowWrites
) -> None:
    client_id, key = await register()
    slow.hold()  # the create's write waits until let go: only the deadline can answer meanwhile
    async with asyncio.timeout(30):  # without the deadline no answer would come: fail, do not hang
        resp = await api.post("/v1/schedules", json=schedule_body(delay_s=5), headers=key)
    body = await resp.json()
    assert resp.status == 503 and body["error"]["code"] == "store_unavailable", body
    assert "Retry-After" in resp.headers
    assert slow.applied == 0 and (await rows(client_id))["schedules"] == 0  # answered before the write landed
    slow.let_go()
    await until(lambda: slow.applied == 1, what="the held write applying")
    assert (await rows(client_id))["schedules"] == 1  # the write went on (shielded) and applied whole


async def test_a_create_outside_the_hot_window_may_take_longer(api: Api, register: Register, slow: SlowWrites) -> None:
    _, key = await register()
    slow.delay_s = 1.0
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers=key)
    assert resp.status == 201, await resp.text()


async def test_a_hot_reschedule_slower_than_the_deadline_is_a_503(
    api: Api, register: Register, slow: SlowWrites
) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers=key)
    sid = (await resp.json())["schedule_id"]
    slow.delay_s = 1.0
    moved = await api.patch(f"/v1/schedules/{sid}", json={"delay_s": 30}, headers=key)
    assert moved.status == 503, await moved.text()
