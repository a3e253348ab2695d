"""The one place errors become HTTP responses: ``{"error": {"code", "message", "field"}}`` everywhere.

Handlers raise ``schema.errors`` types (or the HTTP-only ones below); ``error_middleware`` maps them,
aiohttp's own 404/405/413, and anything unexpected (a 500 that is logged, never leaked).

Bad input is one of two things. ``Malformed`` (400): the request does not match the documented schema
(/openapi.json): a typed decode failed, the JSON is malformed, a parameter is given twice. Any other
``InvalidInput`` (422): the request matches the schema but a rule no schema carries refuses it (fields
that exclude each other, a topic not granted, a policy that does not exist, a time too far from now).
So the checks after a successful decode answer 422 without saying so; only the decoding layer says 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from aiohttp import web

from tickd.schema.errors import AlreadyExists, Conflict, InvalidInput, NotFound, StoreUnavailable, TickdError

log = structlog.get_logger("tickd.api")
_encoder = msgspec.json.Encoder()


class Invalid(InvalidInput):
    """Input the schema allows but a rule refuses (422), with a specific code (``out_of_range``...)."""

    def __init__(self, message: str, *, field: str | None = None, code: str = "invalid") -> None:
        super().__init__(message, field=field)
        self.code = code


class Malformed(Invalid):
    """Input that does not match the documented schema (400): ``wrong_type``, ``unknown_field``..."""


class HttpError(TickdError):
    """An error that only exists at the HTTP layer; carries its own status and code."""

    status = 400

    def __init__(self, message: str, *, code: str, field: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message, field=field)
        self.code = code
        self.headers = headers or {}


class Unauthorized(HttpError):
    status = 401


class Forbidden(HttpError):
    status = 403


class PayloadTooLarge(HttpError):
    status = 413


class UnsupportedMediaType(HttpError):
    status = 415


class RequestTimeout(HttpError):
    status = 408


class TooManyRequests(HttpError):
    status = 429


class Unavailable(HttpError):
    status = 503


# The mapping of the data layer's errors; the most specific class wins (checked in this order).
STATUS_BY_ERROR: tuple[tuple[type[TickdError], int], ...] = (
    (Malformed, 400),
    (InvalidInput, 422),
    (NotFound, 404),
    (AlreadyExists, 409),
    (Conflict, 409),
    (StoreUnavailable, 503),
)

_HTTP_CODES = {404: "route_not_found", 405: "method_not_allowed", 413: "too_large", 400: "bad_request"}
# Header values are handed over as they arrived; one that is not UTF-8 is refused, naming the header.
# Authorization is the authenticator's: whatever is wrong with it is a 401.
_UNCHECKED_HEADERS = frozenset({"authorization"})


def status_of(exc: TickdError) -> int:
    if isinstance(exc, HttpError):
        return exc.status
    return next((status for cls, status in STATUS_BY_ERROR if isinstance(exc, cls)), 500)


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "field": field}


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_encoder.encode(body), status=status, content_type="application/json", headers=headers)


def error_response(exc: TickdError) -> web.Response:
    status = status_of(exc)
    headers = dict(exc.headers) if isinstance(exc, HttpError) else {}
    if isinstance(exc, StoreUnavailable):
        headers["Retry-After"] = "1"
    return json_response({"error": error_body(exc.code, exc.message, exc.field)}, status, headers)


def _from_http(exc: web.HTTPException) -> web.Response:
    code = _HTTP_CODES.get(exc.status, "http_error")
    message = exc.reason if exc.status != 413 else "request body is too large"
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    if isinstance(exc, web.HTTPMethodNotAllowed):
        headers = {"Allow": ", ".join(sorted(exc.allowed_methods))}
    return json_response({"error": error_body(code, message)}, exc.status, headers)


def _not_utf8(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: bytes that were not UTF-8
        return True
    return False


def screen(request: web.Request) -> None:
    """400 for a path, query or header value that is not UTF-8, naming it (before any handler reads it)."""
    if _not_utf8(request.path):
        raise Malformed("the path is not UTF-8", field="path")
    for name, value in request.query.items():
        if _not_utf8(name) or _not_utf8(value):
            raise Malformed("a query parameter is not UTF-8", field=name if not _not_utf8(name) else "query")
    for name, value in request.headers.items():
        if name.lower() not in _UNCHECKED_HEADERS and (_not_utf8(name) or _not_utf8(value)):
            raise Malformed("a header is not UTF-8", field=str(name) if not _not_utf8(name) else "headers")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        screen(request)
        return await handler(request)
    except TickdError as exc:
        if status_of(exc) >= 500:
            log.warning("request_failed", code=exc.code, error=exc.message)
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http(exc)
    except Exception:
        log.exception("request_crashed", path=request.path, method=request.method)
        return json_response({"error": error_body("internal", "internal error; it has been logged")}, 500)
