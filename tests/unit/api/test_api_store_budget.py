"""An API request's store requests share TICKD_STORE_BUDGET_S (schema.deadline): a store that answers,
but slowly, makes a timely 503, not an answer after the sum of every request's own timeout (cluster test
C2: a create's Idempotency-Key reservation, then its batch, each waited on a silent replica, 15 s)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.integration.api_helpers import Api, Register, Rows, schedule_body, serve, with_settings
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import MemoryConnection, Tables, memory_store
from tickd.schema.memory.faults import NoFaults
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]

# Long enough that a reservation taking 0.6 of it answers within it on a loaded machine.
BUDGET_S = 1.0


class SlowReservations(NoFaults):
    """An Idempotency-Key reservation takes ``delay_s`` to answer, then applies (``answered`` counts them)."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.answered = 0

    async def before(self, op: str) -> None:
        if op.startswith("reserve_idempotency_key") and self.delay_s:
            await asyncio.sleep(self.delay_s)

    async def after(self, op: str) -> None:
        if op.startswith("reserve_idempotency_key"):
            self.answered += 1


@pytest.fixture
def slow() -> SlowReservations:
    return SlowReservations()


@pytest.fixture
def store(slow: SlowReservations) -> CassandraStore:
    return memory_store(MemoryConnection(Tables(lambda: datetime.now(UTC)), slow))


@pytest.fixture
async def api(api_settings: ApiSettings, store: CassandraStore) -> AsyncIterator[Api]:
    async for client in serve(with_settings(api_settings, store_budget_s=BUDGET_S), store):
        yield client


async def test_a_create_whose_budget_is_spent_is_a_503_and_writes_nothing_more(
    api: Api, register: Register, rows: Rows, slow: SlowReservations
) -> None:
    client_id, key = await register()
    # The reservation answers past the budget. (The memory store has no request timeout, so the 503 comes
    # once it answers; on Cassandra the driver's timeout is the budget's rest: cluster test C2.)
    slow.delay_s = BUDGET_S + 0.2
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers={**key, "Idempotency-Key": "b1"})
    body = await resp.json()
    assert resp.status == 503 and body["error"]["code"] == "store_unavailable", body
    assert "spent" in body["error"]["message"] and "Retry-After" in resp.headers
    assert slow.answered == 1
    assert (await api.get("/healthz")).status == 200  # a round trip later: a write that followed it would be in
    assert (await rows(client_id))["schedules"] == 0  # the schedule's write was never sent


async def test_each_request_has_a_budget_of_its_own(
    api: Api, register: Register, rows: Rows, slow: SlowReservations
) -> None:
    """Requests one after another, on one keep-alive connection, each within its budget: all succeed."""
    client_id, key = await register()
    slow.delay_s = BUDGET_S * 0.6
    for i in range(3):
        resp = await api.post(
            "/v1/schedules", json=schedule_body(delay_s=3600), headers={**key, "Idempotency-Key": f"own-{i}"}
        )
        assert resp.status == 201, await resp.text()
    assert (await rows(client_id))["schedules"] == 3
