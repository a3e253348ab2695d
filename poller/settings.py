"""Poller node settings, read from TICKD_* variables by ``tickd-poller`` only and passed down."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from tickd.poller import ring
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpSettings
from tickd.poller.callbacks.kafka import KafkaSettings
from tickd.schema.errors import ConfigError
from tickd.schema.grants import reserved_from_env
from tickd.schema.settings import StoreSettings, env_float, env_int, env_str

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _topic(name: str | None) -> str | None:
    if name is not None and not _TOPIC.match(name):
        raise ConfigError(
            "TICKD_KAFKA_ACK_TOPIC must be a Kafka topic name ([A-Za-z0-9._-]{1,249})", field="TICKD_KAFKA_ACK_TOPIC"
        )
    return name


# The clock skew between API replicas and poller nodes the hot-mark timings allow for (NTP keeps it lower).
_SKEW_S = 0.5


@dataclass(frozen=True)
class PollerSettings:
    node_id: str
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9108
    heartbeat_interval_s: float = 1.0
    # A node not heard from for this long is dead; it stops its own instances a little before.
    node_ttl_s: int = 10
    fence_margin_s: float = 3.0
    ring_refresh_s: float = 1.0
    # No node holds more than this x the average instances, rounded down (ring.capacity). Every node must
    # use the same value: it is an input of the placement, which the nodes compute each on their own.
    ring_load_factor: float = ring.LOAD_FACTOR
    clients_refresh_s: float = 5.0
    claim_verify_s: float = 5.0
    # A minute's partition is read this long before the minute starts.
    preload_s: float = 5.0
    # A minute is read in slices of this many seconds of due times, each ``preload_s`` before it is due.
    # Small slices spread the reads: bench-fire at 3,000 Kafka fires/s, p99 lateness 0.36 s with 2 s
    # slices, 0.88-1.02 s with 10 s (every instance read 10 s of rows at once, the loop fell behind).
    read_slice_s: float = 2.0
    # Rows an instance holds waiting to fire, at most: the next slice waits for room (bounds memory
    # when a node catches up on a backlog).
    plan_max_rows: int = 5000
    # A minute stays open (late writes and hot marks still handled) this long after it ends.
    minute_close_s: float = 10.0
    # Instances close their minutes (one last whole read, then the checkpoint) spread over this many
    # seconds after ``minute_close_s``, each at its own offset: 16 instances reading their whole minute at
    # once held bench-fire's loop 2-3 s at 4,000 fires/s.
    sweep_spread_s: float = 15.0
    mark_poll_s: float = 0.5
    # After a hot mark, keep re-reading for this long (the mark may be seen before its row, and a write
    # confirmed up to TICKD_HOT_WRITE_DEADLINE_S after its request may lose its mark to a newer one).
    mark_settle_s: float = 4.0
    # How far before the mark's time a re-read starts (the hot-write deadline plus clock skew).
    reread_lag_s: float = 5.0
    # The API's TICKD_MUTATION_GUARD_S (same variable, must agree): a row fires only once every change
    # acknowledged before its due time minus half this is in the plan (the other half covers clock skew).
    mutation_guard_s: float = 2.0
    catch_up_window_s: int = 3600
    shutdown_deadline_s: float = 10.0
    drain_grace_s: float = 60.0
    instance_max_inflight: int = 512
    # Across all instances of the node: a callback's timeout includes time queued in the Kafka producer,
    # so the node must not hand it more than it can send within that timeout.
    node_max_inflight: int = 4096
    # One client's share of those slots, at most (0: a quarter of node_max_inflight): a tenant whose fires
    # pile up (a slow endpoint, a burst) cannot take the slots another tenant's due fires need.
    node_client_max_inflight: int = 0
    outcome_flush_s: float = 0.2
    # How often the node writes its per-tenant delivery statistics (GET /v1/stats; schema/stats.py).
    stats_flush_s: float = 10.0
    # How often a throttled event waiting for a token looks again when none is free.
    throttle_poll_s: float = 0.1
    # Kafka subscribers release throttled events by records on this topic (None: no ack consumer).
    ack_topic: str | None = None
    # Topics no client may be sent to whatever its grants say (schema.grants; the ack topic is one too).
    reserved_topics: frozenset[str] = frozenset()
    store: StoreSettings = field(default_factory=StoreSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PollerSettings:
        env = os.environ if env is None else env
        d = cls(node_id="-")
        settings = cls(
            node_id=env_str(env, "TICKD_NODE_ID", f"{socket.gethostname()}-{os.getpid()}"),
            metrics_host=env_str(env, "TICKD_METRICS_HOST", d.metrics_host),
            metrics_port=env_int(env, "TICKD_METRICS_PORT", d.metrics_port, low=0, high=65535),
            heartbeat_interval_s=env_float(env, "TICKD_HEARTBEAT_INTERVAL_S", d.heartbeat_interval_s, low=0.1, high=60),
            node_ttl_s=env_int(env, "TICKD_NODE_TTL_S", d.node_ttl_s, low=2, high=600),
            ring_refresh_s=env_float(env, "TICKD_RING_REFRESH_S", d.ring_refresh_s, low=0.1, high=60),
            ring_load_factor=env_float(env, "TICKD_RING_LOAD_FACTOR", d.ring_load_factor, low=1.0, high=10.0),
            clients_refresh_s=env_float(env, "TICKD_CLIENTS_REFRESH_S", d.clients_refresh_s, low=0.1, high=600),
            claim_verify_s=env_float(env, "TICKD_CLAIM_VERIFY_S", d.claim_verify_s, low=0.5, high=600),
            preload_s=env_float(env, "TICKD_PRELOAD_S", d.preload_s, low=0.5, high=50),
            read_slice_s=env_float(env, "TICKD_READ_SLICE_S", d.read_slice_s, low=0.5, high=60),
            plan_max_rows=env_int(env, "TICKD_PLAN_MAX_ROWS", d.plan_max_rows, low=1, high=10_000_000),
            minute_close_s=env_float(env, "TICKD_MINUTE_CLOSE_S", d.minute_close_s, low=1, high=300),
            sweep_spread_s=env_float(env, "TICKD_SWEEP_SPREAD_S", d.sweep_spread_s, low=0, high=30),
            mark_poll_s=env_float(env, "TICKD_MARK_POLL_S", d.mark_poll_s, low=0.05, high=10),
            mark_settle_s=env_float(env, "TICKD_MARK_SETTLE_S", d.mark_settle_s, low=0, high=60),
            reread_lag_s=env_float(env, "TICKD_REREAD_LAG_S", d.reread_lag_s, low=0, high=120),
            mutation_guard_s=env_float(env, "TICKD_MUTATION_GUARD_S", d.mutation_guard_s, low=0, high=3600),
            catch_up_window_s=env_int(env, "TICKD_CATCH_UP_WINDOW_S", d.catch_up_window_s, low=60, high=30 * 86400),
            shutdown_deadline_s=env_float(env, "TICKD_SHUTDOWN_DEADLINE_S", d.shutdown_deadline_s, low=0, high=600),
            drain_grace_s=env_float(env, "TICKD_DRAIN_GRACE_S", d.drain_grace_s, low=0, high=86400),
            instance_max_inflight=env_int(
                env, "TICKD_INSTANCE_MAX_INFLIGHT", d.instance_max_inflight, low=1, high=100_000
            ),
            node_max_inflight=env_int(env, "TICKD_NODE_MAX_INFLIGHT", d.node_max_inflight, low=1, high=1_000_000),
            node_client_max_inflight=env_int(
                env, "TICKD_NODE_CLIENT_MAX_INFLIGHT", d.node_client_max_inflight, low=0, high=1_000_000
            ),
            outcome_flush_s=env_float(env, "TICKD_OUTCOME_FLUSH_S", d.outcome_flush_s, low=0.01, high=10),
            stats_flush_s=env_float(env, "TICKD_STATS_FLUSH_S", d.stats_flush_s, low=0.1, high=300),
            throttle_poll_s=env_float(env, "TICKD_THROTTLE_POLL_S", d.throttle_poll_s, low=0.01, high=10),
            ack_topic=_topic(env.get("TICKD_KAFKA_ACK_TOPIC", "").strip() or None),
            reserved_topics=reserved_from_env(env),
            store=StoreSettings.from_env(env),
            http=HttpSettings.from_env(env),
            kafka=KafkaSettings.from_env(env),
            retry=RetryPolicy.from_env(env),
        )
        settings.check()
        return settings

    @property
    def client_max_inflight(self) -> int:
        """The node slots one client may hold at once (``node_client_max_inflight``, 0: a quarter)."""
        return self.node_client_max_inflight or max(1, self.node_max_inflight // 4)

    def check(self) -> None:
        """Cross-setting rules: each alone can be fine and the pair still wrong."""
        if self.node_client_max_inflight > self.node_max_inflight:
            raise ConfigError(
                "TICKD_NODE_CLIENT_MAX_INFLIGHT must not exceed TICKD_NODE_MAX_INFLIGHT: it is one client's "
                "share of the node's slots (0: a quarter of them)",
                field="TICKD_NODE_CLIENT_MAX_INFLIGHT",
            )
        if self.heartbeat_interval_s * 2 >= self.node_ttl_s - self.fence_margin_s:
            raise ConfigError(
                "TICKD_HEARTBEAT_INTERVAL_S must be well under TICKD_NODE_TTL_S: at least two heartbeats "
                "must fit before a node fences itself",
                field="TICKD_HEARTBEAT_INTERVAL_S",
            )
        deadline_s = self.store.hot_write_deadline_s
        if self.mark_settle_s < deadline_s + 2 * _SKEW_S or self.reread_lag_s < deadline_s + 2 * _SKEW_S:
            raise ConfigError(
                f"TICKD_MARK_SETTLE_S and TICKD_REREAD_LAG_S must be at least TICKD_HOT_WRITE_DEADLINE_S "
                f"+ {2 * _SKEW_S:g} s: an acknowledged write can land that late, behind a newer hot mark",
                field="TICKD_MARK_SETTLE_S" if self.mark_settle_s < deadline_s + 2 * _SKEW_S else "TICKD_REREAD_LAG_S",
            )
        if self.preload_s + self.reread_lag_s >= self.store.hot_window_s:
            raise ConfigError(
                "TICKD_HOT_WINDOW_S must exceed TICKD_PRELOAD_S + TICKD_REREAD_LAG_S, or late writes "
                "to a loaded minute would go unsignalled",
                field="TICKD_HOT_WINDOW_S",
            )
