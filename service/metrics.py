"""Prometheus metrics, one CollectorRegistry per app (so tests can build many apps)."""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from tickd.schema.request_metrics import RequestCounts, StoreRequests
from tickd.service.errors import Handler

_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes...
        PlatformCollector(registry=self.registry)  # python_info
        self.requests = Counter(
            "tickd_api_requests",
            "HTTP requests by route and status (5xx included: every error becomes a response inside)",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tickd_api_request_duration_seconds",
            "Request latency by route",
            ["method", "route"],
            buckets=_BUCKETS_S,
            registry=self.registry,
        )
        self.schedules_created = Counter(
            "tickd_api_schedules_created", "Schedules created (single and batch)", registry=self.registry
        )

    def watch_store(self, counts: RequestCounts) -> None:
        """Export the store's request counts (``CassandraStore.request_counts``) as
        ``tickd_store_requests_total{statement, kind}``, read when scraped."""
        self.registry.register(StoreRequests(counts))

    def middleware(self) -> web.middleware:  # type: ignore[valid-type]
        @web.middleware
        async def measure(request: web.Request, handler: Handler) -> web.StreamResponse:
            started = time.perf_counter()
            response = await handler(request)
            route = request.match_info.route.resource
            name = route.canonical if route is not None else "unmatched"
            # Labels only from a fixed set: a client inventing methods must not grow the registry.
            method = request.method if request.method in _METHODS else "OTHER"
            self.latency.labels(method, name).observe(time.perf_counter() - started)
            self.requests.labels(method, name, str(response.status)).inc()
            return response

        return measure

    def exposition(self) -> web.Response:
        response = web.Response(body=generate_latest(self.registry))
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        response.charset = "utf-8"
        return response
