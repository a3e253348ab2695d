"""Hostile budgets on the real Cassandra (issue 25, per-tenant budgets): one party's floods of slow DNS
names, unknown keys, reads and oversized batches are refused with their documented 4xx (never a 5xx),
cost the store what the limits say, and leave another client's requests answered and written.
Each case prints how long its answers took (a measurement; no test asserts a speed)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN, Api, Rows, schedule_body, serve, with_settings
from tests.unit.api.test_budgets_dns import Resolver, served, to, until
from tickd.schema.cassandra import CassandraStore
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]


@pytest.fixture
def resolver() -> Iterator[Resolver]:
    stub = Resolver()
    yield stub
    stub.release.set()


async def register(api: Api) -> tuple[str, dict[str, str]]:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return client_id, {"Authorization": f"Bearer {(await resp.json())['api_key']}"}


async def timed(call: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    resp = await call
    return resp, time.perf_counter() - start


async def test_slow_names_of_one_client_cost_another_nothing(
    api_settings: ApiSettings, store: CassandraStore, rows: Rows, resolver: Resolver
) -> None:
    settings = with_settings(api_settings, callback_allow_private=False, dns_timeout_s=1.0)
    async for api in served(settings, store, resolver):
        (_, noisy), (quiet_id, quiet) = await register(api), await register(api)
        hogs = [
            asyncio.create_task(api.post("/v1/schedules", json=to(f"h{i}.slow.test"), headers=noisy)) for i in range(50)
        ]
        batch = {"schedules": [to(f"b{i}.slow.test") for i in range(20)]}
        hogs.append(asyncio.create_task(api.post("/v1/schedules/batch", json=batch, headers=noisy)))
        await until(lambda: resolver.hanging() >= settings.dns_lookups_per_client)
        created, took = await timed(api.post("/v1/schedules", json=to("quiet.example"), headers=quiet))
        assert created.status == 201, await created.text()
        assert (await rows(quiet_id))["schedules"] == 1
        resolver.release.set()
        statuses = Counter([(await hog).status for hog in hogs])
        assert set(statuses) <= {200, 422, 429}, statuses  # the batch answers 200 with its items' errors
        print(f"quiet create beside 50 hanging creates and a 20-item batch: {took * 1000:.0f} ms; noisy: {statuses}")


async def test_an_unknown_key_flood_is_bounded_and_a_real_client_unhurt(
    api_settings: ApiSettings, store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: Counter[str] = Counter()
    original = store.get_client

    async def counted(client_id: str) -> Any:
        reads[client_id] += 1
        return await original(client_id)

    monkeypatch.setattr(store, "get_client", counted)
    settings = with_settings(api_settings, auth_failure_rate_per_s=0.01, auth_failure_burst=10)
    async for api in serve(settings, store):
        _, key = await register(api)
        assert (await api.get("/v1/stats", headers=key)).status == 200
        flood = [api.get("/v1/stats", headers={"Authorization": f"Bearer nosuch{n}.{'s' * 43}"}) for n in range(300)]
        statuses = Counter(resp.status for resp in await asyncio.gather(*flood))
        assert statuses == Counter({401: 10, 429: 290})
        assert sum(n for cid, n in reads.items() if cid.startswith("nosuch")) == 10
        answer, took = await timed(api.get("/v1/stats", headers=key))
        assert answer.status == 200  # the same source, a key already seen right
        print(
            f"300 unknown keys: {statuses}, {sum(reads.values())} client reads; real client after: {took * 1000:.0f} ms"
        )


async def test_reads_and_batches_over_budget_are_refused_and_write_nothing(
    api_settings: ApiSettings, store: CassandraStore, rows: Rows
) -> None:
    settings = with_settings(api_settings, read_rate_per_s=0.01, read_burst=20, create_burst=50)
    async for api in serve(settings, store):
        (noisy_id, noisy), (_, quiet) = await register(api), await register(api)
        over = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()] * 51}, headers=noisy)
        assert over.status == 422 and (await over.json())["error"]["code"] == "over_burst"
        assert (await rows(noisy_id))["schedules"] == 0
        answers = await asyncio.gather(*(api.get("/v1/schedules/by-key/k", headers=noisy) for _ in range(100)))
        assert Counter(a.status for a in answers) == Counter({404: 20, 429: 80})
        assert {(await a.json())["error"]["code"] for a in answers if a.status == 429} == {"read_rate_limited"}
        other, took = await timed(api.get("/v1/schedules/by-key/k", headers=quiet))
        assert other.status == 404  # another client's reads go on (no such key: a 404, not a 429)
        print(f"quiet read beside 100 over-budget reads: {took * 1000:.0f} ms")
