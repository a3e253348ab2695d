"""Callback destinations tickd must not be turned against: private, loopback, link-local and other
non-global addresses, refused at create time unless TICKD_CALLBACK_ALLOW_PRIVATE is set.

Every spelling of an address (``127.1``, ``2130706433``, ``[::ffff:7f00:1]``, NAT64, 6to4, Teredo,
full-width digits) is normalised by ``schema.addresses``, the module the poller uses at connect time.
Host names are resolved off the event loop (the loop's thread pool), under a timeout and at most
``_MAX_LOOKUPS`` at once, so a client sending unresolvable names costs others nothing but a wait of at
most ``_RESOLVE_TIMEOUT_S``. DNS can change after that, so the poller re-checks the address it actually
connects to at delivery time; this is the first line, not the only one.
"""

from __future__ import annotations

import asyncio
import socket
import time

from tickd.schema import addresses
from tickd.service.errors import Invalid

_RESOLVE_TIMEOUT_S = 2.0
_MAX_LOOKUPS = 8


def is_denied(address: str) -> bool:
    return not addresses.address_is_public(address)


class TargetGuard:
    """Answers "may tickd call this host?", caching the answer for host names for ``cache_s``."""

    def __init__(self, allow_private: bool, cache_s: float) -> None:
        self.allow_private = allow_private
        self._cache_s = cache_s
        self._verdicts: dict[str, tuple[bool, float]] = {}
        self._lookups = asyncio.Semaphore(_MAX_LOOKUPS)

    async def check(self, host: str, field: str) -> None:
        try:
            parsed = addresses.normalise_host(host)
        except addresses.BadHost as exc:
            raise Invalid(str(exc), field=field) from None
        if self.allow_private:
            return
        if isinstance(parsed, str):
            denied = await self._host_denied(parsed, field)
        else:
            denied = not addresses.is_public(parsed)
        if denied:
            raise Invalid(
                f"{host} is a private, loopback or link-local destination", field=field, code="forbidden_target"
            )

    async def _host_denied(self, host: str, field: str) -> bool:
        cached = self._verdicts.get(host)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        found = await self._resolve(host, field)
        denied = any(is_denied(a) for a in found)
        if len(self._verdicts) > 10_000:
            self._verdicts.clear()
        self._verdicts[host] = (denied, time.monotonic() + self._cache_s)
        return denied

    async def _resolve(self, host: str, field: str) -> set[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(_RESOLVE_TIMEOUT_S), self._lookups:
                infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError, UnicodeError):
            raise Invalid(f"cannot resolve {host}", field=field, code="unresolvable_host") from None
        return {str(info[4][0]) for info in infos}
