"""HttpDispatcher against a fake receiver on 127.0.0.1: the dispatcher is what is under test."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpDispatcher, HttpSettings
from tickd.schema.model import HttpCallback, Location, Schedule

pytestmark = pytest.mark.integration

FAST = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05, inline_budget_s=5.0)
PRIVATE_OK = HttpSettings(allow_private=True)


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    at: float


class Receiver:
    """A fake subscriber: answers each path from a script (the last reply repeats) and records requests."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.scripts: dict[str, list[Reply]] = {}
        self.release = asyncio.Event()
        self.arrived = asyncio.Condition()
        self.server = TestServer(self._app(), host="127.0.0.1")

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{name}", self._handle)
        return app

    def script(self, path: str, *replies: Reply) -> str:
        self.scripts[path] = list(replies)
        return str(self.server.make_url(path))

    def on(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    async def wait_for(self, path: str, count: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.on(path)) >= count)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append(Seen(request.path, request.method, dict(request.headers), body, time.monotonic()))
        async with self.arrived:
            self.arrived.notify_all()
        replies = self.scripts.get(request.path, [Reply()])
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        if reply.hang:
            await self.release.wait()
        return web.Response(status=reply.status, headers=reply.headers)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.server.start_server()
    yield r
    r.release.set()
    await r.server.close()


@pytest.fixture
def schedule_to() -> Callable[..., Schedule]:
    def build(url: str, client_id: str = "acme", **callback: object) -> Schedule:
        fire_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        return Schedule(
            client_id=client_id,
            schedule_id=uuid.uuid4(),
            location=Location(0, fire_at),
            fire_at=fire_at,
            payload=b'{"order": 42}',
            callback=HttpCallback(url=url, **callback),  # type: ignore[arg-type]
            created_at=fire_at,
        )

    return build


async def test_200_is_delivered_with_headers_and_body(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/ok", Reply(204))
    schedule = schedule_to(url, method="PUT", headers={"Authorization": "Bearer k", "X-Tickd-Fire-Id": "forged"})
    async with HttpDispatcher(PRIVATE_OK, FAST) as dispatcher:
        result = await dispatcher.deliver(schedule, 1, datetime.now(UTC))
    assert (result.ok, result.attempts, result.status_code) == (True, 1, 204)
    [seen] = receiver.seen
    assert seen.method == "PUT"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Authorization"] == "Bearer k"
    assert seen.headers["X-Tickd-Fire-Id"] == schedule.fire_id
    assert seen.headers["X-Tickd-Schedule-Id"] == str(schedule.schedule_id)
    assert seen.headers["X-Tickd-Attempt"] == "1"
    body = json.loads(seen.body)
    assert (body["fire_id"], body["client_id"], body["attempt"], body["payload"]) == (
        schedule.fire_id,
        "acme",
        1,
        {"order": 42},
    )


async def test_500_then_200_is_retried(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/flaky", Reply(500), Reply(200))
    async with HttpDispatcher(PRIVATE_OK, FAST) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.attempts) == (True, 2)
    assert [s.headers["X-Tickd-Attempt"] for s in receiver.seen] == ["1", "2"]
    assert len({s.headers["X-Tickd-Fire-Id"] for s in receiver.seen}) == 1


async def test_always_500_fails_after_max_attempts(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/down", Reply(500))
    async with HttpDispatcher(PRIVATE_OK, FAST) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.attempts, result.status_code) == (False, False, 3, 500)
    assert len(receiver.seen) == 3


async def test_429_honours_retry_after(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/busy", Reply(429, {"Retry-After": "1"}), Reply(200))
    # A Retry-After is honoured up to the policy's cap (FAST's 0.05 s would clamp it): a cap of 300 s here.
    async with HttpDispatcher(PRIVATE_OK, dataclasses.replace(FAST, cap_s=300.0)) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.attempts) == (True, 2)
    first, second = receiver.seen
    assert second.at - first.at >= 0.95


async def test_retry_after_beyond_budget_is_handed_back(
    receiver: Receiver, schedule_to: Callable[..., Schedule]
) -> None:
    url = receiver.script("/later", Reply(503, {"Retry-After": "120"}))
    async with HttpDispatcher(PRIVATE_OK, dataclasses.replace(FAST, cap_s=300.0)) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.retry_after_s, result.attempts) == (False, True, 120.0, 1)


async def test_retry_after_beyond_the_cap_is_the_cap(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/never", Reply(503, {"Retry-After": "10000000000000"}))
    async with HttpDispatcher(PRIVATE_OK, dataclasses.replace(FAST, cap_s=30.0)) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.retry_after_s, result.attempts) == (False, True, 30.0, 1)


async def test_400_is_not_retried(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/bad", Reply(400))
    async with HttpDispatcher(PRIVATE_OK, FAST) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.status_code) == (False, False, 400)
    assert len(receiver.seen) == 1


async def test_timeout_is_retriable(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/slow", Reply(hang=True))
    policy = RetryPolicy(max_attempts=3, base_s=0.01, inline_budget_s=0.0)
    async with HttpDispatcher(PRIVATE_OK, policy) as dispatcher:
        result = await dispatcher.deliver(schedule_to(url, timeout_s=0.3), 1, datetime.now(UTC))
    assert (result.ok, result.retriable, result.attempts) == (False, True, 1)
    assert result.error is not None and "timeout" in result.error
    assert result.retry_after_s is not None


async def test_connection_refused_is_retriable(schedule_to: Callable[..., Schedule]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        policy = RetryPolicy(max_attempts=3, base_s=0.01, inline_budget_s=0.0)
        async with HttpDispatcher(PRIVATE_OK, policy) as dispatcher:
            result = await dispatcher.deliver(schedule_to(f"http://127.0.0.1:{port}/x"), 1, datetime.now(UTC))
    assert (result.ok, result.retriable) == (False, True)


async def test_hanging_client_does_not_delay_others(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    hanging = receiver.script("/a", Reply(hang=True))
    healthy = receiver.script("/b", Reply(200))
    settings = HttpSettings(per_client_limit=2, allow_private=True)
    async with HttpDispatcher(settings, FAST) as dispatcher:
        stuck = [
            asyncio.create_task(
                dispatcher.deliver(schedule_to(hanging, client_id="a", timeout_s=60), 1, datetime.now(UTC))
            )
            for _ in range(4)
        ]
        await receiver.wait_for("/a", 2)
        results = await asyncio.gather(
            *(dispatcher.deliver(schedule_to(healthy, client_id="b"), 1, datetime.now(UTC)) for _ in range(6))
        )
        assert all(r.ok for r in results)
        assert not any(task.done() for task in stuck)  # A still hangs while all of B completed
        assert len(receiver.on("/a")) == 2  # A's excess waits on A's own limit
        receiver.release.set()
        assert all(r.ok for r in await asyncio.gather(*stuck))
    assert len(receiver.on("/a")) == 4


async def test_private_targets_are_refused(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/internal", Reply(200))
    by_name = url.replace("127.0.0.1", "localhost")
    async with HttpDispatcher(HttpSettings(allow_private=False), FAST) as dispatcher:
        literal = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
        named = await dispatcher.deliver(schedule_to(by_name), 1, datetime.now(UTC))
    for result in (literal, named):
        assert (result.ok, result.retriable, result.attempts) == (False, False, 1)
        assert result.error is not None and "refused target" in result.error
    assert receiver.seen == []


async def test_delivery_after_close_is_retriable(receiver: Receiver, schedule_to: Callable[..., Schedule]) -> None:
    url = receiver.script("/closed", Reply(200))
    dispatcher = HttpDispatcher(PRIVATE_OK, RetryPolicy(inline_budget_s=0.0))
    await dispatcher.start()
    await dispatcher.close()
    result = await dispatcher.deliver(schedule_to(url), 1, datetime.now(UTC))
    assert (result.ok, result.retriable) == (False, True)
    assert receiver.seen == []
