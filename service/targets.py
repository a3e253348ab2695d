"""Callback destinations tickd must not be turned against: private, loopback, link-local and other
non-global addresses, refused at create time unless TICKD_CALLBACK_ALLOW_PRIVATE is set.

Every spelling of an address (``127.1``, ``2130706433``, ``[::ffff:7f00:1]``, NAT64, 6to4, Teredo,
full-width digits) is normalised by ``schema.addresses``, the module the poller uses at connect time.
DNS can change after create time, so the poller re-checks the address it actually connects to at
delivery time; this is the first line, not the only one.

Host names are resolved off the event loop, in resolver threads of their own (TICKD_DNS_THREADS), so
that one client's slow names cost other clients nothing:
- a client has at most TICKD_DNS_LOOKUPS_PER_CLIENT lookups running; its next one waits for one of
  its own to finish (429 ``dns_lookups_busy`` past TICKD_DNS_TIMEOUT_S), never for another client's.
  A slot is held until the lookup's thread is done, not only until the caller stopped waiting: a
  lookup that timed out still holds its thread, and must keep holding its client's slot too;
- TICKD_DNS_TIMEOUT_S counts the lookup from when a thread starts it. Waiting for a free thread
  (only when more clients than threads / per-client slots resolve at once) is bounded by the same
  time and answered 503 ``dns_busy``: that is tickd's capacity, not the name's fault;
- a failed or timed-out lookup is remembered for TICKD_DNS_NEGATIVE_CACHE_S, an answer for
  TICKD_DNS_CACHE_S, at most TICKD_DNS_CACHE_MAX names (least recently used forgotten first).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable

from tickd.schema import addresses
from tickd.service.errors import Invalid, TooManyRequests, Unavailable
from tickd.service.limits import Lru
from tickd.service.settings import ApiSettings

# A blocking lookup, run in a resolver thread: a host name to its addresses (raises OSError if none).
Lookup = Callable[[str], Iterable[str]]
# A name's verdict: denied (True) or allowed (False), None for a name that did not resolve; and until when.
_Verdict = tuple[bool | None, float]


def is_denied(address: str) -> bool:
    return not addresses.address_is_public(address)


def system_lookup(host: str) -> list[str]:
    """The system resolver's addresses for ``host``."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]


class _ClientSlots:
    """Per-client lookup slots; a client's entry exists only while it has lookups waiting or running."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()

    async def enter(self, client_id: str) -> None:
        self._users[client_id] += 1
        gate = self._gates.setdefault(client_id, asyncio.Semaphore(self.per_client))
        try:
            await gate.acquire()
        except BaseException:
            self._forget(client_id)
            raise

    def of(self, client_id: str) -> int:
        return self._users[client_id]

    def leave(self, client_id: str) -> None:
        self._gates[client_id].release()
        self._forget(client_id)

    def _forget(self, client_id: str) -> None:
        self._users[client_id] -= 1
        if self._users[client_id] <= 0:
            del self._users[client_id], self._gates[client_id]


class TargetGuard:
    """Answers "may tickd call this host?" for a client, caching the answer for host names."""

    def __init__(
        self,
        allow_private: bool,
        cache_s: float,
        *,
        negative_cache_s: float = 5.0,
        cache_max: int = 10_000,
        timeout_s: float = 2.0,
        per_client: int = 4,
        threads: int = 32,
        lookup: Lookup = system_lookup,
    ) -> None:
        self.allow_private = allow_private
        self._cache_s = cache_s
        self._negative_cache_s = negative_cache_s
        self._timeout_s = timeout_s
        self._verdicts: Lru[str, _Verdict] = Lru(cache_max)
        self._slots = _ClientSlots(per_client)
        self._threads = threads
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="tickd-dns")
        self._lookup = lookup

    @classmethod
    def from_settings(cls, settings: ApiSettings, lookup: Lookup = system_lookup) -> TargetGuard:
        return cls(
            settings.callback_allow_private,
            settings.dns_cache_s,
            negative_cache_s=settings.dns_negative_cache_s,
            cache_max=settings.dns_cache_max,
            timeout_s=settings.dns_timeout_s,
            per_client=settings.dns_lookups_per_client,
            threads=settings.dns_threads,
            lookup=lookup,
        )

    def lookups_of(self, client_id: str) -> int:
        """The client's lookups waiting for a slot or running (a timed-out one until its thread is done)."""
        return self._slots.of(client_id)

    def close(self) -> None:
        """Stop the resolver threads (lookups still queued are dropped; running ones end on their own)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def check(self, host: str, field: str, client_id: str) -> None:
        """Pass, or 422 naming ``field``: a malformed host, a denied address, a name that does not resolve."""
        try:
            parsed = addresses.normalise_host(host)
        except addresses.BadHost as exc:
            raise Invalid(str(exc), field=field) from None
        if self.allow_private:
            return
        if isinstance(parsed, str):
            denied = await self._host_denied(parsed, field, client_id)
        else:
            denied = not addresses.is_public(parsed)
        if denied:
            raise Invalid(
                f"{host} is a private, loopback or link-local destination", field=field, code="forbidden_target"
            )

    def _cached(self, host: str, field: str) -> bool | None:
        """The cached verdict (None: none cached); a cached failure raises as the lookup did."""
        cached = self._verdicts.get(host)
        if cached is None or cached[1] <= time.monotonic():
            return None
        if cached[0] is None:
            raise _unresolvable(host, field)
        return cached[0]

    async def _host_denied(self, host: str, field: str, client_id: str) -> bool:
        cached = self._cached(host, field)
        if cached is not None:
            return cached
        await self._enter(client_id, field)
        try:
            cached = self._cached(host, field)  # another request of this client may have just resolved it
            if cached is not None:
                return cached
            found = self._start(host, client_id)
        except BaseException:
            self._slots.leave(client_id)
            raise
        denied = any(is_denied(a) for a in await self._resolved(host, field, found))
        self._remember(host, denied, self._cache_s)
        return denied

    async def _enter(self, client_id: str, field: str) -> None:
        """Wait for one of the client's own lookup slots (429 if its own lookups hold them too long)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._slots.enter(client_id)
        except TimeoutError:
            raise TooManyRequests(
                f"{self._slots.per_client} lookups of this client's callback hosts are still running "
                f"(TICKD_DNS_LOOKUPS_PER_CLIENT); retry when they are over",
                code="dns_lookups_busy",
                field=field,
                headers={"Retry-After": str(max(1, math.ceil(self._timeout_s)))},
            ) from None

    def _start(self, host: str, client_id: str) -> _Started:
        """Queue the lookup on a resolver thread; the client's slot is freed when that thread is done."""
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def run() -> list[str]:
            _call_soon(loop, started.set)
            return list(self._lookup(host))

        future = self._pool.submit(run)
        future.add_done_callback(lambda _: _call_soon(loop, self._slots.leave, client_id))
        return _Started(future, started, asyncio.wrap_future(future))

    async def _resolved(self, host: str, field: str, lookup: _Started) -> list[str]:
        """The lookup's addresses: its thread's start waited for, then the lookup itself, each bounded."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await lookup.started.wait()
        except TimeoutError:
            lookup.future.cancel()
            raise Unavailable(
                f"all {self._threads} resolver threads are busy (TICKD_DNS_THREADS); retry in a moment",
                code="dns_busy",
                field=field,
                headers={"Retry-After": "1"},
            ) from None
        try:
            async with asyncio.timeout(self._timeout_s):
                return await asyncio.shield(lookup.result)
        except (OSError, TimeoutError, UnicodeError):
            self._remember(host, None, self._negative_cache_s)
            raise _unresolvable(host, field) from None

    def _remember(self, host: str, denied: bool | None, for_s: float) -> None:
        if for_s > 0:
            self._verdicts.put(host, (denied, time.monotonic() + for_s))


class _Started:
    """A lookup handed to a resolver thread: the thread's future, set once it runs, and its result."""

    __slots__ = ("future", "result", "started")

    def __init__(
        self, future: concurrent.futures.Future[list[str]], started: asyncio.Event, result: asyncio.Future[list[str]]
    ) -> None:
        self.future = future
        self.started = started
        self.result = result
        # Nobody awaits a lookup that timed out: its outcome is consumed here, not reported as lost.
        result.add_done_callback(_consume)


def _consume(result: asyncio.Future[list[str]]) -> None:
    if not result.cancelled():
        result.exception()


def _unresolvable(host: str, field: str) -> Invalid:
    return Invalid(f"cannot resolve {host}", field=field, code="unresolvable_host")


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    """``loop.call_soon_threadsafe`` from a resolver thread, nothing if the loop has closed meanwhile."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
