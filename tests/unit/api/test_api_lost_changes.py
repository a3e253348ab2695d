"""A change whose pointer moved but whose rows were lost (the API answered 503) does not block the
client: the next change, the client's retry, adopts it and answers 200, where every later change used
to answer 409 while the old version went on firing (issue #8)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body, serve
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import MemoryConnection, Tables, memory_store
from tickd.schema.memory.faults import NoFaults
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


class LoseOnce(NoFaults):
    """The next request whose name starts with ``op`` is refused (nothing of it applies)."""

    def __init__(self) -> None:
        self.op: str | None = None

    async def before(self, op: str) -> None:
        if self.op is not None and op.startswith(self.op):
            self.op = None
            raise StoreUnavailable(f"{op}: Unavailable (test)")

    async def after(self, op: str) -> None:
        return None


@pytest.fixture
def lose() -> LoseOnce:
    return LoseOnce()


@pytest.fixture
def store(lose: LoseOnce) -> CassandraStore:
    return memory_store(MemoryConnection(Tables(lambda: datetime.now(UTC)), lose))


@pytest.fixture
async def api(api_settings: ApiSettings, store: CassandraStore) -> AsyncIterator[Api]:
    async for client in serve(api_settings, store):
        yield client


async def test_a_reschedule_after_a_lost_one_is_answered(api: Api, register: Register, lose: LoseOnce) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers=key)
    sid = (await resp.json())["schedule_id"]

    lose.op = "batch:insert_schedule"  # the pointer moves, the rows are lost
    resp = await api.patch(f"/v1/schedules/{sid}", json={"delay_s": 7200}, headers=key)
    assert resp.status == 503, await resp.text()
    before = await (await api.get(f"/v1/schedules/{sid}", headers=key)).json()

    resp = await api.patch(f"/v1/schedules/{sid}", json={"delay_s": 5400, "payload": {"v": 3}}, headers=key)
    assert resp.status == 200, await resp.text()
    after = await (await api.get(f"/v1/schedules/{sid}", headers=key)).json()
    assert after["payload"] == {"v": 3} and after["fire_at"] != before["fire_at"]


async def test_a_cancel_after_a_lost_cancel_is_answered(api: Api, register: Register, lose: LoseOnce) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers=key)
    sid = (await resp.json())["schedule_id"]

    lose.op = "batch:set_status"
    assert (await api.delete(f"/v1/schedules/{sid}", headers=key)).status == 503
    assert (await (await api.get(f"/v1/schedules/{sid}", headers=key)).json())["status"] == "scheduled"

    resp = await api.delete(f"/v1/schedules/{sid}", headers=key)
    assert resp.status == 200, await resp.text()
    assert (await (await api.get(f"/v1/schedules/{sid}", headers=key)).json())["status"] == "cancelled"
