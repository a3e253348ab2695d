"""Helpers every handler uses: reading a JSON body, the clock, conflict errors."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from schema.errors import Conflict
from service.errors import PayloadTooLarge, UnsupportedMediaType
from service.validation import to_ms


def now() -> datetime:
    """The request's clock reading, at the millisecond precision Cassandra keeps."""
    return to_ms(datetime.now(UTC))


async def read_json(request: web.Request, max_bytes: int) -> bytes:
    """The raw body of a JSON request: 415 for another content type, 413 above ``max_bytes``."""
    if request.content_type != "application/json":
        raise UnsupportedMediaType(
            "send the body as application/json", code="unsupported_media_type", field="Content-Type"
        )
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(f"body is larger than {max_bytes} bytes", code="too_large")
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
