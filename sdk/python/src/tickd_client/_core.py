"""What the sync and the async client share: settings, the request a ``Call`` becomes, reading its
answer, mapping transport failures, and the retry decision. The clients only send and wait."""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from tickd_client import calls
from tickd_client.calls import Call
from tickd_client.errors import TickdError, Unavailable, error_for
from tickd_client.models import Schedule
from tickd_client.retry import RetryPolicy, delay_s, parse_retry_after

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8080"
VERSION = "0.1.0"
# Never sent: the connection did not open, so any call may be tried again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Settings:
    url: str = DEFAULT_URL
    api_key: str | None = None
    admin_token: str | None = None
    timeout_s: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


def env_settings(env: Mapping[str, str] | None = None, **given: Any) -> dict[str, Any]:
    """Keyword arguments for a client from ``TICKD_URL``, ``TICKD_API_KEY`` and ``TICKD_ADMIN_TOKEN``;
    arguments given (not None) win."""
    env = os.environ if env is None else env
    found = {
        "url": env.get("TICKD_URL") or DEFAULT_URL,
        "api_key": env.get("TICKD_API_KEY") or None,
        "admin_token": env.get("TICKD_ADMIN_TOKEN") or None,
    }
    return {**found, **{name: value for name, value in given.items() if value is not None}}


class Core:
    def __init__(self, settings: Settings, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.rng = rng or random.Random()

    def request(self, call: Call[Any]) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` / ``httpx.AsyncClient.request``."""
        headers = {"User-Agent": f"tickd-client/{VERSION}", "Accept": "application/json", **call.headers}
        token = self.settings.admin_token if call.auth == "admin" else self.settings.api_key
        if token:
            headers["Authorization"] = f"Bearer {token}"
        args: dict[str, Any] = {"method": call.method, "url": call.path, "headers": headers}
        if call.params:
            args["params"] = call.params
        if call.body is not None:
            args["json"] = call.body
        return args

    def result(self, call: Call[T], response: httpx.Response) -> T:
        body = _json(response.content)
        if response.status_code >= 400:
            raise error_for(
                response.status_code,
                body,
                request_id=response.headers.get("X-Request-Id"),
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
            )
        try:
            return call.parse(body)
        except ValueError as exc:
            raise TickdError(f"unexpected answer to {call.method} {call.path}: {exc}", code="bad_answer") from exc

    def retry_delay(self, call: Call[Any], attempt: int, error: TickdError) -> float | None:
        return delay_s(self.settings.retry, attempt, error, repeatable=call.repeatable, rng=self.rng)

    def schedule_call(self, fields: calls.ScheduleFields, idempotency_key: str | None) -> Call[Schedule]:
        """With retries on, a create without a key gets one, so that a retried create is the same create."""
        if idempotency_key is None and self.settings.retry.enabled:
            idempotency_key = f"tickd-client-{uuid.uuid4()}"
        return calls.create_schedule(fields, idempotency_key)

    def trigger_call(self, schedule_id: str, idempotency_key: str | None) -> Call[Schedule]:
        """Likewise for a trigger: with retries on, a retried trigger is the same trigger, not a second fire."""
        if idempotency_key is None and self.settings.retry.enabled:
            idempotency_key = f"tickd-client-{uuid.uuid4()}"
        return calls.trigger_schedule(schedule_id, idempotency_key)


def transport_error(exc: httpx.TransportError) -> TickdError:
    """A request that got no answer, as ``Unavailable``; ``request_sent`` False if it never left."""
    sent = not isinstance(exc, _NOT_SENT)
    error = Unavailable(
        f"no answer from tickd: {type(exc).__name__}: {exc}", code="connection_error", request_sent=sent
    )
    error.__cause__ = exc
    return error


def _json(content: bytes) -> Any:
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def http_options(settings: Settings) -> dict[str, Any]:
    """``httpx`` client options: the API's base URL and the timeout of each request."""
    return {"base_url": settings.url.rstrip("/"), "timeout": settings.timeout_s}
