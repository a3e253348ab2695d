"""Refuses callbacks to private, loopback, link-local and other non-public addresses.

The check runs where the connection is made, not where the schedule was accepted: a name that was
public at creation may resolve to an internal address at fire time (DNS rebinding). Two parts:

- ``GuardedResolver`` wraps aiohttp's resolver, so every name is checked on the very addresses the
  connector will dial. The connector caches resolutions for ``ttl_dns_cache`` seconds, so the cost is
  one lookup per host per cache period, and there is no window between check and connect.
- ``literal_is_blocked`` covers URLs whose host is an IP literal, which aiohttp never resolves.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver


class BlockedAddressError(OSError):
    """The callback target is, or resolves to, a non-public address and private targets are not allowed."""


def is_public(address: str) -> bool:
    """Whether ``address`` (an IP literal) is globally routable unicast."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


@lru_cache(maxsize=4096)
def literal_is_blocked(host: str) -> bool:
    """Whether ``host`` is an IP literal that is not public (names are left to the resolver)."""
    try:
        return not is_public(host.strip("[]"))
    except ValueError:
        return False


class GuardedResolver(AbstractResolver):
    """aiohttp's default resolver, refusing any name with a non-public address among its answers."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        blocked = [a["host"] for a in answers if not is_public(a["host"])]
        if blocked:
            raise BlockedAddressError(f"{host} resolves to non-public address {blocked[0]}")
        return answers

    async def close(self) -> None:
        await self._inner.close()
