"""Settings for the data layer, read from TICKD_* environment variables in entry points only.

``env_*`` helpers are shared by the service and poller settings so every setting is parsed, and
refused, the same way: a malformed value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict, TypeVar

from tickd.schema.errors import ConfigError
from tickd.schema.tls import TlsFiles, read_tls

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
CONSISTENCY_LEVELS = frozenset({"ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"})
SERIAL_LEVELS = frozenset({"SERIAL", "LOCAL_SERIAL"})
N = TypeVar("N", int, float)


def env_str(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default).strip()
    if not value:
        raise ConfigError(f"{name} must not be empty", field=name)
    return value


def env_int(env: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    return _env_number(env, name, default, int, "an integer", low, high)


def env_float(env: Mapping[str, str], name: str, default: float, *, low: float, high: float) -> float:
    return _env_number(env, name, default, float, "a number", low, high)


def _env_number(
    env: Mapping[str, str], name: str, default: N, parse: Callable[[str], N], what: str, low: N, high: N
) -> N:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = parse(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be {what}, got {raw!r}", field=name) from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}", field=name)
    return value


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}", field=name)


def env_choice(env: Mapping[str, str], name: str, default: str, choices: frozenset[str]) -> str:
    value = env_str(env, name, default).upper()
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(sorted(choices))}, got {value!r}", field=name)
    return value


def parse_replication(raw: str) -> dict[str, str]:
    """``SimpleStrategy:1`` or ``NetworkTopologyStrategy:dc1=3,dc2=3`` -> a CQL replication map."""
    strategy, _, rest = raw.partition(":")
    if strategy == "SimpleStrategy" and rest.isdigit() and int(rest) >= 1:
        return {"class": "SimpleStrategy", "replication_factor": rest}
    if strategy == "NetworkTopologyStrategy" and rest:
        options = {"class": "NetworkTopologyStrategy"}
        for part in rest.split(","):
            dc, _, factor = part.partition("=")
            if not dc or not factor.isdigit() or int(factor) < 1:
                break
            options[dc.strip()] = factor
        else:
            return options
    raise ConfigError(
        f"TICKD_REPLICATION must be 'SimpleStrategy:<rf>' or 'NetworkTopologyStrategy:<dc>=<rf>,...', got {raw!r}",
        field="TICKD_REPLICATION",
    )


def _hosts(raw: str) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in raw.split(",") if h.strip())
    if not hosts:
        raise ConfigError("TICKD_CASSANDRA_HOSTS must name at least one host", field="TICKD_CASSANDRA_HOSTS")
    return hosts


@dataclass(frozen=True)
class StoreSettings:
    """How to reach Cassandra and how long data is kept."""

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    keyspace: str = "tickd"
    local_dc: str | None = None
    username: str | None = None
    password: str | None = None
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    replication: str = "SimpleStrategy:1"
    request_timeout_s: float = 10.0
    # Native protocol v4, pinned (which skips the driver's noisy downgrade probing). Not v5: its framing
    # layer (segments with CRCs) is pure Python in the driver and cost ~10% of the CPU of a create
    # (make bench-api); we use none of v5's features.
    protocol_version: int = 4
    connect_timeout_s: float = 10.0
    # A node that stops answering without closing its connections (a cut network) is noticed by the
    # driver's heartbeat on idle connections: interval and timeout (the driver's default is 30 + 30 s,
    # a minute of requests sent to a silent replica first).
    heartbeat_s: float = 5.0
    # An idempotent statement with no answer after this long is also sent to the next replica (0: off),
    # so one silent replica delays reads and idempotent writes by this much instead of a full timeout.
    speculative_s: float = 0.5
    page_size: int = 5000
    # How long records are kept when their client chose nothing (runs, dead letters, schedule rows after
    # their fire, notices; audit records), and the most a client may choose (``retention_of``).
    retention_s: int = 7 * 24 * 3600
    audit_retention_s: int = 30 * 86400
    retention_max_s: int = 90 * 86400
    audit_retention_max_s: int = 365 * 86400
    cluster_name: str = "default"
    # A write due sooner than this may land in a minute a poller has already loaded, so it leaves a
    # hot mark. Must exceed the pollers' look-ahead plus clock skew; API and pollers must agree.
    hot_window_s: float = 90.0
    # A write that leaves a hot mark is acknowledged only if it is confirmed within this long of its
    # request (else 503, outcome unknown): a slower write can land after the pollers' re-reads of its
    # minute are over, behind a newer mark. Pollers re-read for at least this long after a mark changes
    # (TICKD_MARK_SETTLE_S) and this far back (TICKD_REREAD_LAG_S). API and pollers must agree.
    hot_write_deadline_s: float = 3.0
    # The most a multi-partition batch may hold (estimated encoded bytes), under Cassandra's
    # batch_size_fail_threshold (50 KiB by default): writes that belong together but would be larger are
    # split (see schema.cassandra.schedules), and the API groups creates under it. API and pollers agree.
    batch_max_bytes: int = 40 * 1024
    # TLS to Cassandra (TICKD_CASSANDRA_TLS=true); None: plain connections.
    tls: TlsFiles | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StoreSettings:
        env = os.environ if env is None else env
        keyspace = env_str(env, "TICKD_KEYSPACE", cls.keyspace)
        if not (keyspace.replace("_", "").isalnum() and keyspace[0].isalpha() and len(keyspace) <= 48):
            raise ConfigError(
                f"TICKD_KEYSPACE must be a letter then letters, digits or _ (max 48), got {keyspace!r}",
                field="TICKD_KEYSPACE",
            )
        replication = env_str(env, "TICKD_REPLICATION", cls.replication)
        parse_replication(replication)
        return cls(
            hosts=_hosts(env_str(env, "TICKD_CASSANDRA_HOSTS", "127.0.0.1")),
            port=env_int(env, "TICKD_CASSANDRA_PORT", cls.port, low=1, high=65535),
            keyspace=keyspace,
            local_dc=env.get("TICKD_CASSANDRA_LOCAL_DC") or None,
            username=env.get("TICKD_CASSANDRA_USERNAME") or None,
            password=env.get("TICKD_CASSANDRA_PASSWORD") or None,
            consistency=env_choice(env, "TICKD_CONSISTENCY", cls.consistency, CONSISTENCY_LEVELS),
            serial_consistency=env_choice(env, "TICKD_SERIAL_CONSISTENCY", cls.serial_consistency, SERIAL_LEVELS),
            replication=replication,
            request_timeout_s=env_float(env, "TICKD_CASSANDRA_TIMEOUT_S", cls.request_timeout_s, low=0.1, high=120),
            protocol_version=env_int(env, "TICKD_CASSANDRA_PROTOCOL", cls.protocol_version, low=3, high=5),
            connect_timeout_s=env_float(
                env, "TICKD_CASSANDRA_CONNECT_TIMEOUT_S", cls.connect_timeout_s, low=0.1, high=600
            ),
            heartbeat_s=env_float(env, "TICKD_CASSANDRA_HEARTBEAT_S", cls.heartbeat_s, low=1, high=300),
            speculative_s=env_float(env, "TICKD_CASSANDRA_SPECULATIVE_S", cls.speculative_s, low=0, high=60),
            page_size=env_int(env, "TICKD_PAGE_SIZE", cls.page_size, low=10, high=100_000),
            **retentions(env),
            cluster_name=env_str(env, "TICKD_CLUSTER_NAME", cls.cluster_name),
            hot_window_s=hot_window_s(env),
            hot_write_deadline_s=hot_write_deadline_s(env),
            batch_max_bytes=batch_max_bytes(env),
            tls=cassandra_tls(env),
        )


def cassandra_tls(env: Mapping[str, str]) -> TlsFiles | None:
    """TICKD_CASSANDRA_TLS and its files: a CA is required (a cluster's CA is rarely a public one)."""
    return read_tls(
        env,
        "TICKD_CASSANDRA_TLS",
        enabled=env_bool(env, "TICKD_CASSANDRA_TLS", False),
        switch="TICKD_CASSANDRA_TLS=true",
        ca_required=True,
        check_hostname=env_bool(env, "TICKD_CASSANDRA_TLS_CHECK_HOSTNAME", True),
    )


_TEN_YEARS_S = 10 * 365 * 86400


class Retentions(TypedDict):
    retention_s: int
    audit_retention_s: int
    retention_max_s: int
    audit_retention_max_s: int


def retentions(env: Mapping[str, str]) -> Retentions:
    """TICKD_RETENTION_S, TICKD_AUDIT_RETENTION_S and their maxima (TICKD_RETENTION_MAX_S,
    TICKD_AUDIT_RETENTION_MAX_S), read the same way by the store, the pollers and the API."""
    d = StoreSettings
    found: Retentions = {
        "retention_s": env_int(env, "TICKD_RETENTION_S", d.retention_s, low=60, high=_TEN_YEARS_S),
        "audit_retention_s": env_int(env, "TICKD_AUDIT_RETENTION_S", d.audit_retention_s, low=3600, high=_TEN_YEARS_S),
        "retention_max_s": env_int(env, "TICKD_RETENTION_MAX_S", d.retention_max_s, low=3600, high=_TEN_YEARS_S),
        "audit_retention_max_s": env_int(
            env, "TICKD_AUDIT_RETENTION_MAX_S", d.audit_retention_max_s, low=3600, high=_TEN_YEARS_S
        ),
    }
    if found["retention_s"] > found["retention_max_s"]:
        raise ConfigError("TICKD_RETENTION_S is above TICKD_RETENTION_MAX_S")
    if found["audit_retention_s"] > found["audit_retention_max_s"]:
        raise ConfigError("TICKD_AUDIT_RETENTION_S is above TICKD_AUDIT_RETENTION_MAX_S")
    return found


def retention_of(chosen_s: int, default_s: int, max_s: int) -> int:
    """A client's retention: what it chose (0: nothing, the default), never above the maximum."""
    return min(chosen_s or default_s, max_s)


def hot_window_s(env: Mapping[str, str]) -> float:
    """TICKD_HOT_WINDOW_S, read the same way by the store, the pollers and the API."""
    return env_float(env, "TICKD_HOT_WINDOW_S", StoreSettings.hot_window_s, low=10, high=3600)


def hot_write_deadline_s(env: Mapping[str, str]) -> float:
    """TICKD_HOT_WRITE_DEADLINE_S, read the same way by the API and the pollers."""
    return env_float(env, "TICKD_HOT_WRITE_DEADLINE_S", StoreSettings.hot_write_deadline_s, low=0.5, high=60)


def batch_max_bytes(env: Mapping[str, str]) -> int:
    """TICKD_BATCH_MAX_BYTES, read the same way by the store and the API's create grouping."""
    return env_int(env, "TICKD_BATCH_MAX_BYTES", StoreSettings.batch_max_bytes, low=1024, high=16 << 20)
