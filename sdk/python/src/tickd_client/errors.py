"""One exception per kind of failure, built from the API's error body
``{"error": {"code", "message", "field"}}``; catch ``TickdError`` for all of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class TickdError(Exception):
    """Any failed call. ``status`` is the HTTP status (None when no answer arrived), ``code`` the API's
    error code, ``field`` the body field, parameter or header it names (or None)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        field: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        request_sent: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.request_id = request_id
        self.retry_after = retry_after
        # False only when the request certainly never reached the server (the connection did not open).
        self.request_sent = request_sent

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.code}: {self.message}{where}"


class Invalid(TickdError):
    """400/422 (and 413/415): the request was refused as it is; ``field`` names what to change."""


class Unauthorized(TickdError):
    """401: no key, an unknown one, or a wrong secret."""


class Forbidden(TickdError):
    """403: a client key on an admin endpoint, or a deactivated client creating."""


class NotFound(TickdError):
    """404: an unknown schedule, client or policy (or another client's)."""


class Conflict(TickdError):
    """409: already exists, already fired or cancelled, fire imminent, a concurrent change."""


class PreconditionFailed(TickdError):
    """412: the schedule is no longer at the version ``if_match`` named; nothing changed. Read it again."""


class RateLimited(TickdError):
    """429: over the client's create rate; ``retry_after`` is the wait the API asked for (seconds)."""


class Unavailable(TickdError):
    """502/503/504, or no answer at all (connection refused or reset, timeout): try again later."""


_BY_STATUS: dict[int, type[TickdError]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    413: Invalid,
    415: Invalid,
    422: Invalid,
    429: RateLimited,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int, body: Any, *, request_id: str | None = None, retry_after: float | None = None) -> TickdError:
    """The exception for an error answer; a body not in the API's shape still gives the right class."""
    detail = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(detail, Mapping):
        detail = {}
    cls = _BY_STATUS.get(status, TickdError)
    field = detail.get("field")
    return cls(
        str(detail.get("message") or f"HTTP {status}"),
        status=status,
        code=str(detail.get("code") or "http_error"),
        field=field if isinstance(field, str) else None,
        request_id=request_id,
        retry_after=retry_after,
    )
