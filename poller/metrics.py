"""A poller node's Prometheus metrics and its small HTTP side door (/metrics, /status, /healthz)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from tickd.schema.request_metrics import RequestCounts, StoreRequests
from tickd.schema.stats import LATENESS_EDGES_S

# The same buckets GET /v1/stats counts in (schema.stats), so both answer alike.
LATENESS_BUCKETS_S = LATENESS_EDGES_S
# An event may wait for a token as long as the consumer holds the policy's slots (up to its release timeout).
THROTTLE_WAIT_BUCKETS_S = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


class Metrics:
    """One registry per node, so tests can build several nodes in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes...
        PlatformCollector(registry=self.registry)  # python_info
        self.lateness = Histogram(
            "tickd_fire_lateness_seconds",
            "Sent minus due (the due time after jitter, window spread or redrive) of first attempts, by client",
            ["client_id"],
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.callbacks = Counter(
            "tickd_callbacks_total",
            "Callback deliveries by client, type and outcome",
            ["client_id", "type", "outcome"],
            registry=self.registry,
        )
        self.instances = Gauge("tickd_instances_owned", "Poller instances running on this node", registry=self.registry)
        self.checkpoint_lag = Gauge(
            "tickd_checkpoint_lag_seconds",
            "Now minus the last finished minute, per instance",
            ["instance"],
            registry=self.registry,
        )
        self.claims = Counter("tickd_claims_total", "Ownership changes by kind", ["kind"], registry=self.registry)
        self.throttle_auto_released = Counter(
            "tickd_throttle_auto_released_total",
            "Throttled events released by their timeout, not by the consumer",
            ["client_id", "policy"],
            registry=self.registry,
        )
        self.throttle_acks = Counter(
            "tickd_throttle_acks_total",
            "Records on the ack topic: released, not_held (released before or timed out), or why one was "
            "skipped (empty, too_large, not_utf8, not_json, invalid_fields, bad_event_id, unknown_client, "
            "bad_token, unknown_event, invalid)",
            ["outcome"],
            registry=self.registry,
        )
        self.fenced = Gauge("tickd_node_fenced", "1 while the node is fenced", registry=self.registry)
        self.heartbeat_age = Gauge(
            "tickd_node_heartbeat_age_seconds",
            "Seconds since the last answered heartbeat was sent (the node fences at node_ttl_s - 3 s)",
            registry=self.registry,
        )
        self.open_minutes = Gauge(
            "tickd_open_minutes", "Minutes loaded and not yet closed, all instances", registry=self.registry
        )
        self.oldest_open_minute_age = Gauge(
            "tickd_oldest_open_minute_age_seconds",
            "Now minus the oldest minute not yet checkpointed, all instances (about 70 s when healthy)",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "tickd_store_errors_total",
            "Storage calls that found Cassandra unavailable (retried or waited out), by operation",
            ["operation"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "tickd_dead_letters_total",
            "Dead letters written (fires that failed for good), by callback type",
            ["type"],
            registry=self.registry,
        )
        self.notices = Counter(
            "tickd_notices_total",
            "Notices written to clients' feeds (and sent where a client set a target), by kind",
            ["kind"],
            registry=self.registry,
        )
        self.throttle_wait = Histogram(
            "tickd_throttle_wait_seconds",
            "How long a throttled event waited for its policy's token",
            ["client_id"],
            buckets=THROTTLE_WAIT_BUCKETS_S,
            registry=self.registry,
        )

    def store_error(self, operation: str) -> None:
        """Count a ``StoreUnavailable`` caught by ``operation`` (a name from the code, never from data)."""
        self.store_errors.labels(operation).inc()

    def watch_store(self, counts: RequestCounts) -> None:
        """Export the store's request counts (``CassandraStore.request_counts``) as
        ``tickd_store_requests_total{statement, kind}``, read when scraped: the coordination cost per node."""
        self.registry.register(StoreRequests(counts))

    def watch_node(
        self,
        *,
        fenced: Callable[[], bool],
        heartbeat_age_s: Callable[[], float],
        open_minutes: Callable[[], int],
        oldest_open_minute_age_s: Callable[[], float],
    ) -> None:
        """The node's gauges, read from the node when scraped (so they are never stale)."""
        self.fenced.set_function(lambda: float(fenced()))
        self.heartbeat_age.set_function(heartbeat_age_s)
        self.open_minutes.set_function(lambda: float(open_minutes()))
        self.oldest_open_minute_age.set_function(oldest_open_minute_age_s)


def status_app(metrics: Metrics, status: Callable[[], dict[str, object]]) -> web.Application:
    async def get_metrics(_: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def get_status(_: web.Request) -> web.Response:
        return web.json_response(status())

    async def healthz(_: web.Request) -> web.Response:
        """The process answers: a fenced node is alive (it waits the outage out), so this stays ok."""
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        """503 while the node is fenced (it cannot reach Cassandra, so it runs no instance)."""
        now = status()
        if now.get("fenced"):
            return web.json_response({"status": "fenced", "node_id": now.get("node_id")}, status=503)
        return web.json_response({"status": "ready", "node_id": now.get("node_id")})

    app = web.Application()
    app.router.add_get("/metrics", get_metrics)
    app.router.add_get("/status", get_status)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
