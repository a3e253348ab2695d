"""The API, in-process on a scenario's keyspace: the path every scenario creates, changes and cancels
through, as a user does (``tickd.service.app.create_app``: the create combiner, the hot-write
confirmation, the batch endpoint's write groups). The store the API writes through is read only to see
what landed (the poller id and due minute a check needs, which no answer carries)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tests.acceptance.harness import Delivery, Made
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import Callback, HttpCallback, KafkaCallback
from tickd.service import keys
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

ADMIN_TOKEN = "acceptance-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# The in-process API runs no bulk jobs: a scenario about them runs them on API processes it can kill.
SETTINGS = ApiSettings(admin_token=ADMIN_TOKEN, callback_allow_private=True, bulk_runner=False)
Api = TestClient[Any, Any]


async def serve_api(store: CassandraStore) -> AsyncIterator[Api]:
    client: Api = TestClient(TestServer(create_app(SETTINGS, store)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def register(api: Api, client_id: str, poller_count: int) -> dict[str, str]:
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": poller_count}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['api_key']}"}


async def call(api: Api, method: str, path: str, key: dict[str, str], body: Any = None) -> dict[str, Any]:
    resp = await api.request(method, path, json=body, headers=key)
    data: dict[str, Any] = await resp.json()
    assert resp.status in (200, 201), (resp.status, data)
    return data


def event_ids(deliveries: list[Delivery]) -> set[str]:
    """Events of one fire share its fire id: they are told apart by their event id."""
    return {str(d.body.get("event_id")) for d in deliveries if d.answered == 200}


# --------------------------------------------------------------------------- creating through the API


@dataclasses.dataclass(frozen=True)
class Tenant:
    """A client registered through ``POST /v1/clients``, with the API key its schedules are made with."""

    client_id: str
    poller_count: int
    key: dict[str, str] = dataclasses.field(repr=False)


async def create_client(api: Api, client_id: str, poller_count: int, kafka_topics: Iterable[str] = ()) -> Tenant:
    body = {"client_id": client_id, "poller_count": poller_count, "kafka_topics": list(kafka_topics)}
    data = await call(api, "POST", "/v1/clients", ADMIN, body)
    return Tenant(client_id, int(data["poller_count"]), {"Authorization": f"Bearer {data['api_key']}"})


async def change_quota(api: Api, tenant: Tenant, poller_count: int) -> Tenant:
    """``PATCH /v1/clients/{id}`` with a new ``poller_count`` (a decrease keeps the old ids draining)."""
    data = await call(api, "PATCH", f"/v1/clients/{tenant.client_id}", ADMIN, {"poller_count": poller_count})
    return dataclasses.replace(tenant, poller_count=int(data["poller_count"]))


def target(callback: Callback) -> dict[str, Any]:
    """A stored callback as a create request gives it."""
    if isinstance(callback, KafkaCallback):
        return {"type": "kafka", "topic": callback.topic}
    assert isinstance(callback, HttpCallback)
    return {"type": "http", "url": callback.url, "method": callback.method, "timeout_s": callback.timeout_s}


def create_body(fire_at: datetime, callback: Callback, **more: Any) -> dict[str, Any]:
    return {"fire_at": fire_at.isoformat(), "callback": target(callback), "payload": {"n": 0}, **more}


async def create_schedule(api: Api, tenant: Tenant, fire_at: datetime, callback: Callback, **more: Any) -> Made:
    """One ``POST /v1/schedules`` (the create combiner and the hot-write confirmation); the fire id is the
    answer's, the row is read back from the store."""
    data = await call(api, "POST", "/v1/schedules", tenant.key, create_body(fire_at, callback, **more))
    return await landed(api, tenant, uuid.UUID(data["schedule_id"]), _time(data["fire_at"]), str(data["fire_id"]))


async def create_many(
    api: Api,
    tenant: Tenant,
    fire_times: Sequence[datetime],
    callback: Callback,
    single: bool = False,
    concurrency: int = 32,
) -> list[Made]:
    """``POST /v1/schedules/batch`` in chunks of the API's largest batch, or with ``single`` one
    ``POST /v1/schedules`` each (``concurrency`` at once); in the order of ``fire_times``."""
    gate = asyncio.Semaphore(concurrency if single else 2)

    async def one(fire_at: datetime) -> list[Made]:
        async with gate:
            return [await create_schedule(api, tenant, fire_at, callback)]

    async def chunk(times: Sequence[datetime]) -> list[Made]:
        async with gate:
            return await create_batch(api, tenant, times, callback)

    if single:
        parts = await asyncio.gather(*(one(t) for t in fire_times))
    else:
        step = SETTINGS.max_batch
        parts = await asyncio.gather(*(chunk(fire_times[i : i + step]) for i in range(0, len(fire_times), step)))
    return [made for part in parts for made in part]


async def create_batch(api: Api, tenant: Tenant, fire_times: Sequence[datetime], callback: Callback) -> list[Made]:
    """One ``POST /v1/schedules/batch``; every item must be created. A batch item's answer has no fire id:
    it is the fire id of the answered schedule id and fire time (``timing.fire_id``, what a GET shows)."""
    body = {"schedules": [create_body(t, callback) for t in fire_times]}
    data = await call(api, "POST", "/v1/schedules/batch", tenant.key, body)
    results: list[dict[str, Any]] = data["results"]
    refused = [r for r in results if "error" in r]
    assert not refused and len(results) == len(fire_times), refused[:3]
    gate = asyncio.Semaphore(64)

    async def one(item: dict[str, Any]) -> Made:
        schedule_id, fire_at = uuid.UUID(item["schedule_id"]), _time(item["fire_at"])
        async with gate:
            return await landed(api, tenant, schedule_id, fire_at, timing.fire_id(schedule_id, fire_at))

    return list(await asyncio.gather(*(one(r) for r in results)))


async def landed(api: Api, tenant: Tenant, schedule_id: uuid.UUID, fire_at: datetime, fire_id: str) -> Made:
    """The row the API wrote, read back from its store (poller id, due minute), checked against its answer."""
    row = await api.app[keys.STORE].get_schedule(tenant.client_id, schedule_id)
    assert row is not None, f"{schedule_id}: answered created, but no row"
    assert row.fire_at == fire_at and timing.fire_id(row.schedule_id, row.fire_at) == fire_id, (row, fire_id)
    return Made(row, fire_id)


async def cancel_schedule(api: Api, tenant: Tenant, made: Made) -> int:
    """``DELETE /v1/schedules/{id}``; the status: 200 cancelled, 409 refused (the fire is within the mutation
    guard: it fires as it was), 503 not confirmed before the guard point (it may or may not apply)."""
    resp = await api.delete(f"/v1/schedules/{made.schedule.schedule_id}", headers=tenant.key)
    assert resp.status in (200, 409, 503), (resp.status, await resp.text())
    return resp.status


def _time(raw: str) -> datetime:
    return datetime.fromisoformat(raw)
