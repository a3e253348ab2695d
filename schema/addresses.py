"""Which callback destinations are public: one guard for the API (create time) and the poller (connect time).

A host is first normalised the way a resolver or an HTTP client could read it, so no spelling of an
internal address slips through:

- every IPv4 literal form ``inet_aton`` accepts: decimal ``2130706433``, hex ``0x7f000001``, octal
  ``0177.0.0.1``, short ``127.1`` / ``127.0.1``, a trailing dot;
- full-width digits and dots (U+FF11 U+FF12 U+FF17 U+3002 ...) via NFKC and IDNA (UTS 46) mapping;
- IPv6 with a zone id or in brackets; and IPv6 forms that carry an IPv4 address: IPv4-mapped
  ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, SIIT ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96``,
  6to4 ``2002::/16`` and Teredo ``2001::/32``. Such an address is public only if the IPv4 address it
  carries is; IPv4-compatible and local-use NAT64 (``64:ff9b:1::/48``) are never public.

Public means globally routable unicast (``ipaddress``'s ``is_global``, minus multicast and site-local).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPAT = ipaddress.IPv6Network("::/96")
_PART = re.compile(r"(?:0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)")
_NUMERIC_LABEL = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
MAX_HOST_LENGTH = 253


class BadHost(ValueError):
    """Not a host name or address that any resolver would accept."""


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` read as ``inet_aton`` would (1-4 parts, each decimal, octal or hex); None if it is not
    an IPv4 literal in any of those forms."""
    parts = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_PART.fullmatch(p) for p in parts):
        return None
    values = [_part_value(p) for p in parts]
    last_bits = 8 * (5 - len(values))
    if any(v > 255 for v in values[:-1]) or values[-1] >= 1 << last_bits:
        return None
    number = values[-1]
    for i, value in enumerate(values[:-1]):
        number |= value << (24 - 8 * i)
    return ipaddress.IPv4Address(number)


def _part_value(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part[0] == "0":
        return int(part, 8)
    return int(part)


def _ipv6(text: str) -> ipaddress.IPv6Address | None:
    if ":" not in text:
        return None
    try:
        return ipaddress.IPv6Address(text.split("%", 1)[0])
    except ValueError:
        return None


@functools.lru_cache(maxsize=8192)
def normalise_host(host: str) -> IPAddress | str:
    """The address a host literal denotes, or the host name in lower-case ASCII (IDNA); ``BadHost`` if
    it is neither."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if (ip6 := _ipv6(text)) is not None:
        return ip6
    text = unicodedata.normalize("NFKC", text).translate(_DOTS)
    if (ip4 := parse_ipv4(text)) is not None:
        return ip4
    try:
        name = idna.encode(text.rstrip("."), uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        raise BadHost(f"{host!r} is not a valid host name") from None
    if not name or len(name) > MAX_HOST_LENGTH:
        raise BadHost(f"{host!r} is not a valid host name")
    if (ip4 := parse_ipv4(name)) is not None:
        return ip4
    if _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        # WHATWG URL: a host ending in a number is an IPv4 address or invalid, never a name.
        raise BadHost(f"{host!r} is neither an IPv4 address nor a host name")
    return name


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 transition form carries (mapped, SIIT, NAT64, 6to4, Teredo client)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _SIIT or ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def is_public(ip: IPAddress) -> bool:
    """Globally routable unicast, and so is any IPv4 address it carries."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id or ip in _COMPAT or ip in _NAT64_LOCAL or ip.is_site_local:
            return False
        carried = embedded_ipv4(ip)
        if carried is not None:
            return _plain_public(carried) and (ip in _NAT64 or ip.ipv4_mapped is not None or _plain_public(ip))
    return _plain_public(ip)


def _plain_public(ip: IPAddress) -> bool:
    return ip.is_global and not ip.is_multicast


def address_is_public(address: str) -> bool:
    """For a resolver's answer (an address string, maybe with an IPv6 zone id)."""
    try:
        parsed = normalise_host(address)
    except BadHost:
        return False
    return not isinstance(parsed, str) and is_public(parsed)


def literal_is_blocked(host: str) -> bool:
    """Whether ``host`` is an address literal (in any form) that is not public; names are for the resolver."""
    try:
        parsed = normalise_host(host)
    except BadHost:
        return True
    return not isinstance(parsed, str) and not is_public(parsed)


# A URL inside an error's text: a scheme, then everything up to a space or a quote that ends the quoting.
_URL_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,15}://)([^\s'\"<>]*)")


def redacted(text: str) -> str:
    """``text`` with each URL in it cut to its scheme, host, port and path: a callback URL's credentials
    (``user:password@``) and its query string and fragment (where tokens usually travel) never reach
    ``last_error``, logs or dead letters. aiohttp names the URL in several of its errors."""
    return _URL_IN_TEXT.sub(_redact_url, text)


def _redact_url(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, slash, path = rest[:cut].partition("/")
    host = authority.rpartition("@")[2]
    credentials = "[redacted]@" if "@" in authority else ""
    return f"{scheme}{credentials}{host}{slash}{path}{'?[redacted]' if cut < len(rest) else ''}"
