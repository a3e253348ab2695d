"""Refuses callbacks to private, loopback, link-local and other non-public addresses.

The check runs where the connection is made, not where the schedule was accepted: a name that was
public at creation may resolve to an internal address at fire time (DNS rebinding). What "public"
means, and how every spelling of an address is normalised, is ``schema.addresses`` (the API uses the
same module at create time). Two parts here:

- ``GuardedResolver`` wraps aiohttp's resolver, so every name is checked on the very addresses the
  connector will dial. The connector caches resolutions for ``ttl_dns_cache`` seconds, so the cost is
  one lookup per host per cache period, and there is no window between check and connect.
- ``literal_is_blocked`` covers URLs whose host is an address literal in any form (``127.1``,
  ``2130706433``, ``[::ffff:7f00:1]``, full-width digits...): aiohttp (and the system resolver behind
  it) reads several of these as addresses without asking the resolver, so they are judged first.

The port is checked too, before every attempt and whatever ``allow_private`` says (``port_refusal``,
``schema.ports``): the API refused a denied port at create time, but the policy may have changed since,
and a schedule accepted before it did must not dial the port now. Such a fire fails for good (a dead
letter saying why); it is not retried, as no retry would reach another port.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from tickd.schema import addresses
from tickd.schema.ports import PortPolicy


class BlockedAddressError(OSError):
    """The callback target is, or resolves to, a non-public address and private targets are not allowed."""


def is_public(address: str) -> bool:
    """Whether ``address`` (an address literal, maybe with an IPv6 zone id) is globally routable unicast."""
    return addresses.address_is_public(address)


def literal_is_blocked(host: str) -> bool:
    """Whether ``host`` is an address literal that is not public, or no valid host at all (names are
    left to the resolver)."""
    return addresses.literal_is_blocked(host)


def port_refusal(url: str, ports: PortPolicy) -> str | None:
    """Why an attempt must not dial ``url``'s port under the node's current policy, or None if it may."""
    return ports.url_refusal(url)


class GuardedResolver(AbstractResolver):
    """aiohttp's default resolver, refusing any name with a non-public address among its answers."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if literal_is_blocked(host):
            raise BlockedAddressError(f"{host} is not a public address")
        answers = await self._inner.resolve(host, port, family)
        blocked = [a["host"] for a in answers if not is_public(a["host"])]
        if blocked:
            raise BlockedAddressError(f"{host} resolves to non-public address {blocked[0]}")
        return answers

    async def close(self) -> None:
        await self._inner.close()
