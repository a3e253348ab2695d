"""API settings, read from TICKD_* environment variables by ``service.main`` only and passed down."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tickd.schema.errors import ConfigError
from tickd.schema.grants import reserved_from_env
from tickd.schema.ports import DEFAULT_POLICY, PortPolicy
from tickd.schema.settings import (
    StoreSettings,
    batch_max_bytes,
    env_bool,
    env_choice,
    env_float,
    env_int,
    hot_window_s,
    hot_write_deadline_s,
    retentions,
)

_TEN_YEARS_S = 10 * 365 * 86400


def _metrics_port(env: Mapping[str, str]) -> int | None:
    """TICKD_API_METRICS_PORT: unset or blank for no metrics listener, 0 for any free port; never the
    API's own port (the two listeners would collide at start)."""
    if not env.get("TICKD_API_METRICS_PORT", "").strip():
        return None
    port = env_int(env, "TICKD_API_METRICS_PORT", 0, low=0, high=65535)
    if port and port == env_int(env, "TICKD_API_PORT", ApiSettings.port, low=0, high=65535):
        raise ConfigError("TICKD_API_METRICS_PORT must differ from TICKD_API_PORT", field="TICKD_API_METRICS_PORT")
    return port


@dataclass(frozen=True)
class ApiSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    # None: admin endpoints answer 503 (the schedule API still works).
    admin_token: str | None = None
    callback_allow_private: bool = False
    # The ports a callback URL may name (schema.ports: well-known internal service ports are denied).
    callback_ports: PortPolicy = DEFAULT_POLICY
    # /metrics on the API port: "admin" needs the admin token, "none" is public. metrics_port (None: no
    # listener) also serves /metrics, without a token, on metrics_host: for a scraper that must not hold
    # the admin token, on a port the load balancer does not expose.
    metrics_auth: str = "admin"
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # False only in tickd-dev without --kafka: Kafka callbacks are refused at create time, saying why.
    kafka_enabled: bool = True
    max_payload_bytes: int = 64 * 1024
    max_body_bytes: int = 16 * 1024 * 1024
    max_batch: int = 1000
    create_rate_per_s: float = 10_000.0
    create_burst: int = 20_000
    poller_count_min: int = 1
    poller_count_max: int = 1024
    max_horizon_s: int = _TEN_YEARS_S
    mutation_guard_s: float = 2.0
    # Recurring schedules: the shortest `every`, and the largest `jitter` any schedule may ask for.
    min_interval_s: int = 1
    max_jitter_s: int = 3600
    # Batch triggers: events per fire, and the longest window they may be spread over.
    max_events: int = 10_000
    max_window_s: int = 86400
    # The largest max_in_flight a throttle policy may have (its tokens are one Cassandra partition).
    max_in_flight: int = 10_000
    list_max_range_s: int = 86400
    # Wall times skipped in DST gaps that all the cron-rule searches of one request (a batch, a preview)
    # may pass over together (each search also at most schema.recurrence.MAX_SCAN_STEPS).
    request_scan_steps: int = 4000
    client_cache_s: float = 2.0
    # Client rows cached (least recently used evicted), and unknown client ids remembered, apart: so a
    # flood of unknown ids cannot evict a real client.
    client_cache_max: int = 100_000
    client_cache_misses_max: int = 10_000
    # Concurrent store writes of one batch request (each a group of up to write_group schedules).
    batch_concurrency: int = 64
    # Creates written in one atomic Cassandra batch: a batch request's items, and single creates that
    # arrive together (see service.creates). 1: one write per schedule.
    write_group: int = 8
    # ... and at most this many bytes per group (estimated; TICKD_BATCH_MAX_BYTES, shared with the store).
    batch_max_bytes: int = StoreSettings.batch_max_bytes
    # Writes due within the hot window must be confirmed within the deadline (see StoreSettings).
    hot_window_s: float = StoreSettings.hot_window_s
    hot_write_deadline_s: float = StoreSettings.hot_write_deadline_s
    # Record retention, the deployment's and the most a client may choose (PATCH /v1/settings; the store's).
    retention_s: int = StoreSettings.retention_s
    audit_retention_s: int = StoreSettings.audit_retention_s
    retention_max_s: int = StoreSettings.retention_max_s
    audit_retention_max_s: int = StoreSettings.audit_retention_max_s
    # How long a host name's "is it private?" answer is reused (only when private targets are denied).
    dns_cache_s: float = 60.0
    # DNS lookups of callback hosts at create time (service.targets): a lookup's own time bound, the
    # lookups one client may have running (its others wait for its own), the resolver threads, how long
    # a failed name is remembered, and how many names are remembered.
    dns_timeout_s: float = 2.0
    dns_lookups_per_client: int = 4
    dns_threads: int = 32
    dns_negative_cache_s: float = 5.0
    dns_cache_max: int = 10_000
    # Reads (GET, and previews) per client, a token bucket per API replica like creates.
    read_rate_per_s: float = 1000.0
    read_burst: int = 2000
    # Failed authentications (a well-formed key that is unknown or wrong, a wrong admin token) per source
    # address (an IPv6 source by its /64); over it, only keys this replica already knows to be right pass.
    auth_failure_rate_per_s: float = 5.0
    auth_failure_burst: int = 100
    # Buckets each rate limiter keeps (clients, or source addresses); the least recently used is forgotten.
    rate_limit_keys_max: int = 100_000
    # Amplification: what one accepted request may make the pollers do. Bytes written per fire (events
    # per fire x payload bytes), fires per minute one schedule may produce, and event deliveries per
    # minute (fires per minute x events per fire).
    max_fire_bytes: int = 4 * 1024 * 1024
    max_fires_per_minute: int = 60
    max_events_per_minute: int = 10_000
    # The server's own bounds: a request body must arrive within body_read_timeout_s; a request line or
    # header line is at most max_line_bytes, and a request carries at most max_headers headers; an idle
    # keep-alive connection is closed after keepalive_s.
    body_read_timeout_s: float = 10.0
    max_line_bytes: int = 8190
    max_headers: int = 64
    keepalive_s: float = 75.0
    # Idempotency-Key (service.idempotency): how long a retry waits for the first request's schedule to
    # appear, and the age after which a reservation whose schedule never appeared is completed by a retry
    # (past any write the first request could still have in flight).
    idempotency_wait_s: float = 1.0
    idempotency_takeover_s: float = 30.0
    # All the store requests of one API request share this much time, counted from the first (each is
    # also bounded by TICKD_CASSANDRA_TIMEOUT_S): past it, a 503 and nothing more is sent for it
    # (schema.deadline). Below idempotency_takeover_s, so a write answered 503 is over before a retry
    # may complete its Idempotency-Key.
    store_budget_s: float = 10.0
    # After a signing-secret rotation, how long deliveries stay signed with the previous secret too.
    signing_overlap_s: int = 86400
    # Whether creates are recorded in the audit trail too (each record is one more store write: a create's
    # costs a write as much as the create's own). How long records are kept is the store's setting.
    audit_creates: bool = True
    # Kafka topics no client may be granted besides Kafka's own ``__*`` (schema.grants): the ack topic,
    # TICKD_KAFKA_ACK_TOPIC, and TICKD_KAFKA_RESERVED_TOPICS (set both as on the pollers).
    reserved_topics: frozenset[str] = frozenset()
    # A Kafka grant overlapping another client's: refused (409) when True, else granted with a warning.
    refuse_grant_overlaps: bool = False
    # Bulk jobs (service.bulk): whether this replica runs them, how often it looks for open ones, how long a
    # replica's lease of a job lasts without a saved page, schedules per saved page, the schedules a
    # second one client's jobs act on (per replica running them), the jobs a replica runs at once, and
    # the open jobs a client may have.
    bulk_runner: bool = True
    bulk_poll_s: float = 2.0
    bulk_lease_s: float = 30.0
    bulk_page: int = 100
    bulk_rate_per_s: float = 100.0
    bulk_jobs_parallel: int = 4
    bulk_open_max: int = 4
    # Backfills (a bulk job kind, schema.backfills): the most occurrences one may fire (its request counts
    # them, in a rule thread: 38 ms of CPU for 1,000 of a cron rule in a zone with DST, so at most 10,000),
    # and the rate (fires a second) one runs at unless its request asks for another (at most
    # TICKD_BULK_RATE_PER_S).
    backfill_max_fires: int = 1000
    backfill_rate_per_s: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        token = env.get("TICKD_ADMIN_TOKEN", "").strip() or None
        if token is not None and len(token) < 12:
            raise ConfigError("TICKD_ADMIN_TOKEN must be at least 12 characters", field="TICKD_ADMIN_TOKEN")
        count_min = env_int(env, "TICKD_POLLER_COUNT_MIN", cls.poller_count_min, low=1, high=65536)
        dns_per_client = env_int(env, "TICKD_DNS_LOOKUPS_PER_CLIENT", cls.dns_lookups_per_client, low=1, high=256)
        takeover_s = env_float(env, "TICKD_IDEMPOTENCY_TAKEOVER_S", cls.idempotency_takeover_s, low=1, high=3600)
        store_budget_s = env_float(env, "TICKD_STORE_BUDGET_S", cls.store_budget_s, low=0.1, high=600)
        if store_budget_s >= takeover_s:
            raise ConfigError(
                f"TICKD_STORE_BUDGET_S ({store_budget_s:g}) must be below "
                f"TICKD_IDEMPOTENCY_TAKEOVER_S ({takeover_s:g}): a retry may complete an "
                "Idempotency-Key only once the first request's writes are over",
                field="TICKD_STORE_BUDGET_S",
            )
        return cls(
            host=env.get("TICKD_API_HOST", cls.host).strip() or cls.host,
            port=env_int(env, "TICKD_API_PORT", cls.port, low=0, high=65535),
            admin_token=token,
            callback_allow_private=env_bool(env, "TICKD_CALLBACK_ALLOW_PRIVATE", cls.callback_allow_private),
            callback_ports=PortPolicy.from_env(env),
            metrics_auth=env_choice(env, "TICKD_METRICS_AUTH", cls.metrics_auth, frozenset({"ADMIN", "NONE"})).lower(),
            metrics_port=_metrics_port(env),
            metrics_host=env.get("TICKD_API_METRICS_HOST", cls.metrics_host).strip() or cls.metrics_host,
            max_payload_bytes=env_int(env, "TICKD_MAX_PAYLOAD_BYTES", cls.max_payload_bytes, low=16, high=1 << 24),
            max_body_bytes=env_int(env, "TICKD_MAX_BODY_BYTES", cls.max_body_bytes, low=1024, high=1 << 30),
            max_batch=env_int(env, "TICKD_MAX_BATCH", cls.max_batch, low=1, high=10_000),
            create_rate_per_s=env_float(env, "TICKD_CREATE_RATE_PER_S", cls.create_rate_per_s, low=0.01, high=1e7),
            create_burst=env_int(env, "TICKD_CREATE_BURST", cls.create_burst, low=1, high=10_000_000),
            poller_count_min=count_min,
            poller_count_max=env_int(env, "TICKD_POLLER_COUNT_MAX", cls.poller_count_max, low=count_min, high=65536),
            max_horizon_s=env_int(env, "TICKD_MAX_HORIZON_S", cls.max_horizon_s, low=60, high=_TEN_YEARS_S),
            mutation_guard_s=env_float(env, "TICKD_MUTATION_GUARD_S", cls.mutation_guard_s, low=0, high=3600),
            min_interval_s=env_int(env, "TICKD_MIN_INTERVAL_S", cls.min_interval_s, low=1, high=86400),
            max_jitter_s=env_int(env, "TICKD_MAX_JITTER_S", cls.max_jitter_s, low=1, high=86400),
            max_events=env_int(env, "TICKD_MAX_EVENTS", cls.max_events, low=1, high=1_000_000),
            max_window_s=env_int(env, "TICKD_MAX_WINDOW_S", cls.max_window_s, low=1, high=31 * 86400),
            max_in_flight=env_int(env, "TICKD_MAX_IN_FLIGHT", cls.max_in_flight, low=1, high=100_000),
            list_max_range_s=env_int(env, "TICKD_LIST_MAX_RANGE_S", cls.list_max_range_s, low=60, high=31 * 86400),
            request_scan_steps=env_int(
                env, "TICKD_REQUEST_SCAN_STEPS", cls.request_scan_steps, low=1000, high=1_000_000
            ),
            client_cache_s=env_float(env, "TICKD_CLIENT_CACHE_S", cls.client_cache_s, low=0, high=300),
            batch_concurrency=env_int(env, "TICKD_BATCH_CONCURRENCY", cls.batch_concurrency, low=1, high=1024),
            write_group=env_int(env, "TICKD_WRITE_GROUP", cls.write_group, low=1, high=64),
            batch_max_bytes=batch_max_bytes(env),
            hot_window_s=hot_window_s(env),
            hot_write_deadline_s=hot_write_deadline_s(env),
            **retentions(env),
            dns_cache_s=env_float(env, "TICKD_DNS_CACHE_S", cls.dns_cache_s, low=0, high=3600),
            dns_timeout_s=env_float(env, "TICKD_DNS_TIMEOUT_S", cls.dns_timeout_s, low=0.1, high=30),
            dns_lookups_per_client=dns_per_client,
            # More threads than one client's slots: one client can never hold every resolver thread.
            dns_threads=env_int(env, "TICKD_DNS_THREADS", cls.dns_threads, low=dns_per_client + 1, high=1024),
            dns_negative_cache_s=env_float(
                env, "TICKD_DNS_NEGATIVE_CACHE_S", cls.dns_negative_cache_s, low=0, high=3600
            ),
            dns_cache_max=env_int(env, "TICKD_DNS_CACHE_MAX", cls.dns_cache_max, low=1, high=10_000_000),
            read_rate_per_s=env_float(env, "TICKD_READ_RATE_PER_S", cls.read_rate_per_s, low=0.01, high=1e7),
            read_burst=env_int(env, "TICKD_READ_BURST", cls.read_burst, low=1, high=10_000_000),
            auth_failure_rate_per_s=env_float(
                env, "TICKD_AUTH_FAILURE_RATE_PER_S", cls.auth_failure_rate_per_s, low=0.01, high=1e6
            ),
            auth_failure_burst=env_int(env, "TICKD_AUTH_FAILURE_BURST", cls.auth_failure_burst, low=1, high=1_000_000),
            rate_limit_keys_max=env_int(
                env, "TICKD_RATE_LIMIT_KEYS_MAX", cls.rate_limit_keys_max, low=100, high=10_000_000
            ),
            client_cache_max=env_int(env, "TICKD_CLIENT_CACHE_MAX", cls.client_cache_max, low=100, high=10_000_000),
            client_cache_misses_max=env_int(
                env, "TICKD_CLIENT_CACHE_MISSES_MAX", cls.client_cache_misses_max, low=100, high=10_000_000
            ),
            max_fire_bytes=env_int(env, "TICKD_MAX_FIRE_BYTES", cls.max_fire_bytes, low=1024, high=1 << 30),
            max_fires_per_minute=env_int(env, "TICKD_MAX_FIRES_PER_MINUTE", cls.max_fires_per_minute, low=1, high=60),
            max_events_per_minute=env_int(
                env, "TICKD_MAX_EVENTS_PER_MINUTE", cls.max_events_per_minute, low=1, high=10_000_000
            ),
            body_read_timeout_s=env_float(env, "TICKD_BODY_READ_TIMEOUT_S", cls.body_read_timeout_s, low=0.1, high=600),
            max_line_bytes=env_int(env, "TICKD_MAX_LINE_BYTES", cls.max_line_bytes, low=1024, high=65536),
            max_headers=env_int(env, "TICKD_MAX_HEADERS", cls.max_headers, low=8, high=1024),
            keepalive_s=env_float(env, "TICKD_KEEPALIVE_S", cls.keepalive_s, low=1, high=3600),
            idempotency_wait_s=env_float(env, "TICKD_IDEMPOTENCY_WAIT_S", cls.idempotency_wait_s, low=0, high=30),
            signing_overlap_s=env_int(env, "TICKD_SIGNING_OVERLAP_S", cls.signing_overlap_s, low=0, high=30 * 86400),
            audit_creates=env_bool(env, "TICKD_AUDIT_CREATES", cls.audit_creates),
            idempotency_takeover_s=takeover_s,
            store_budget_s=store_budget_s,
            reserved_topics=reserved_from_env(env),
            refuse_grant_overlaps=env_bool(env, "TICKD_KAFKA_REFUSE_GRANT_OVERLAPS", cls.refuse_grant_overlaps),
            bulk_runner=env_bool(env, "TICKD_BULK_RUNNER", cls.bulk_runner),
            bulk_poll_s=env_float(env, "TICKD_BULK_POLL_S", cls.bulk_poll_s, low=0.05, high=300.0),
            bulk_lease_s=env_float(env, "TICKD_BULK_LEASE_S", cls.bulk_lease_s, low=1.0, high=3600.0),
            bulk_page=env_int(env, "TICKD_BULK_PAGE", cls.bulk_page, low=1, high=1000),
            bulk_rate_per_s=env_float(env, "TICKD_BULK_RATE_PER_S", cls.bulk_rate_per_s, low=0.1, high=100_000.0),
            bulk_jobs_parallel=env_int(env, "TICKD_BULK_JOBS_PARALLEL", cls.bulk_jobs_parallel, low=1, high=64),
            bulk_open_max=env_int(env, "TICKD_BULK_OPEN_MAX", cls.bulk_open_max, low=1, high=1000),
            backfill_max_fires=env_int(env, "TICKD_BACKFILL_MAX_FIRES", cls.backfill_max_fires, low=1, high=10_000),
            backfill_rate_per_s=env_float(
                env, "TICKD_BACKFILL_RATE_PER_S", cls.backfill_rate_per_s, low=0.01, high=100_000.0
            ),
        )
