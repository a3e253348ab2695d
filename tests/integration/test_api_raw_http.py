"""Requests aiohttp's HTTP parser refuses before any handler runs, sent as raw bytes: each gets one
plain-text answer (414 for a request target over TICKD_MAX_LINE_BYTES, 431 for a header line over it or
more than TICKD_MAX_HEADERS headers, else 400) that names the reason without echoing the request, the
connection is closed after it, and nothing is ever a 500 or left hanging (service.refusals)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.integration.api_helpers import Api, serve, with_settings
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]

GET = b"GET /v1/schedules HTTP/1.1\r\nHost: x\r\n"
POST = b"POST /v1/schedules HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"
MARK = b"QQmarkQQ"  # in every refused request: the answer must not echo it

REFUSED: dict[str, tuple[bytes, int]] = {
    "request-line-garbage": (b"GARBAGE" + MARK + b"\r\n\r\n", 400),
    "method-token": (b"F(O /" + MARK + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "method-lowercase": (b"get /" + MARK + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "http-version": (b"GET /" + MARK + b" HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    "http-version-garbage": (b"GET /" + MARK + b" HTTP/1.x\r\nHost: x\r\n\r\n", 400),
    "http2-preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + MARK, 400),
    "tls-hello": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + MARK + b"\x00" * 40, 400),
    "target-control-char": (b"GET /v1/" + MARK + b"\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "target-space": (b"GET /v1/" + MARK + b" x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "target-too-long": (b"GET /v1/schedules?" + MARK * 1200 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "header-control-char": (GET + b"X-" + MARK + b"\x01: b\r\n\r\n", 400),
    "header-space-in-name": (GET + b"X " + MARK + b": b\r\n\r\n", 400),
    "header-8bit-name": (GET + b"X-\xff" + MARK + b": b\r\n\r\n", 400),
    "header-nul-value": (GET + b"X-A: " + MARK + b"\x00\r\n\r\n", 400),
    "header-no-colon": (GET + MARK + b"\r\n\r\n", 400),
    "header-obs-fold": (GET + b"X-A: b\r\n " + MARK + b"\r\n\r\n", 400),
    "header-bare-lf": (b"GET /v1/schedules HTTP/1.1\nHost: x\nX-A: " + MARK + b"\n\n", 400),
    "header-value-too-long": (GET + b"X-A: " + MARK * 1200 + b"\r\n\r\n", 431),
    "header-name-too-long": (GET + MARK * 1200 + b": b\r\n\r\n", 431),
    "headers-too-many": (GET + b"".join(b"X-%d: %s\r\n" % (i, MARK) for i in range(100)) + b"\r\n", 431),
    "chunk-size-not-hex": (CHUNKED + b"zz" + MARK + b"\r\nabc\r\n0\r\n\r\n", 400),
    "chunk-size-overflow": (CHUNKED + b"f" * 20 + b"\r\n" + MARK + b"\r\n0\r\n\r\n", 400),
    "chunk-missing-crlf": (CHUNKED + b"3\r\nabc" + MARK + b"\r\n0\r\n\r\n", 400),
    "chunk-extension-junk": (CHUNKED + b"3;\x01" + MARK + b"\r\nabc\r\n0\r\n\r\n", 400),
    "te-and-content-length": (POST + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n" + MARK, 400),
    "te-unknown": (POST + b"Transfer-Encoding: gzip\r\n\r\n" + MARK, 400),
    "te-chunked-not-last": (POST + b"Transfer-Encoding: chunked, gzip\r\n\r\n3\r\n" + MARK, 400),
    "content-length-negative": (POST + b"Content-Length: -1\r\n\r\n" + MARK, 400),
    "content-length-garbage": (POST + b"Content-Length: 1x\r\n\r\n" + MARK, 400),
    "content-length-plus": (POST + b"Content-Length: +3\r\n\r\n" + MARK, 400),
    "content-length-twice": (POST + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n" + MARK, 400),
}


async def exchange(api: Api, data: bytes, timeout_s: float) -> bytes:
    """Send ``data``, read until the server closes the connection: what came back. A connection the server
    leaves open fails the test (TimeoutError after ``timeout_s``, a deadline for the wait, not a speed)."""
    reader, writer = await asyncio.open_connection(api.server.host, api.server.port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            answer = await reader.read()
    finally:
        writer.close()
    return answer


@pytest.mark.parametrize("name", list(REFUSED))
async def test_a_request_the_parser_refuses_gets_one_plain_answer_and_a_closed_connection(api: Api, name: str) -> None:
    data, status = REFUSED[name]
    answer = await exchange(api, data, timeout_s=5)
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    assert int(status_line.split(" ")[1]) == status, answer
    assert headers["content-type"].startswith("text/plain")
    assert int(headers["content-length"]) == len(body)
    assert body.decode().startswith(f"{status} ") and body.endswith(b"\n")
    assert MARK not in answer


@pytest.fixture
async def short_api(api_settings: ApiSettings, store: Store) -> AsyncIterator[Api]:
    async for client in serve(with_settings(api_settings, keepalive_s=1, body_read_timeout_s=1), store):
        yield client


@pytest.mark.parametrize(
    "data",
    [b"GET /v1/sched", GET, POST + b"Content-Length: 100\r\n\r\n{"],
    ids=["request-line", "headers", "body"],
)
async def test_a_request_cut_short_is_never_left_hanging(short_api: Api, data: bytes) -> None:
    """Cut-off requests: the connection is closed within the keep-alive deadline, or (a body that never
    ends, after its answer) aiohttp's 10 s lingering time; never a 500."""
    answer = await exchange(short_api, data, timeout_s=15)
    assert b" 500 " not in answer.partition(b"\r\n")[0]
