"""Requests aiohttp's HTTP parser refuses before any handler runs (a bad request line, invalid header
bytes, a line over ``TICKD_MAX_LINE_BYTES``, too many headers, bad chunked framing): one plain answer.

aiohttp answers them itself, outside the middlewares: a 400 whose text echoes up to 100 bytes of the
request, logged as an error with a traceback (a hostile client could fill the logs). Here each one gets
``414`` (request target too long), ``431`` (a header line too long, too many headers) or ``400``, a short
plain-text body naming the reason without echoing the request, ``Connection: close``, and one
``request_unparseable`` log line. aiohttp offers no hook for this short of replacing its server
class, so ``install`` wraps ``RequestHandler.handle_error`` once; every other error takes aiohttp's path.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import structlog
from aiohttp import web, web_protocol
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong

log = structlog.get_logger("tickd.api")

# Words of the first line of the parser's message (the rest echoes the request), in order, and the
# reason given for each ("malformed request" if none).
_REASONS = (
    ("too many headers", "too many headers"),
    ("chunk", "malformed chunked body"),
    ("transfer-encoding", "invalid Transfer-Encoding"),
    ("content-length", "invalid Content-Length"),
    ("method", "invalid method"),
    ("header", "invalid header"),
    ("url", "invalid request target"),
    ("https", "not HTTP (TLS on a plain HTTP port?)"),
)


def refusal(exc: HttpProcessingError) -> tuple[int, str]:
    """The status and reason for a request the parser refused."""
    if isinstance(exc, LineTooLong):
        # The C parser hands the request target over as a bytearray, header names and values as bytes.
        if isinstance(exc.args[0], bytearray):
            return HTTPStatus.REQUEST_URI_TOO_LONG, "request target too long"
        return HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "header line too long"
    first_line = (exc.message if isinstance(exc.message, str) else "").partition("\n")[0].lower()
    reason = next((reason for word, reason in _REASONS if word in first_line), "malformed request")
    if reason == "too many headers":
        return HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, reason
    return HTTPStatus.BAD_REQUEST, reason


def _answer(status: int, reason: str) -> web.Response:
    phrase = HTTPStatus(status).phrase
    response = web.Response(status=status, text=f"{status} {phrase}: {reason}\n", content_type="text/plain")
    response.force_close()
    return response


_original = web_protocol.RequestHandler.handle_error


def _handle_error(
    self: web_protocol.RequestHandler,
    request: web.BaseRequest,
    status: int = 500,
    exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    if not isinstance(exc, BadHttpMessage | HttpProcessingError) or status >= 500 or request.writer.output_size:
        return _original(self, request, status, exc, message)
    answer, reason = refusal(exc)
    log.info("request_unparseable", status=int(answer), reason=reason, remote=request.remote)
    return _answer(answer, reason)


def install() -> None:
    """Answer parser refusals as above (idempotent; affects every aiohttp server in the process)."""
    handler: Any = web_protocol.RequestHandler
    handler.handle_error = _handle_error
