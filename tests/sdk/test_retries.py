"""The SDK's retry rules against a scripted local server: Retry-After honoured, 429/503/connection
errors retried only where that is safe, and a POST without an Idempotency-Key never sent twice once it
may have reached the server."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from tickd_client import NO_RETRY, AsyncTickd, RateLimited, RetryPolicy, Tickd, Unavailable
from tickd_client.errors import TickdError
from tickd_client.retry import backoff_s, delay_s, parse_retry_after

FAST = RetryPolicy(attempts=3, base_delay_s=0.01)
RESET = "reset"  # read the request, close the connection without an answer
_AT = "2026-11-23T10:00:00.000Z"
POLICY = {"name": "p", "max_in_flight": 1, "release_timeout_s": 5, "created_at": _AT, "updated_at": _AT}
SCHEDULE = {
    "schedule_id": "6f1c2c5e-0000-4000-8000-000000000000",
    "status": "scheduled",
    "fire_at": _AT,
    "due_at": _AT,
    "fire_id": "6f1c2c5e-0000-4000-8000-000000000000:1795341600000",
    "attempts": 0,
    "fired_at": None,
    "last_error": None,
    "created_at": _AT,
    "callback": {"type": "http", "url": "http://example.com/"},
    "payload": None,
}
BATCH = {"results": [{"index": 0, "schedule_id": SCHEDULE["schedule_id"], "status": "scheduled", "fire_at": _AT}]}
Answer = str | tuple[int, dict[str, str], Any]


@dataclass
class Hit:
    method: str
    path: str
    headers: dict[str, str]
    at: float
    body: bytes = b""


@dataclass
class Fake:
    answers: list[Answer]
    hits: list[Hit] = field(default_factory=list)
    url: str = ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fake = self.server.fake
        fake.hits.append(Hit(self.command, self.path, dict(self.headers), time.monotonic(), body))
        answer = fake.answers.pop(0)
        if isinstance(answer, str):  # RESET
            self.close_connection = True
            return
        status, headers, body = answer
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _Server(ThreadingHTTPServer):
    fake: Fake
    daemon_threads = True


@pytest.fixture
def serve() -> Iterator[Callable[..., Fake]]:
    servers: list[_Server] = []

    def start(*answers: Answer) -> Fake:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = Fake(list(answers), url=f"http://127.0.0.1:{server.server_address[1]}")
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.fake

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run(kind: str, url: str, retry: RetryPolicy, op: Callable[[Any], Any]) -> Any:
    """``op`` on a sync or an async client (for the async one, ``op`` returns an awaitable)."""
    if kind == "sync":
        with Tickd(url, api_key="k.s", retry=retry) as client:
            return op(client)

    async def main() -> Any:
        async with AsyncTickd(url, api_key="k.s", retry=retry) as client:
            return await op(client)

    return asyncio.run(main())


def _error(status: int, code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": code, "field": None}}


def _new(client: Any) -> Any:
    return client.create_schedule(delay_s=5, callback={"type": "http", "url": "http://example.com/"})


def _batch(client: Any) -> Any:
    return client.create_schedules([{"delay_s": 5, "callback": {"type": "http", "url": "http://example.com/"}}])


KINDS = pytest.mark.parametrize("kind", ["sync", "async"])


@KINDS
def test_retry_after_is_waited_out(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((503, {"Retry-After": "1"}, _error(503, "store_unavailable")), (200, {}, POLICY))
    policy = run(kind, fake.url, FAST, lambda c: c.get_policy("p"))
    assert policy.name == "p" and len(fake.hits) == 2
    assert fake.hits[1].at - fake.hits[0].at >= 1.0


@KINDS
def test_429_is_retried_even_for_a_post_without_a_key(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((429, {"Retry-After": "0"}, _error(429, "rate_limited")), (200, {}, BATCH))
    assert run(kind, fake.url, FAST, _batch)[0].status == "scheduled"
    assert len(fake.hits) == 2


@KINDS
def test_a_post_without_a_key_is_not_sent_again_after_a_reset(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (200, {}, BATCH))
    with pytest.raises(Unavailable) as lost:
        run(kind, fake.url, FAST, _batch)
    assert lost.value.request_sent is True and lost.value.status is None
    assert len(fake.hits) == 1


@KINDS
def test_a_post_without_a_key_is_not_sent_again_after_a_503(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((503, {"Retry-After": "0"}, _error(503, "store_unavailable")), (200, {}, BATCH))
    with pytest.raises(Unavailable) as refused:
        run(kind, fake.url, FAST, _batch)
    assert refused.value.status == 503 and len(fake.hits) == 1


@KINDS
def test_a_create_gets_a_key_and_is_retried_after_a_reset(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (201, {}, SCHEDULE))
    assert run(kind, fake.url, FAST, _new).schedule_id == SCHEDULE["schedule_id"]
    keys = [hit.headers.get("Idempotency-Key") for hit in fake.hits]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0] is not None and keys[0].startswith("tickd-client-")


@KINDS
def test_a_given_key_is_sent_and_retried_on_in_progress(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((409, {"Retry-After": "0"}, _error(409, "idempotency_key_in_progress")), (200, {}, SCHEDULE))

    def create(client: Any) -> Any:
        return client.create_schedule(delay_s=5, callback={"type": "kafka", "topic": "t"}, idempotency_key="k-1")

    run(kind, fake.url, FAST, create)
    assert [hit.headers.get("Idempotency-Key") for hit in fake.hits] == ["k-1", "k-1"]


@KINDS
def test_without_retries_no_key_is_invented(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((201, {}, SCHEDULE))
    run(kind, fake.url, NO_RETRY, _new)
    assert "Idempotency-Key" not in fake.hits[0].headers


@KINDS
def test_a_retry_after_beyond_the_limit_is_raised(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((429, {"Retry-After": "120"}, _error(429, "rate_limited")))
    with pytest.raises(RateLimited) as limited:
        run(kind, fake.url, FAST, lambda c: c.get_policy("p"))
    assert limited.value.retry_after == 120 and limited.value.code == "rate_limited"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_is_retried_for_any_call() -> None:
    attempts: list[httpx.Request] = []
    url = f"http://127.0.0.1:{_closed_port()}"
    http = httpx.Client(base_url=url, event_hooks={"request": [attempts.append]})
    with Tickd(url, retry=FAST, http=http) as client, pytest.raises(Unavailable) as refused:
        _batch(client)
    assert refused.value.request_sent is False and len(attempts) == 3


def test_backoff_grows_within_its_cap_and_attempts_run_out() -> None:
    rng = random.Random(7)
    policy = RetryPolicy(attempts=5, base_delay_s=1, max_delay_s=3)
    assert all(0 <= backoff_s(policy, n, rng) <= min(3, 2 ** (n - 1)) for n in range(1, 10) for _ in range(50))
    busy = TickdError("x", status=503)
    assert delay_s(policy, 4, busy, repeatable=True, rng=rng) is not None
    assert delay_s(policy, 5, busy, repeatable=True, rng=rng) is None
    assert delay_s(policy, 1, TickdError("x", status=500), repeatable=True, rng=rng) is None


def test_retry_after_as_seconds_or_http_date() -> None:
    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Mon, 23 Nov 2026 10:00:05 GMT", now) == 5.0
    assert parse_retry_after("soon") is None and parse_retry_after("nan") is None and parse_retry_after(None) is None


def _put(client: Any, **when: Any) -> Any:
    return client.put_schedule_by_key("order-1", callback={"type": "http", "url": "http://example.com/"}, **when)


@KINDS
def test_a_put_by_key_is_retried_after_a_reset(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (200, {}, SCHEDULE))
    assert run(kind, fake.url, FAST, lambda c: _put(c, fire_at=_AT)).schedule_id == SCHEDULE["schedule_id"]
    assert [(hit.method, hit.path) for hit in fake.hits] == [("PUT", "/v1/schedules/by-key/order-1")] * 2


@KINDS
def test_a_put_by_key_is_retried_while_another_put_creates_the_key(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((409, {}, _error(409, "key_in_progress")), (201, {}, SCHEDULE))
    run(kind, fake.url, FAST, lambda c: _put(c, fire_at=_AT))
    assert len(fake.hits) == 2


@KINDS
def test_a_put_by_key_with_delay_s_is_not_sent_again(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (200, {}, SCHEDULE))
    with pytest.raises(Unavailable):
        run(kind, fake.url, FAST, lambda c: _put(c, delay_s=30))  # a repeat would move the fire
    assert len(fake.hits) == 1


@KINDS
@pytest.mark.parametrize("failure", [RESET, (503, {}, _error(503, "store_unavailable"))])
def test_a_debounced_put_by_key_is_not_sent_again(serve: Callable[..., Fake], kind: str, failure: Answer) -> None:
    fake = serve(failure, (200, {}, SCHEDULE))
    with pytest.raises(Unavailable):
        run(kind, fake.url, FAST, lambda c: _put(c, debounce={"window_s": 5}))  # a repeat would push the fire back
    assert len(fake.hits) == 1
    assert json.loads(fake.hits[0].body)["debounce"] == {"window_s": 5}


@KINDS
def test_a_debounced_put_by_key_is_retried_after_a_429_and_read(serve: Callable[..., Fake], kind: str) -> None:
    debounce = {"window_s": 5.0, "edge": "trailing", "first_put_at": _AT, "last_put_at": _AT}
    fake = serve(
        (429, {"Retry-After": "0"}, _error(429, "rate_limited")), (200, {}, {**SCHEDULE, "debounce": debounce})
    )
    put = run(kind, fake.url, FAST, lambda c: _put(c, debounce={"window_s": 5}))  # a 429 wrote nothing
    assert len(fake.hits) == 2 and put.debounce is not None
    assert (put.debounce.window_s, put.debounce.max_wait_s, put.debounce.last_put_at) == (5.0, None, put.fire_at)


@KINDS
def test_a_trigger_gets_a_key_and_is_retried_after_a_reset(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (201, {}, SCHEDULE))
    run(kind, fake.url, FAST, lambda c: c.trigger_schedule(SCHEDULE["schedule_id"]))
    keys = [hit.headers.get("Idempotency-Key") for hit in fake.hits]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0] is not None


@KINDS
def test_a_resume_is_not_sent_again_after_a_503_but_a_pause_is(serve: Callable[..., Fake], kind: str) -> None:
    busy = (503, {"Retry-After": "0"}, _error(503, "store_unavailable"))
    fake = serve(busy, (200, {}, SCHEDULE))
    with pytest.raises(Unavailable):
        run(kind, fake.url, FAST, lambda c: c.resume_schedule(SCHEDULE["schedule_id"]))
    assert len(fake.hits) == 1
    fake = serve(busy, (200, {}, SCHEDULE))
    run(kind, fake.url, FAST, lambda c: c.pause_schedule(SCHEDULE["schedule_id"]))
    assert len(fake.hits) == 2


PAUSE = {"paused_at": _AT, "until": "2026-11-23T12:00:00.000Z", "note": "migration"}


@KINDS
def test_a_timed_pause_is_retried_after_a_503_with_the_same_body(serve: Callable[..., Fake], kind: str) -> None:
    busy = (503, {"Retry-After": "0"}, _error(503, "store_unavailable"))
    paused = {**SCHEDULE, "status": "paused", "due_at": PAUSE["until"], "pause": PAUSE}
    fake = serve(busy, (200, {}, paused))
    until = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    found = run(
        kind, fake.url, FAST, lambda c: c.pause_schedule(SCHEDULE["schedule_id"], until=until, note="migration")
    )
    path = f"/v1/schedules/{SCHEDULE['schedule_id']}/pause"
    assert [(hit.method, hit.path) for hit in fake.hits] == [("POST", path)] * 2  # the same pause again: no change
    sent = {"until": "2026-11-23T12:00:00+00:00", "note": "migration"}
    assert [json.loads(hit.body) for hit in fake.hits] == [sent, sent]
    assert fake.hits[0].headers["Content-Type"] == "application/json"
    assert found.pause is not None and (found.pause.until, found.pause.note) == (until, "migration")
    assert found.due_at == found.pause.until and found.pause.paused_at == datetime(2026, 11, 23, 10, tzinfo=UTC)


@KINDS
def test_a_pause_sends_epoch_seconds_a_note_alone_or_no_body(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve((200, {}, SCHEDULE), (200, {}, SCHEDULE), (200, {}, SCHEDULE))
    schedule_id = SCHEDULE["schedule_id"]
    run(kind, fake.url, FAST, lambda c: c.pause_schedule(schedule_id, until=1795341600))
    run(kind, fake.url, FAST, lambda c: c.pause_schedule(schedule_id, note="on hold"))
    found = run(kind, fake.url, FAST, lambda c: c.pause_schedule(schedule_id))
    assert json.loads(fake.hits[0].body) == {"until": 1795341600}
    assert json.loads(fake.hits[1].body) == {"note": "on hold"}
    assert fake.hits[2].body == b"" and "Content-Type" not in fake.hits[2].headers  # no body: as before
    assert found.pause is None  # the answer has no pause


@KINDS
def test_a_conditional_timed_pause_is_not_sent_again(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (200, {}, SCHEDULE))
    with pytest.raises(Unavailable):  # a repeat of one that applied would find the version moved on
        run(kind, fake.url, FAST, lambda c: c.pause_schedule(SCHEDULE["schedule_id"], until=1795341600, if_match=3))
    assert [(hit.headers.get("If-Match"), json.loads(hit.body)) for hit in fake.hits] == [
        ('"3"', {"until": 1795341600})
    ]


LETTER = {
    "dead_letter_id": "1795474750375-6f1c2c5e-0000-4000-8000-000000000000",
    "schedule_id": SCHEDULE["schedule_id"],
    "fire_id": SCHEDULE["fire_id"],
    "failed_at": _AT,
    "attempts": 1,
    "last_error": "HTTP 404",
    "callback": SCHEDULE["callback"],
    "payload": None,
    "redriven_at": _AT,
    "redriven_due_at": _AT,
}

REFUSED = {"dead_letter_id": "x", "code": "c", "message": "m"}


@KINDS
def test_redriving_many_follows_the_cursor_and_is_retried(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(
        (200, {}, {"redriven": [LETTER], "errors": [], "next_cursor": "c2"}),
        (503, {"Retry-After": "0"}, _error(503, "store_unavailable")),
        (200, {}, {"redriven": [], "errors": [REFUSED], "next_cursor": None}),
    )
    done = run(kind, fake.url, FAST, lambda c: c.redrive_dead_letters(schedule_id="s", at=_AT, page_size=5))
    assert [d.dead_letter_id for d in done.redriven] == [LETTER["dead_letter_id"]] and done.errors[0].code == "c"
    assert [hit.path for hit in fake.hits] == [
        "/v1/dead-letters/redrive?limit=5&schedule_id=s",
        "/v1/dead-letters/redrive?limit=5&schedule_id=s&cursor=c2",
        "/v1/dead-letters/redrive?limit=5&schedule_id=s&cursor=c2",
    ]


@KINDS
def test_stats_is_a_read_retried_after_a_503_and_decoded(serve: Callable[..., Fake], kind: str) -> None:
    window = {"window_s": 300, "fired": 2, "delivered": 1, "retried": 0, "failed": 1}
    lateness = {"lateness_p50_s": 0.025, "lateness_p99_s": 0.25, "lateness_max_s": 0.31}
    empty = {"window_s": 3600, "fired": 0, "delivered": 0, "retried": 0, "failed": 0}
    none = {"lateness_p50_s": None, "lateness_p99_s": None, "lateness_max_s": None}
    answer = {"client_id": "c", "at": _AT, "windows": [{**window, **lateness}, {**empty, **none}]}
    fake = serve((503, {"Retry-After": "0"}, _error(503, "store_unavailable")), (200, {}, answer))
    found = run(kind, fake.url, FAST, lambda c: c.stats())
    assert [(hit.method, hit.path) for hit in fake.hits] == [("GET", "/v1/stats")] * 2
    assert (found.window(300).failed, found.window(300).lateness_p99_s) == (1, 0.25)
    assert found.window(3600).lateness_max_s is None and found.at.tzinfo is not None


CALENDAR = {
    "name": "h",
    "version": 2,
    "timezone": "Europe/Berlin",
    "dates": ["2026-12-25"],
    "ranges": [{"from": "2026-08-03T00:00:00", "to": "2026-08-17T00:00:00"}],
    "weekdays": ["sat", "sun"],
    "created_at": _AT,
    "updated_at": _AT,
}


@KINDS
def test_a_calendar_put_is_retried_after_a_reset_unless_conditional(serve: Callable[..., Fake], kind: str) -> None:
    fake = serve(RESET, (200, {"ETag": '"2"'}, CALENDAR))

    def put(client: Any) -> Any:
        ranges = [("2026-08-03T00:00", "2026-08-17T00:00")]
        return client.put_calendar(
            "h", timezone="Europe/Berlin", dates=["2026-12-25"], ranges=ranges, business_days=True
        )

    found = run(kind, fake.url, FAST, put)
    assert (found.version, found.ranges, found.weekdays) == (2, CALENDAR["ranges"], ["sat", "sun"])
    assert [(hit.method, hit.path) for hit in fake.hits] == [("PUT", "/v1/calendars/h")] * 2
    assert json.loads(fake.hits[1].body) == {
        "timezone": "Europe/Berlin",
        "dates": ["2026-12-25"],
        "ranges": [{"from": "2026-08-03T00:00", "to": "2026-08-17T00:00"}],
        "weekdays": [],
        "business_days": True,
    }
    assert "If-Match" not in fake.hits[0].headers
    fake = serve(RESET, (200, {}, CALENDAR))
    with pytest.raises(Unavailable):
        run(kind, fake.url, FAST, lambda c: c.put_calendar("h", if_match=1))  # a repeat would find version 2
    assert [hit.headers.get("If-Match") for hit in fake.hits] == ['"1"']


@KINDS
def test_a_calendar_delete_is_not_sent_again_after_a_503_but_a_read_is(serve: Callable[..., Fake], kind: str) -> None:
    busy = (503, {"Retry-After": "0"}, _error(503, "store_unavailable"))
    fake = serve(busy, (200, {}, CALENDAR))
    with pytest.raises(Unavailable):
        run(kind, fake.url, FAST, lambda c: c.delete_calendar("h", if_match="*"))
    assert [(hit.method, hit.path, hit.headers.get("If-Match")) for hit in fake.hits] == [
        ("DELETE", "/v1/calendars/h", "*")
    ]
    fake = serve(busy, (200, {}, {"calendars": [CALENDAR]}))
    assert [c.name for c in run(kind, fake.url, FAST, lambda c: c.list_calendars())] == ["h"]
    assert [(hit.method, hit.path) for hit in fake.hits] == [("GET", "/v1/calendars")] * 2
