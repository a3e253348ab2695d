"""What authentication can be made to cost (service.auth): the client cache is a bounded LRU whose misses
cannot evict real clients, and failed authentications are limited per source address, never so that
one source can lock a real client out of another, nor out of its own source with a key already seen."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from tests.integration.api_helpers import ADMIN, Api, serve, with_settings
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import Client
from tickd.service.auth import Authenticator, ClientCache, new_api_key, source_of
from tickd.service.errors import TooManyRequests, Unauthorized
from tickd.service.limits import auth_failure_limiter, read_limiter
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


class CountingStore:
    """A ClientStore that knows a few clients and counts the reads of each id."""

    def __init__(self, *clients: Client) -> None:
        self.clients = {c.client_id: c for c in clients}
        self.reads: Counter[str] = Counter()

    async def get_client(self, client_id: str) -> Client | None:
        self.reads[client_id] += 1
        return self.clients.get(client_id)


def a_client(client_id: str) -> tuple[Client, str]:
    key, digest = new_api_key(client_id)
    at = datetime.now(UTC)
    return Client(client_id, 1, True, digest, at, at), key


def request_from(address: str, key: str, method: str = "GET") -> web.Request:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (address, 4321) if name == "peername" else default
    return make_mocked_request(method, "/v1/stats", headers={"Authorization": f"Bearer {key}"}, transport=transport)


def authenticator(store: CountingStore, burst: int = 3) -> Authenticator:
    settings = ApiSettings(auth_failure_rate_per_s=0.001, auth_failure_burst=burst)
    reads, failures = read_limiter(settings), auth_failure_limiter(settings)
    return Authenticator("admin-token-0123456", ClientCache(store, 60), reads=reads, failures=failures)


def unknown_key() -> str:
    return f"nosuch{uuid.uuid4().hex[:8]}.{'s' * 43}"


async def test_the_cache_evicts_the_least_recently_used_client() -> None:
    (a, _), (b, _), (c, _) = a_client("a"), a_client("b"), a_client("c")
    store = CountingStore(a, b, c)
    cache = ClientCache(store, 60, max_clients=2)  # type: ignore[arg-type]
    for client_id in ("a", "b", "a", "c", "a", "b"):
        await cache.get(client_id)
    assert store.reads == Counter({"a": 1, "b": 2, "c": 1})  # c evicted b; a, used most recently, stayed


async def test_unknown_ids_cannot_evict_a_real_client() -> None:
    real, _ = a_client("real")
    store = CountingStore(real)
    cache = ClientCache(store, 60)  # type: ignore[arg-type]
    assert await cache.get("real") == real
    for n in range(100_001):
        assert await cache.get(f"x{n}") is None
    assert await cache.get("real") == real
    assert store.reads["real"] == 1
    assert await cache.get("x100000") is None and store.reads["x100000"] == 1  # a miss is remembered too


async def test_failed_authentications_are_limited_per_source() -> None:
    real, key = a_client("real")
    store = CountingStore(real)
    auth = authenticator(store, burst=3)
    for _ in range(3):
        with pytest.raises(Unauthorized):
            await auth.client(request_from("203.0.113.7", unknown_key()))
    with pytest.raises(TooManyRequests) as limited:
        await auth.client(request_from("203.0.113.7", unknown_key()))
    assert limited.value.code == "auth_rate_limited" and int(limited.value.headers["Retry-After"]) >= 1
    assert "TICKD_AUTH_FAILURE" in limited.value.message
    assert sum(n for client_id, n in store.reads.items() if client_id != "real") == 3  # no read once limited
    # A third party at another address cannot lock anyone out: the real client passes from its own.
    assert await auth.client(request_from("198.51.100.1", key)) == real


async def test_a_key_seen_right_still_passes_from_a_limited_source() -> None:
    real, key = a_client("real")
    auth = authenticator(CountingStore(real), burst=2)
    shared = "192.0.2.10"  # a NAT or balancer address shared with the attacker
    assert await auth.client(request_from(shared, key)) == real
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await auth.client(request_from(shared, unknown_key()))
    assert await auth.client(request_from(shared, key)) == real
    wrong = f"real.{'w' * 43}"  # the real id with a wrong secret: refused before any comparison with a row
    with pytest.raises(TooManyRequests):
        await auth.client(request_from(shared, wrong))


async def test_wrong_admin_tokens_are_counted_too() -> None:
    auth = authenticator(CountingStore(), burst=2)
    for _ in range(2):
        with pytest.raises(Unauthorized):
            await auth.admin(request_from("203.0.113.9", "not-the-admin-token"))
    with pytest.raises(TooManyRequests):
        await auth.admin(request_from("203.0.113.9", "not-the-admin-token"))
    await auth.admin(request_from("203.0.113.9", "admin-token-0123456"))  # the right token always passes


async def test_malformed_keys_cost_nothing_and_are_not_counted() -> None:
    store = CountingStore()
    auth = authenticator(store, burst=1)
    for _ in range(5):
        with pytest.raises(Unauthorized):
            await auth.client(request_from("203.0.113.8", "not-a-key"))
    assert not store.reads


@pytest.mark.parametrize(
    ("remote", "source"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
    ],
)
def test_a_source_is_an_address_and_an_ipv6_one_its_64(remote: str, source: str) -> None:
    assert source_of(request_from(remote, "k")) == source


async def test_an_unknown_key_flood_costs_the_store_at_most_the_failure_burst(
    api_settings: ApiSettings, store: CassandraStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = with_settings(api_settings, auth_failure_rate_per_s=0.01, auth_failure_burst=5)
    reads: Counter[str] = Counter()
    original = store.get_client

    async def counted(client_id: str) -> Any:
        reads[client_id] += 1
        return await original(client_id)

    monkeypatch.setattr(store, "get_client", counted)
    async for api in serve(settings, store):
        # All at once: a failure is paid for before the lookup, so concurrent ones cannot all slip through.
        flood = [api.get("/v1/stats", headers={"Authorization": f"Bearer {unknown_key()}"}) for _ in range(40)]
        statuses = Counter(resp.status for resp in await asyncio.gather(*flood))
        assert statuses == Counter({401: 5, 429: 35})
        assert sum(reads.values()) == 5
        await real_client_passes(api)


async def real_client_passes(api: Api) -> None:
    """The admin token passes from the limited source, and the client it registers there too: registering
    put the client's row in this replica's cache, so its key is known to be right."""
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert resp.status == 201
    key = (await resp.json())["api_key"]
    assert (await api.get("/v1/stats", headers={"Authorization": f"Bearer {key}"})).status == 200
