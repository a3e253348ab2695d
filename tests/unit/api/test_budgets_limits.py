"""Request budgets per client (service.limits): reads have a bucket of their own, a batch costs its item
count and one over the burst is refused saying so, and the buckets themselves stay bounded."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.api_helpers import ADMIN, Api, schedule_body, serve, with_settings
from tickd.schema.errors import ConfigError
from tickd.schema.store import Store
from tickd.service.errors import Invalid, TooManyRequests
from tickd.service.limits import Lru, create_limiter
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


async def register(api: Api) -> dict[str, str]:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['api_key']}"}


_PREVIEW = {"cron": "0 9 * * *", "count": 3}


async def test_reads_have_a_bucket_per_client(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, read_rate_per_s=0.01, read_burst=3), store):
        key, other = await register(api), await register(api)
        created = await (await api.post("/v1/schedules", json=schedule_body(), headers=key)).json()
        reads = [
            await api.get(f"/v1/schedules/{created['schedule_id']}", headers=key),
            await api.get(f"/v1/schedules/{created['schedule_id']}/runs", headers=key),
            await api.post("/v1/schedules/preview", json=_PREVIEW, headers=key),
        ]
        assert [r.status for r in reads] == [200, 200, 200]
        limited = await api.get("/v1/schedules/by-key/k", headers=key)
        error = (await limited.json())["error"]
        assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1
        assert error["code"] == "read_rate_limited" and "TICKD_READ_RATE_PER_S" in error["message"]
        preview = await api.post("/v1/schedules/preview", json=_PREVIEW, headers=key)
        assert preview.status == 429 and (await preview.json())["error"]["code"] == "read_rate_limited"
        # Another client reads on; and this client's creates have their own bucket.
        assert (await api.get("/v1/stats", headers=other)).status == 200
        assert (await api.post("/v1/schedules", json=schedule_body(), headers=key)).status == 201


async def test_a_preview_no_longer_spends_create_tokens(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, create_rate_per_s=0.001, create_burst=1), store):
        key = await register(api)
        for _ in range(3):
            assert (await api.post("/v1/schedules/preview", json=_PREVIEW, headers=key)).status == 200
        assert (await api.post("/v1/schedules", json=schedule_body(), headers=key)).status == 201


async def test_a_batch_over_the_burst_is_refused_saying_so(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, create_rate_per_s=0.001, create_burst=5), store):
        key = await register(api)
        over = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()] * 6}, headers=key)
        error = (await over.json())["error"]
        assert over.status == 422 and error["code"] == "over_burst" and error["field"] == "schedules"
        assert "burst of 5" in error["message"] and "TICKD_CREATE_BURST" in error["message"]
        # Refusing it spent nothing: a batch of exactly the burst still fits, and then nothing is left.
        fits = await api.post("/v1/schedules/batch", json={"schedules": [schedule_body()] * 5}, headers=key)
        assert fits.status == 200
        assert (await api.post("/v1/schedules", json=schedule_body(), headers=key)).status == 429


async def test_a_batch_costs_its_item_count() -> None:
    limiter = create_limiter(ApiSettings(create_rate_per_s=0.001, create_burst=10))
    limiter.take("c", 7)
    with pytest.raises(TooManyRequests):
        limiter.take("c", 4)
    limiter.take("c", 3)
    with pytest.raises(Invalid) as over:
        limiter.take("d", 11, field="schedules")
    assert over.value.code == "over_burst" and over.value.field == "schedules"


def test_buckets_are_bounded_and_full_ones_go_first() -> None:
    limiter = create_limiter(ApiSettings(create_rate_per_s=1e6, create_burst=5, rate_limit_keys_max=100))
    for n in range(1000):
        limiter.spend(f"k{n}")
    assert len(limiter) <= 100
    drained = create_limiter(ApiSettings(create_rate_per_s=0.001, create_burst=5, rate_limit_keys_max=100))
    for n in range(1000):
        drained.spend(f"k{n}", 5)  # none refill: the least recently used are forgotten
    assert len(drained) == 100
    assert drained.wait_s("k999") > 0 and drained.wait_s("k0") == 0


def test_lru_evicts_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recently used
    lru.put("c", 3)
    assert "b" not in lru and lru.get("a") == 1 and lru.get("c") == 3


def test_the_budget_settings_are_read_and_bounded() -> None:
    env = {
        "TICKD_READ_RATE_PER_S": "50",
        "TICKD_READ_BURST": "60",
        "TICKD_AUTH_FAILURE_RATE_PER_S": "0.5",
        "TICKD_AUTH_FAILURE_BURST": "7",
        "TICKD_DNS_LOOKUPS_PER_CLIENT": "2",
        "TICKD_DNS_THREADS": "3",
        "TICKD_DNS_NEGATIVE_CACHE_S": "0",
        "TICKD_CLIENT_CACHE_MAX": "500",
    }
    settings = ApiSettings.from_env(env)
    assert (settings.read_rate_per_s, settings.read_burst) == (50, 60)
    assert (settings.auth_failure_rate_per_s, settings.auth_failure_burst) == (0.5, 7)
    assert (settings.dns_lookups_per_client, settings.dns_threads, settings.dns_negative_cache_s) == (2, 3, 0)
    assert settings.client_cache_max == 500
    for name, value in (
        ("TICKD_READ_BURST", "0"),
        ("TICKD_DNS_TIMEOUT_S", "0"),
        ("TICKD_CLIENT_CACHE_MISSES_MAX", "1"),
        ("TICKD_DNS_THREADS", "2"),  # not more than one client's 2 slots: that client could hold them all
    ):
        with pytest.raises(ConfigError) as refused:
            ApiSettings.from_env({**env, name: value})
        assert refused.value.field == name
