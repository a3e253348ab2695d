"""Create-time DNS lookups are budgeted per client (service.targets): one client's hanging names cannot
make another client's creates fail, failures are remembered, and the create's rate-limit token is taken
before anything is resolved (a PATCH with a callback too). The resolver is a stub injected into the app's
TargetGuard: names under ``slow.test`` hang until the test releases them, ``bad.test`` names do not
exist, anything else resolves at once to a public address."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.api_helpers import ADMIN, Api, http_callback, schedule_body, with_settings
from tickd.schema.store import Store
from tickd.service import keys
from tickd.service.app import create_app
from tickd.service.errors import TooManyRequests, Unavailable
from tickd.service.settings import ApiSettings
from tickd.service.targets import TargetGuard

pytest_plugins = ["tests.integration.api_fixtures"]


class Resolver:
    """A blocking lookup stub, as the resolver threads call it; counts the lookups of each name."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, host: str) -> list[str]:
        with self._lock:
            self.calls[host] += 1
        if host.endswith(".slow.test"):
            self.release.wait(30)
            raise socket.gaierror(socket.EAI_AGAIN, "temporary failure in name resolution")
        if host.endswith(".bad.test"):
            raise socket.gaierror(socket.EAI_NONAME, "name or service not known")
        return ["93.184.216.34"]

    def hanging(self) -> int:
        with self._lock:
            return sum(n for host, n in self.calls.items() if host.endswith(".slow.test"))


@pytest.fixture
def resolver() -> Iterator[Resolver]:
    stub = Resolver()
    yield stub
    stub.release.set()  # no resolver thread outlives the test


@pytest.fixture
def dns_settings(api_settings: ApiSettings) -> ApiSettings:
    return with_settings(
        api_settings, callback_allow_private=False, dns_timeout_s=1.0, dns_lookups_per_client=4, dns_threads=32
    )


async def served(settings: ApiSettings, store: Store, resolver: Resolver) -> AsyncIterator[Api]:
    app = create_app(settings, store)
    app[keys.TARGETS] = TargetGuard.from_settings(settings, lookup=resolver)
    client: Api = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def register(api: Api) -> dict[str, str]:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['api_key']}"}


def to(host: str) -> dict[str, Any]:
    return schedule_body(callback=http_callback(url=f"https://{host}/hook"))


async def until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_clients_hanging_names_do_not_fail_another_clients_creates(
    dns_settings: ApiSettings, store: Store, resolver: Resolver
) -> None:
    async for api in served(dns_settings, store, resolver):
        noisy, quiet = await register(api), await register(api)
        hogs = [
            asyncio.create_task(api.post("/v1/schedules", json=to(f"n{i}.slow.test"), headers=noisy)) for i in range(20)
        ]
        await until(lambda: resolver.hanging() >= 4)
        created = await api.post("/v1/schedules", json=to("quiet.example"), headers=quiet)
        # The quiet client's lookup ran beside the noisy one's, which still hang: it waited for nobody.
        assert created.status == 201, await created.text()
        assert not resolver.release.is_set() and resolver.hanging() == 4
        resolver.release.set()
        answers = [await (await hog).json() for hog in hogs]
        assert {a["error"]["code"] for a in answers} <= {"unresolvable_host", "dns_lookups_busy"}
        assert all(a["error"]["field"] == "callback.url" for a in answers)


async def test_a_client_over_its_lookup_slots_waits_for_its_own(
    dns_settings: ApiSettings, store: Store, resolver: Resolver
) -> None:
    async for api in served(with_settings(dns_settings, dns_lookups_per_client=1, dns_timeout_s=0.3), store, resolver):
        noisy = await register(api)
        first = asyncio.create_task(api.post("/v1/schedules", json=to("a.slow.test"), headers=noisy))
        await until(lambda: resolver.hanging() >= 1)
        second = await api.post("/v1/schedules", json=to("b.slow.test"), headers=noisy)
        error = (await second.json())["error"]
        assert second.status == 429 and int(second.headers["Retry-After"]) >= 1
        assert error["code"] == "dns_lookups_busy" and "TICKD_DNS_LOOKUPS_PER_CLIENT" in error["message"]
        assert resolver.calls["b.slow.test"] == 0  # never started: the client's one slot stayed taken
        assert (await (await first).json())["error"]["code"] == "unresolvable_host"


async def test_failed_names_are_remembered(dns_settings: ApiSettings, store: Store, resolver: Resolver) -> None:
    async for api in served(with_settings(dns_settings, dns_negative_cache_s=60), store, resolver):
        key = await register(api)
        for _ in range(3):
            resp = await api.post("/v1/schedules", json=to("gone.bad.test"), headers=key)
            assert resp.status == 422 and (await resp.json())["error"]["code"] == "unresolvable_host"
        assert resolver.calls["gone.bad.test"] == 1


async def test_failures_are_not_remembered_when_the_negative_cache_is_off(
    dns_settings: ApiSettings, store: Store, resolver: Resolver
) -> None:
    async for api in served(with_settings(dns_settings, dns_negative_cache_s=0), store, resolver):
        key = await register(api)
        for _ in range(2):
            assert (await api.post("/v1/schedules", json=to("gone.bad.test"), headers=key)).status == 422
        assert resolver.calls["gone.bad.test"] == 2


async def test_the_rate_limit_token_is_taken_before_resolving(
    dns_settings: ApiSettings, store: Store, resolver: Resolver
) -> None:
    limited = with_settings(dns_settings, create_rate_per_s=0.001, create_burst=1)
    async for api in served(limited, store, resolver):
        key = await register(api)
        assert (await api.post("/v1/schedules", json=to("one.example"), headers=key)).status == 201
        refused = await api.post("/v1/schedules", json=to("two.example"), headers=key)
        assert refused.status == 429 and (await refused.json())["error"]["code"] == "rate_limited"
        assert resolver.calls["two.example"] == 0


async def test_a_patch_is_charged_like_a_create(dns_settings: ApiSettings, store: Store, resolver: Resolver) -> None:
    async for api in served(with_settings(dns_settings, create_rate_per_s=0.001, create_burst=2), store, resolver):
        key = await register(api)
        created = await (await api.post("/v1/schedules", json=to("one.example"), headers=key)).json()
        path = f"/v1/schedules/{created['schedule_id']}"
        patched = await api.patch(path, json={"callback": http_callback(url="https://two.example/")}, headers=key)
        assert patched.status == 200, await patched.text()
        refused = await api.patch(path, json={"callback": http_callback(url="https://three.example/")}, headers=key)
        assert refused.status == 429 and (await refused.json())["error"]["code"] == "rate_limited"
        assert resolver.calls["three.example"] == 0


async def test_a_put_by_key_is_charged_before_resolving(
    dns_settings: ApiSettings, store: Store, resolver: Resolver
) -> None:
    async for api in served(with_settings(dns_settings, create_rate_per_s=0.001, create_burst=1), store, resolver):
        key = await register(api)
        assert (await api.put("/v1/schedules/by-key/k1", json=to("one.example"), headers=key)).status == 201
        refused = await api.put("/v1/schedules/by-key/k1", json=to("two.example"), headers=key)
        assert refused.status == 429 and resolver.calls["two.example"] == 0


async def test_busy_resolver_threads_are_a_503_not_an_unresolvable_name(resolver: Resolver) -> None:
    guard = TargetGuard(False, 60, timeout_s=0.2, per_client=2, threads=2, lookup=resolver)
    try:
        hogs = [asyncio.create_task(guard.check(f"h{i}.slow.test", "callback.url", "noisy")) for i in range(2)]
        await until(lambda: resolver.hanging() >= 2)
        with pytest.raises(Unavailable) as busy:
            await guard.check("fine.example", "callback.url", "quiet")
        assert busy.value.code == "dns_busy" and "TICKD_DNS_THREADS" in busy.value.message
        assert resolver.calls["fine.example"] == 0  # dropped from the queue, not run later for nobody
        resolver.release.set()
        await asyncio.gather(*hogs, return_exceptions=True)
        await guard.check("fine.example", "callback.url", "quiet")  # the threads are free again
    finally:
        guard.close()


async def test_a_lookup_that_timed_out_keeps_its_clients_slot_until_its_thread_is_done(resolver: Resolver) -> None:
    guard = TargetGuard(False, 60, timeout_s=0.2, per_client=1, threads=8, lookup=resolver)
    try:
        with pytest.raises(Exception, match="cannot resolve"):
            await guard.check("a.slow.test", "callback.url", "noisy")
        # The thread still hangs: the client's next lookup must not start a second one.
        with pytest.raises(TooManyRequests):
            await guard.check("b.slow.test", "callback.url", "noisy")
        assert resolver.calls["b.slow.test"] == 0
        await guard.check("fine.example", "callback.url", "quiet")
        resolver.release.set()
        await until(lambda: guard.lookups_of("noisy") == 0)
        await guard.check("c.example", "callback.url", "noisy")
    finally:
        guard.close()
