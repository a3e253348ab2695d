"""A poller node's Prometheus metrics and its small HTTP side door (/metrics, /status, /healthz)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

LATENESS_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class Metrics:
    """One registry per node, so tests can build several nodes in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.lateness = Histogram(
            "tickd_fire_lateness_seconds",
            "fired_at - fire_at of first attempts",
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.callbacks = Counter(
            "tickd_callbacks_total",
            "Callback deliveries by type and outcome",
            ["type", "outcome"],
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
