"""HTTP callbacks: one shared aiohttp session per node, fair across clients.

Fairness: each client has its own semaphore (``per_client_limit`` requests in flight); a client's
excess fires queue on it and nowhere else. The connector's pool limits are safety caps sized above
any one client's share (checked in ``HttpSettings``), so a hanging endpoint can exhaust only its own
client's slots. Semaphores live in a weak mapping: an idle client's semaphore is dropped. The pipeline
takes the same share earlier (``poller.slots``: the client's HTTP slot, then a node slot, once a fire can
go out), so a client's fires beyond its share wait holding no node slot; this semaphore then only bounds
each attempt, for any caller.

Outcome of one attempt: 2xx succeeds; 408, 425, 429, 5xx, timeouts and connection errors are retried;
any other status (other 4xx, and 3xx: redirects are not followed, so a redirect cannot reach an address
the guard refuses) fails at once. Statuses outside the registered ranges are classified the same way
(6xx..9xx retried, a final 1xx failed); a status line aiohttp cannot parse is a broken answer (retried).
A ``Retry-After`` is read as delta-seconds or an HTTP-date and clamped to the retry policy's cap
(``backoff.retry_after_s``): a malformed one is ignored, a huge one is the cap. The body of an answer is
never read: a huge, slow or badly encoded body costs nothing (its connection is closed, not reused),
and a connection closed mid-answer is a broken answer. A refused address (see ``guard``) or an invalid
URL fails at once.
Proxy environment variables are ignored (``trust_env=False``): a proxy would dial the target for us,
past the guard. Each attempt is signed when it is sent (``poller.signing``: ``webhook-*`` headers).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from types import TracebackType

import aiohttp
import yarl
from opentelemetry.trace import SpanKind

from tickd.poller import signing
from tickd.poller.callbacks.backoff import MAX_CAP_S, RetryPolicy, retry_after_s
from tickd.poller.callbacks.guard import BlockedAddressError, GuardedResolver, literal_is_blocked, port_refusal
from tickd.poller.callbacks.retry import Retrier, fire_logger
from tickd.poller.delivery import DeliveryResult, encode_body, http_headers
from tickd.schema import tracing
from tickd.schema.addresses import redacted
from tickd.schema.errors import ConfigError
from tickd.schema.model import HttpCallback, Schedule
from tickd.schema.ports import DEFAULT_POLICY, PortPolicy
from tickd.schema.settings import env_bool, env_float, env_int

RETRIABLE_4XX = frozenset({408, 425, 429})
# The longest error text an attempt keeps (``last_error``, logs, dead letters).
_MAX_ERROR_CHARS = 300
_USER_AGENT = "tickd-callbacks/0.1"


@dataclass(frozen=True)
class HttpSettings:
    """The node's HTTP callback pool."""

    per_client_limit: int = 64
    connection_limit: int = 4096
    per_host_limit: int = 256
    dns_cache_ttl_s: int = 60
    keepalive_s: float = 30.0
    allow_private: bool = False
    ports: PortPolicy = DEFAULT_POLICY  # the ports callbacks may dial (schema.ports), private or not

    def __post_init__(self) -> None:
        if self.per_client_limit < 1:
            raise ConfigError("per_client_limit must be >= 1", field="per_client_limit")
        if self.per_client_limit > self.per_host_limit or self.per_host_limit > self.connection_limit:
            raise ConfigError(
                "need per_client_limit <= per_host_limit <= connection_limit, so one client cannot fill a shared pool",
                field="per_host_limit",
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HttpSettings:
        env = os.environ if env is None else env
        return cls(
            per_client_limit=env_int(env, "TICKD_CALLBACK_PER_CLIENT_LIMIT", cls.per_client_limit, low=1, high=10_000),
            connection_limit=env_int(env, "TICKD_CALLBACK_CONNECTION_LIMIT", cls.connection_limit, low=1, high=100_000),
            per_host_limit=env_int(env, "TICKD_CALLBACK_PER_HOST_LIMIT", cls.per_host_limit, low=1, high=100_000),
            dns_cache_ttl_s=env_int(env, "TICKD_CALLBACK_DNS_TTL_S", cls.dns_cache_ttl_s, low=1, high=3600),
            keepalive_s=env_float(env, "TICKD_CALLBACK_KEEPALIVE_S", cls.keepalive_s, low=0.0, high=3600),
            allow_private=env_bool(env, "TICKD_CALLBACK_ALLOW_PRIVATE", cls.allow_private),
            ports=PortPolicy.from_env(env),
        )


def classify_status(
    status: int, retry_after: str | None, attempt: int, now: datetime, cap_s: float = MAX_CAP_S
) -> DeliveryResult:
    """The outcome of one attempt that got an HTTP response: any status aiohttp parsed (a final 1xx, an
    unknown 6xx..9xx) is classified, and a Retry-After is read within ``[0, cap_s]`` (``retry_after_s``)."""
    if 200 <= status < 300:
        return DeliveryResult.delivered(attempt, status)
    retriable = status >= 500 or status in RETRIABLE_4XX
    wait = retry_after_s(retry_after, now, cap_s) if retriable else None
    return DeliveryResult.failed(attempt, f"HTTP {status}", retriable=retriable, retry_after_s=wait, status_code=status)


def classify_error(exc: Exception, attempt: int, timeout_s: float) -> DeliveryResult:
    """The outcome of one attempt that raised instead of answering."""
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, BlockedAddressError):
        return DeliveryResult.failed(attempt, f"refused target: {exc.os_error}", retriable=False)
    if isinstance(exc, TimeoutError):
        return DeliveryResult.failed(attempt, f"timeout after {timeout_s}s", retriable=True, maybe_received=True)
    if isinstance(exc, ValueError | aiohttp.NonHttpUrlClientError | aiohttp.RedirectClientError):
        return DeliveryResult.failed(attempt, _bounded(f"invalid request: {exc}"), retriable=False)
    # Never connected: nothing went out. Anything else (a dropped connection, a broken answer) may have
    # followed a request the subscriber received.
    sent = not isinstance(exc, aiohttp.ClientConnectorError)
    error = _bounded(f"{type(exc).__name__}: {exc}")
    return DeliveryResult.failed(attempt, error, retriable=True, maybe_received=sent)


def _bounded(error: str) -> str:
    """An error's text, redacted (``redacted``) and cut to ``_MAX_ERROR_CHARS``: aiohttp quotes what it could
    not parse, so a broken answer's text carries the endpoint's bytes (up to a whole body) into
    ``last_error``, logs and letters."""
    error = redacted(error)
    return error if len(error) <= _MAX_ERROR_CHARS else error[: _MAX_ERROR_CHARS - 3] + "..."


@lru_cache(maxsize=64)
def _timeout(total_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total_s)


class HttpDispatcher:
    """Delivers fires to HTTP endpoints; one per node. Use as an async context manager, or call
    ``start()`` and ``close()``."""

    def __init__(self, settings: HttpSettings, policy: RetryPolicy, *, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._retrier = Retrier(policy, rng=rng)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._slots: weakref.WeakValueDictionary[str, asyncio.Semaphore] = weakref.WeakValueDictionary()

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=self._connector(),
                cookie_jar=aiohttp.DummyCookieJar(),  # tenants share the session, never cookies
                headers={"User-Agent": _USER_AGENT},
                trust_env=False,
            )

    def _connector(self) -> aiohttp.TCPConnector:
        s = self.settings
        return aiohttp.TCPConnector(
            limit=s.connection_limit,
            limit_per_host=s.per_host_limit,
            ttl_dns_cache=s.dns_cache_ttl_s,
            keepalive_timeout=s.keepalive_s,
            resolver=None if s.allow_private else GuardedResolver(),
        )

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> HttpDispatcher:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        callback = schedule.callback
        if not isinstance(callback, HttpCallback):
            raise TypeError(f"HttpDispatcher cannot deliver a {type(callback).__name__}")

        async def attempt_once(n: int) -> DeliveryResult:
            return await self._attempt(schedule, callback, n, fired_at)

        with tracing.deliver_span(schedule):
            return await self._retrier.run(attempt_once, attempt, fire_logger(schedule, "http"))

    async def _attempt(
        self, schedule: Schedule, callback: HttpCallback, attempt: int, fired_at: datetime
    ) -> DeliveryResult:
        refused = port_refusal(callback.url, self.settings.ports)
        if refused is not None:
            return DeliveryResult.failed(attempt, f"refused target: {refused}", retriable=False)
        if not self.settings.allow_private and _url_is_blocked(callback.url):
            return DeliveryResult.failed(
                attempt, f"refused target: {redacted(callback.url)} is not public", retriable=False
            )
        body = encode_body(schedule, attempt, fired_at)
        headers = _with_signature(http_headers(schedule, callback, attempt), schedule, body)
        async with self._slot(schedule.client_id):
            with tracing.span("callback.http", SpanKind.CLIENT):
                try:
                    return await self._request(callback, body, tracing.with_traceparent(headers), attempt)
                except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                    return classify_error(exc, attempt, callback.timeout_s)

    async def _request(
        self, callback: HttpCallback, body: bytes, headers: dict[str, str], attempt: int
    ) -> DeliveryResult:
        session = await self._session_or_start()
        async with session.request(
            callback.method,
            callback.url,
            data=body,
            headers=headers,
            timeout=_timeout(callback.timeout_s),
            allow_redirects=False,
        ) as response:
            retry_after = response.headers.get("Retry-After")
            return classify_status(response.status, retry_after, attempt, datetime.now(UTC), self._retrier.policy.cap_s)

    async def _session_or_start(self) -> aiohttp.ClientSession:
        if self._closed:
            raise aiohttp.ClientConnectionError("callback dispatcher closed")  # retriable: delivered later
        if self._session is None:
            await self.start()
        assert self._session is not None
        return self._session

    @asynccontextmanager
    async def _slot(self, client_id: str) -> AsyncIterator[None]:
        """One of the client's ``per_client_limit`` request slots; waits on that client's semaphore only."""
        semaphore = self._slots.get(client_id)
        if semaphore is None:
            semaphore = asyncio.Semaphore(self.settings.per_client_limit)
            self._slots[client_id] = semaphore
        async with semaphore:
            yield


def _with_signature(headers: dict[str, str], schedule: Schedule, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers of the exact ``body`` sent, signed now; a schedule's own headers of
    those names are dropped, so a subscriber never reads a tenant's value for one of them."""
    signed = signing.signed_headers(schedule, int(time.time()), body)
    if signed:
        headers = {name: value for name, value in headers.items() if name.lower() not in signed}
        headers.update(signed)
    return headers


@lru_cache(maxsize=4096)
def _url_is_blocked(url: str) -> bool:
    """Whether the URL's host is a non-public address in any spelling (``127.1``, ``2130706433``,
    ``[::ffff:7f00:1]``, full-width digits): aiohttp dials several of these without the resolver."""
    try:
        host = yarl.URL(url).raw_host
    except ValueError:
        return False  # not a URL at all: aiohttp refuses it as an invalid request
    return host is not None and literal_is_blocked(host)
