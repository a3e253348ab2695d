"""Which ports a callback may dial: one policy for the API (create time) and the poller (connect time).

The address guard (``schema.addresses``) keeps callbacks off private addresses, but not off ports. A
callback is an HTTP request whose URL, headers and body a tenant chooses, and several protocols read
such a request line by line and act on the lines they understand: SMTP sends mail, Redis and Memcached
run commands, a Docker, etcd, Consul or kubelet API obeys. A public address can run those too, and with
``TICKD_CALLBACK_ALLOW_PRIVATE`` on (one-tenant installs, tests) the port is the only line left between
a tenant and the services next to tickd. So by default a callback may not name a port on which a well-known
internal service listens (``DEFAULT_DENIED``, one reason each; README "Callback ports"). Ports 80, 443 and
the usual alternates (8000, 8080, 8443, 9000...) stay open: webhook receivers listen there.

Configuration (``PortPolicy.from_env``): ``TICKD_CALLBACK_DENIED_PORTS`` replaces the denied list
(``default`` stands for the list above, so ``default,9000`` adds one; ``none`` denies nothing), and
``TICKD_CALLBACK_ALLOWED_PORTS``, when set, is an allow-list: only its ports may be dialled (``443,8443``).
Both take ports and ranges (``8000-8999``). A port that is both allowed and denied is denied. Port 0 is
never dialable and always refused. A URL without a port dials 80 (http) or 443 (https).

The API refuses such a callback with 422 ``forbidden_port``; the poller checks again before each attempt
(the policy may have changed since the schedule was accepted) and dead-letters the fire with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from tickd.schema.errors import ConfigError

# port -> what listens there, so a refusal can say why.
DEFAULT_DENIED: dict[int, str] = {
    22: "SSH",
    23: "Telnet",
    25: "SMTP",
    53: "DNS",
    110: "POP3",
    111: "rpcbind",
    135: "MS RPC",
    139: "NetBIOS",
    143: "IMAP",
    445: "SMB",
    465: "SMTPS",
    587: "SMTP submission",
    993: "IMAPS",
    995: "POP3S",
    1433: "SQL Server",
    1521: "Oracle",
    2049: "NFS",
    2181: "ZooKeeper",
    2375: "Docker API",
    2376: "Docker API (TLS)",
    2379: "etcd",
    2380: "etcd peers",
    3306: "MySQL",
    3389: "RDP",
    5432: "PostgreSQL",
    5672: "AMQP",
    5984: "CouchDB",
    5985: "WinRM",
    5986: "WinRM (TLS)",
    6379: "Redis",
    6443: "Kubernetes API",
    7000: "Cassandra gossip",
    7001: "Cassandra gossip (TLS)",
    7199: "Cassandra JMX",
    8500: "Consul",
    9042: "Cassandra CQL",
    9092: "Kafka",
    9160: "Cassandra Thrift",
    9200: "Elasticsearch",
    9300: "Elasticsearch transport",
    10250: "kubelet",
    10255: "kubelet (read-only)",
    11211: "Memcached",
    27017: "MongoDB",
}

MAX_PORT = 65535
_MAX_ENTRIES = 1024
_DEFAULT_PORTS = "http", "https"

Ranges = tuple[tuple[int, int], ...]


_DEFAULT_RANGES: Ranges = tuple((port, port) for port in sorted(DEFAULT_DENIED))


def _within(port: int, ranges: Ranges) -> bool:
    return any(low <= port <= high for low, high in ranges)


@dataclass(frozen=True)
class PortPolicy:
    """The ports callbacks may dial: any port not ``denied``, and, when ``allowed`` is set, in it."""

    denied: Ranges = _DEFAULT_RANGES
    allowed: Ranges | None = None

    def __post_init__(self) -> None:
        for low, high in (*self.denied, *(self.allowed or ())):
            if not 1 <= low <= high <= MAX_PORT:
                raise ConfigError(f"port range {low}-{high} is not within 1-{MAX_PORT}", field="ports")
        if self.allowed is not None and not _uncovered(self.allowed, self.denied):
            raise ConfigError(
                "no port is left for callbacks: every port TICKD_CALLBACK_ALLOWED_PORTS names is denied",
                field="TICKD_CALLBACK_ALLOWED_PORTS",
            )

    def refusal(self, port: int) -> str | None:
        """Why a callback may not dial ``port``, or None when it may."""
        if not 1 <= port <= MAX_PORT:
            return f"port {port} is not a port a callback can dial"
        if _within(port, self.denied):
            service = DEFAULT_DENIED.get(port)
            named = f" ({service})" if service else ""
            return f"port {port}{named} is denied for callbacks"
        if self.allowed is not None and not _within(port, self.allowed):
            return f"port {port} is not among the ports callbacks may use"
        return None

    def url_refusal(self, url: str) -> str | None:
        """Why a callback may not dial ``url``'s port, or None when it may (or when ``url`` is no valid
        http(s) URL at all: that is for the URL checks to say)."""
        port = url_port(url)
        return None if port is None else self.refusal(port)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PortPolicy:
        env = os.environ if env is None else env
        denied = _setting(env, "TICKD_CALLBACK_DENIED_PORTS")
        allowed = _setting(env, "TICKD_CALLBACK_ALLOWED_PORTS")
        return cls(
            denied=_DEFAULT_RANGES if denied is None else denied,
            allowed=allowed,
        )


def _uncovered(ranges: Ranges, covered: Ranges) -> bool:
    """Whether some port of ``ranges`` lies in none of ``covered``: walk each range, jumping past
    every covering range that holds the current port."""
    for low, high in ranges:
        port = low
        while port <= high:
            cover = next((c for c in covered if c[0] <= port <= c[1]), None)
            if cover is None:
                return True
            port = cover[1] + 1
    return False


def url_port(url: str) -> int | None:
    """The port an http(s) URL dials (80 or 443 when it names none); None if it is not such a URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    if port is not None:
        return port
    return 80 if scheme == "http" else 443


def _setting(env: Mapping[str, str], name: str) -> Ranges | None:
    """The ranges a port list setting names; None when unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    ranges: list[tuple[int, int]] = []
    entries = [entry.strip() for entry in raw.split(",")]
    if len(entries) > _MAX_ENTRIES:
        raise ConfigError(f"{name} has more than {_MAX_ENTRIES} entries", field=name)
    for entry in entries:
        ranges.extend(_entry(entry.lower(), name))
    return tuple(ranges)


def _entry(entry: str, name: str) -> Ranges:
    if entry == "default":
        return _DEFAULT_RANGES
    if entry == "none":
        return ()
    low_text, dash, high_text = entry.partition("-")
    low, high = _port(low_text, name), _port(high_text, name) if dash else None
    if high is None:
        return ((low, low),)
    if low > high:
        raise ConfigError(f"{name}: range {entry!r} runs backwards", field=name)
    return ((low, high),)


def _port(text: str, name: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PORT:
        raise ConfigError(
            f"{name} takes ports 1-{MAX_PORT}, ranges like 8000-8999, 'default' or 'none'; got {text!r}", field=name
        )
    return int(text)


DEFAULT_POLICY = PortPolicy()
