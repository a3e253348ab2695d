"""Callback destinations tickd must not be turned against: private, loopback, link-local and other
non-global addresses, refused at create time unless TICKD_CALLBACK_ALLOW_PRIVATE is set.

Literal IPs are checked as they are; host names are resolved (without blocking the loop) and refused
if any address they resolve to is non-global. DNS can change after that, so the poller re-checks the
address it actually connects to at delivery time; this is the first line, not the only one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time

from service.errors import Invalid

_RESOLVE_TIMEOUT_S = 2.0


def is_denied(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


class TargetGuard:
    """Answers "may tickd call this host?", caching the answer for host names for ``cache_s``."""

    def __init__(self, allow_private: bool, cache_s: float) -> None:
        self.allow_private = allow_private
        self._cache_s = cache_s
        self._verdicts: dict[str, tuple[bool, float]] = {}

    async def check(self, host: str, field: str) -> None:
        if self.allow_private:
            return
        literal = _literal(host)
        denied = is_denied(literal) if literal is not None else await self._host_denied(host.lower(), field)
        if denied:
            raise Invalid(
                f"{host} is a private, loopback or link-local destination", field=field, code="forbidden_target"
            )

    async def _host_denied(self, host: str, field: str) -> bool:
        cached = self._verdicts.get(host)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        addresses = await self._resolve(host, field)
        denied = any(is_denied(a) for a in addresses)
        if len(self._verdicts) > 10_000:
            self._verdicts.clear()
        self._verdicts[host] = (denied, time.monotonic() + self._cache_s)
        return denied

    async def _resolve(self, host: str, field: str) -> set[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(_RESOLVE_TIMEOUT_S):
                infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError):
            raise Invalid(f"cannot resolve {host}", field=field, code="unresolvable_host") from None
        return {str(info[4][0]) for info in infos}
