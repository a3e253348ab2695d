"""The callback port policy (schema.ports): its settings, its answers, and the poller's check before each
attempt, which refuses a denied port even for a schedule the API accepted before the policy changed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpDispatcher, HttpSettings
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema.errors import ConfigError
from tickd.schema.memory import memory_store
from tickd.schema.model import HttpCallback, Location, Schedule
from tickd.schema.ports import DEFAULT_DENIED, DEFAULT_POLICY, PortPolicy, url_port
from tickd.schema.settings import StoreSettings
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

DENIED = "TICKD_CALLBACK_DENIED_PORTS"
ALLOWED = "TICKD_CALLBACK_ALLOWED_PORTS"


@pytest.mark.parametrize(
    ("url", "port"),
    [
        ("http://example.com/hook", 80),
        ("https://example.com/hook", 443),
        ("HTTPS://example.com:8443/", 8443),
        ("http://[2001:db8::1]:6379/", 6379),
        ("http://example.com:0/", 0),
        ("ftp://example.com:21/", None),
        ("http://example.com:99999/", None),
        ("http://example.com:x/", None),
    ],
)
def test_the_port_a_url_dials(url: str, port: int | None) -> None:
    assert url_port(url) == port


@pytest.mark.parametrize("port", [22, 25, 2375, 6379, 9042, 10250, 11211, 27017])
def test_well_known_internal_ports_are_denied_by_default_saying_which_service(port: int) -> None:
    reason = DEFAULT_POLICY.refusal(port)
    assert reason is not None and str(port) in reason and DEFAULT_DENIED[port] in reason


@pytest.mark.parametrize("port", [80, 443, 8000, 8080, 8443, 9000, 9, 32768, 60999, 65535])
def test_web_ports_and_the_ephemeral_range_stay_open(port: int) -> None:
    """Webhook receivers listen on these; the tests' receivers bind ephemeral ports (32768-60999)."""
    assert DEFAULT_POLICY.refusal(port) is None


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_a_port_no_one_can_dial_is_refused(port: int) -> None:
    assert PortPolicy(denied=()).refusal(port) is not None


def test_denied_ports_replace_the_list_and_default_extends_it() -> None:
    replaced = PortPolicy.from_env({DENIED: "6379, 8000-8099"})
    assert replaced.refusal(22) is None and replaced.refusal(6379) and replaced.refusal(8050)
    extended = PortPolicy.from_env({DENIED: "default,9000"})
    assert extended.refusal(22) and extended.refusal(9000) and extended.refusal(9001) is None
    nothing = PortPolicy.from_env({DENIED: "none"})
    assert all(nothing.refusal(p) is None for p in DEFAULT_DENIED)
    assert PortPolicy.from_env({DENIED: "  "}) == DEFAULT_POLICY  # blank: the default


def test_an_allow_list_admits_only_its_ports_and_denied_wins() -> None:
    policy = PortPolicy.from_env({ALLOWED: "443,8000-8999"})
    assert policy.refusal(443) is None and policy.refusal(8080) is None
    assert policy.refusal(80) is not None and policy.refusal(9000) is not None
    assert policy.refusal(8500) is not None  # Consul: in the range, but denied by default


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({DENIED: "22,abc"}, DENIED),
        ({DENIED: "0"}, DENIED),
        ({DENIED: "65536"}, DENIED),
        ({DENIED: "9000-8000"}, DENIED),
        ({DENIED: "22,,23"}, DENIED),
        ({DENIED: "-5"}, DENIED),
        ({DENIED: "\uff12\uff12"}, DENIED),  # full-width digits are no port
        ({DENIED: ",".join(["22"] * 1025)}, DENIED),
        ({ALLOWED: "1-70000"}, ALLOWED),
        ({ALLOWED: "6379"}, ALLOWED),  # nothing left: every allowed port is denied
        ({ALLOWED: "1-10", DENIED: "1-5,6-10"}, ALLOWED),
        ({ALLOWED: "none"}, ALLOWED),
    ],
)
def test_bad_settings_are_refused_at_start_naming_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as exc:
        PortPolicy.from_env(env)
    assert exc.value.field == name


def test_a_large_allowed_range_with_a_gap_in_the_denied_ones_is_accepted() -> None:
    policy = PortPolicy.from_env({ALLOWED: "1-20000", DENIED: "1-9999,10001-20000"})
    assert policy.refusal(10000) is None and policy.refusal(10001) is not None


def test_the_api_and_the_poller_read_the_same_policy() -> None:
    env = {DENIED: "default,9000", ALLOWED: "80,443,9000-9100"}
    assert ApiSettings.from_env(env).callback_ports == PollerSettings.from_env(env).http.ports
    assert ApiSettings().callback_ports == HttpSettings().ports == DEFAULT_POLICY


# -- the poller's check before each attempt -------------------------------------------------------


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[TestServer, list[str]]]:
    seen: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server, seen
    await server.close()


def _schedule(url: str) -> Schedule:
    fire_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    return Schedule("acme", uuid.uuid4(), Location(0, fire_at), fire_at, b"{}", HttpCallback(url=url), fire_at)


async def test_the_poller_refuses_a_denied_port_for_good_without_connecting(
    receiver: tuple[TestServer, list[str]],
) -> None:
    """A schedule accepted before the operator denied its port: the attempt fails, not retriable (a dead
    letter saying why), and nothing reaches the port; private targets being allowed changes nothing."""
    server, seen = receiver
    url = str(server.make_url("/hook"))
    port = server.port
    assert port is not None
    policy = PortPolicy.from_env({DENIED: f"default,{port}"})
    settings = replace(HttpSettings(allow_private=True), ports=policy)
    async with HttpDispatcher(settings, RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05)) as dispatcher:
        result = await dispatcher.deliver(_schedule(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.attempts) == (False, False, 1)
    assert result.error is not None and "refused target" in result.error and f"port {port}" in result.error
    assert seen == []


async def test_the_poller_delivers_to_an_allowed_port(receiver: tuple[TestServer, list[str]]) -> None:
    server, seen = receiver
    async with HttpDispatcher(HttpSettings(allow_private=True), RetryPolicy(max_attempts=1)) as dispatcher:
        result = await dispatcher.deliver(_schedule(str(server.make_url("/hook"))), 1, datetime.now(UTC))
    assert result.ok and seen == ["/hook"]


# -- a whole node: accepted by the API, dead-lettered by the poller under a newer policy ------------------


class NoKafka:
    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        raise AssertionError("no Kafka callback here")

    async def close(self) -> None:
        return None


async def test_a_schedule_accepted_before_its_port_was_denied_ends_as_a_dead_letter_saying_why(
    receiver: tuple[TestServer, list[str]],
) -> None:
    """The API (default policy) accepts a callback to the receiver's port; the node runs with that port
    denied, as after an operator changed TICKD_CALLBACK_DENIED_PORTS: the fire is a dead letter whose error
    names the port, and the receiver never hears of it."""
    server, seen = receiver
    store = memory_store(lambda: datetime.now(UTC))
    admin = {"Authorization": "Bearer ports-test-admin-token"}
    api_settings = ApiSettings(admin_token="ports-test-admin-token", callback_allow_private=True)
    async with TestClient(TestServer(create_app(api_settings, store))) as api:
        registered = await api.post("/v1/clients", json={"client_id": "ports", "poller_count": 1}, headers=admin)
        key = {"Authorization": f"Bearer {(await registered.json())['api_key']}"}
        body = {"delay_s": 0, "callback": {"type": "http", "url": str(server.make_url("/hook"))}}
        created = await api.post("/v1/schedules", json=body, headers=key)
        assert created.status == 201, await created.text()
        schedule_id = (await created.json())["schedule_id"]
    policy = PortPolicy.from_env({DENIED: f"default,{server.port}"})
    http = HttpDispatcher(replace(HttpSettings(allow_private=True), ports=policy), RetryPolicy(max_attempts=3))
    node = Node(_node_settings(), store, CallbackRouter(http, NoKafka()), Metrics())
    stop = asyncio.Event()
    task = asyncio.create_task(node.run(stop))
    try:
        async with asyncio.timeout(20):
            while not (letters := await store.list_dead_letters("ports", datetime.now(UTC).date())):
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
        await http.close()
    (letter,) = letters
    assert str(letter.schedule_id) == schedule_id
    assert letter.last_error is not None and f"port {server.port}" in letter.last_error
    assert "denied" in letter.last_error and seen == []


def _node_settings() -> PollerSettings:
    return PollerSettings(
        node_id="ports-node",
        metrics_port=0,
        store=StoreSettings(keyspace="memory"),
        heartbeat_interval_s=0.05,
        node_ttl_s=2,
        fence_margin_s=1.5,
        ring_refresh_s=0.05,
        shutdown_deadline_s=0.5,
    )
