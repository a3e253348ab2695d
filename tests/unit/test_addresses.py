"""The address guard against ``ipaddress``: every spelling of an address means that address, and a
transition form is public only when the IPv4 address it carries is."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.schema.addresses import (
    BadHost,
    address_is_public,
    is_public,
    literal_is_blocked,
    normalise_host,
    parse_ipv4,
)


def wide(text: str) -> str:
    """Full-width letters and digits, ideographic full stops: how a host can be spelled to dodge a check."""
    return "".join("\u3002" if c == "." else chr(ord(c) + 0xFEE0) if c.isalnum() else c for c in text)


ipv4s = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)
ipv6s = st.integers(min_value=0, max_value=2**128 - 1).map(ipaddress.IPv6Address)


def _forms(ip: ipaddress.IPv4Address) -> list[str]:
    n = int(ip)
    a, b, c, d = ip.packed
    return [
        str(ip),
        str(n),
        hex(n),
        f"0{n:o}",
        f"{a}.{(b << 16) | (c << 8) | d}",
        f"{a}.{b}.{(c << 8) | d}",
        f"0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}",
        f"0{a:o}.0{b:o}.0{c:o}.0{d:o}",
        f"{ip}.",
        wide(str(ip)),
    ]


@given(ipv4s)
def test_every_ipv4_spelling_is_the_same_address(ip: ipaddress.IPv4Address) -> None:
    for form in _forms(ip):
        assert normalise_host(form) == ip, form


@given(ipv4s)
def test_ipv4_verdict_matches_ipaddress(ip: ipaddress.IPv4Address) -> None:
    assert is_public(ip) == (ip.is_global and not ip.is_multicast)
    for form in _forms(ip):
        assert literal_is_blocked(form) == (not is_public(ip)), form


@given(ipv4s)
def test_ipv6_forms_carrying_ipv4_are_judged_by_it(ip: ipaddress.IPv4Address) -> None:
    n = int(ip)
    carrying = [
        ipaddress.IPv6Address(f"::ffff:{ip}"),  # mapped
        ipaddress.IPv6Address((0xFFFF << 32) << 16 | n),  # SIIT ::ffff:0:a.b.c.d
        ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | n),  # NAT64
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1),  # 6to4
    ]
    for v6 in carrying:
        if not is_public(ip):
            assert not is_public(v6), v6
            assert literal_is_blocked(f"[{v6}]"), v6
    # IPv4-compatible, Teredo with any client, and local-use NAT64 are never public.
    assert not is_public(ipaddress.IPv6Address(n))
    teredo_client = int(ip) ^ 0xFFFFFFFF
    assert not is_public(ipaddress.IPv6Address((0x20010000 << 96) | teredo_client))
    assert not is_public(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b:1::")) | n))


@given(ipv6s)
def test_public_ipv6_is_global_in_ipaddress_too(ip: ipaddress.IPv6Address) -> None:
    if is_public(ip):
        assert ip.is_global and not ip.is_multicast
        assert address_is_public(str(ip))
    assert normalise_host(f"[{ip}]") == ip


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "127.1",
        "0",
        "169.254.169.254",
        "100.64.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "[64:ff9b::a9fe:a9fe]",
        "[64:ff9b:1::8.8.8.8]",
        "[2002:7f00:1::1]",
        "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
        "[fe80::1%25eth0]",
        "[fec0::1]",
        "[ff02::1]",
        "224.0.0.1",
        wide("127.0.0.1"),
        wide("127.1"),
    ],
)
def test_internal_literals_are_blocked(host: str) -> None:
    assert literal_is_blocked(host)


@pytest.mark.parametrize("host", ["8.8.8.8", "134744072", "[2606:4700::1111]", "[::ffff:8.8.8.8]", "example.com"])
def test_public_literals_and_names_pass(host: str) -> None:
    assert not literal_is_blocked(host)


@pytest.mark.parametrize(
    ("host", "name"),
    [("EXAMPLE.com.", "example.com"), (wide("example") + ".com", "example.com"), ("bücher.de", "xn--bcher-kva.de")],
)
def test_names_are_idna_normalised(host: str, name: str) -> None:
    assert normalise_host(host) == name


@pytest.mark.parametrize("host", ["a..b", "1.2.3.4.5", "256.1", "0x1.0x1ff.1.1", "", "-" * 300])
def test_hosts_no_resolver_would_take_are_refused(host: str) -> None:
    with pytest.raises(BadHost):
        normalise_host(host)
    assert literal_is_blocked(host)


def test_parse_ipv4_refuses_overflowing_parts() -> None:
    assert parse_ipv4("4294967296") is None
    assert parse_ipv4("1.16777216") is None
    assert parse_ipv4("1.2.65536") is None
    assert parse_ipv4("1.2.3.256") is None


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/hook",
        "http://127.1/hook",
        "http://0x7f.1:8080/hook",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",
        f"http://{wide('127.0.0.1')}/",
    ],
)
def test_the_poller_refuses_every_spelling_before_connecting(url: str) -> None:
    from tickd.poller.callbacks.http import _url_is_blocked

    assert _url_is_blocked(url)


async def test_the_guarded_resolver_refuses_literals_it_is_handed() -> None:
    from tickd.poller.callbacks.guard import BlockedAddressError, GuardedResolver

    resolver = GuardedResolver()
    try:
        with pytest.raises(BlockedAddressError):
            await resolver.resolve("2130706433", 80)
    finally:
        await resolver.close()
