"""Helpers every handler uses: reading a JSON body, the clock, conflict errors, a schedule's answer."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from aiohttp import web

from tickd.schema.errors import Conflict
from tickd.schema.model import Schedule
from tickd.service import keys, preconditions
from tickd.service.errors import Malformed, PayloadTooLarge, RequestTimeout, UnsupportedMediaType, json_response
from tickd.service.validation import to_ms
from tickd.service.views import schedule_view


def schedule_answer(schedule: Schedule, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A schedule as the API answers it: its view, and its version as the ETag (``service.preconditions``)."""
    return json_response(schedule_view(schedule), status, {**(headers or {}), "ETag": preconditions.etag(schedule)})


def now() -> datetime:
    """The request's clock reading, at the millisecond precision Cassandra keeps."""
    return to_ms(datetime.now(UTC))


async def read_json(request: web.Request, max_bytes: int) -> bytes:
    """The raw body of a JSON request: 415 for another content type, a charset other than UTF-8 or a
    compressed body; 413 above ``max_bytes``; 408 if it does not arrive within the read timeout."""
    _check_media(request)
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"body is larger than {max_bytes} bytes", code="too_large")
    if request.content.is_eof():
        body = await _read(request, max_bytes)  # all of it has arrived (the usual case): nothing to wait for
    else:
        try:
            async with asyncio.timeout(request.app[keys.SETTINGS].body_read_timeout_s):
                body = await _read(request, max_bytes)
        except TimeoutError:
            raise RequestTimeout("the body did not arrive in time", code="request_timeout") from None
    if not body.isascii():
        try:
            body.decode("utf-8")  # JSON is UTF-8 (RFC 8259); a payload is delivered byte for byte
        except UnicodeDecodeError as exc:
            raise Malformed(f"body is not UTF-8 (byte {exc.start})", code="malformed_json") from None
    return body


def _check_media(request: web.Request) -> None:
    if request.content_type != "application/json":
        raise UnsupportedMediaType(
            "send the body as application/json", code="unsupported_media_type", field="Content-Type"
        )
    if request.charset not in (None, "utf-8", "UTF-8"):
        raise UnsupportedMediaType("JSON bodies are UTF-8", code="unsupported_media_type", field="Content-Type")
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        raise UnsupportedMediaType(
            "compressed bodies are not accepted", code="unsupported_media_type", field="Content-Encoding"
        )


async def _read(request: web.Request, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"body is larger than {max_bytes} bytes", code="too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def conflict(message: str, code: str) -> Conflict:
    exc = Conflict(message)
    exc.code = code
    return exc
