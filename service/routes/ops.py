"""Operational endpoints: liveness, readiness, metrics, the OpenAPI document and its HTML page.

``/metrics`` names every route, status and count the API has served, so it is not public by default:
on the API port it answers the admin token only (``TICKD_METRICS_AUTH=admin``; ``none`` opens it). A
scraper that should not hold the admin token reads it from a listener of its own
(``TICKD_API_METRICS_PORT``), bound where the load balancer does not reach, serving ``/metrics`` only.

``/docs`` is one self-contained page (inline CSS, no script, nothing from another origin); its Content
Security Policy allows exactly that stylesheet, by its hash, and nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog
from aiohttp import web

from tickd.service import keys, openapi
from tickd.service.declare import Operation, Routes
from tickd.service.errors import json_response
from tickd.service.settings import ApiSettings
from tickd.service.views import Health

# Every operation the app serves, as ``service.app`` mounted them: the document is built from these.
OPERATIONS = web.AppKey("operations", tuple[Operation, ...])
SPEC = web.AppKey("openapi_spec", bytes)
DOCS = web.AppKey("openapi_docs", str)
DOCS_HEADERS = web.AppKey("openapi_docs_headers", dict[str, str])

log = structlog.get_logger("tickd.api")
_STYLE = re.compile(r"<style>(.*?)</style>", re.S)


@dataclass
class MetricsListener:
    """The metrics-only listener's bound port, once it listens (None before, or with none configured)."""

    port: int | None = None


METRICS_LISTENER = web.AppKey("metrics_listener", MetricsListener)


routes = Routes("operations", auth=None)


@routes.get("/healthz", "The process is up", response=Health)
async def healthz(request: web.Request) -> web.Response:
    return json_response(Health("ok"))


@routes.get("/readyz", "Cassandra answers", response=Health, errors=(503,))
async def readyz(request: web.Request) -> web.Response:
    await request.app[keys.STORE].ping()  # StoreUnavailable -> 503
    return json_response(Health("ready"))


def _metrics_public(settings: ApiSettings) -> bool:
    return settings.metrics_auth == "none"


@routes.get(
    "/metrics",
    "Prometheus metrics",
    auth="admin",
    public_when=_metrics_public,
    media="text/plain",
    description=(
        "The admin token unless TICKD_METRICS_AUTH=none. TICKD_API_METRICS_PORT serves the same, without a "
        "token, on a listener of its own."
    ),
)
async def metrics(request: web.Request) -> web.Response:
    """/metrics on the API port: the admin token first, unless TICKD_METRICS_AUTH=none."""
    if not _metrics_public(request.app[keys.SETTINGS]):
        await request.app[keys.AUTH].admin(request)  # 401, 403 for a client key, 503 with no admin token
    return request.app[keys.METRICS].exposition()


async def exposition(request: web.Request) -> web.Response:
    """/metrics on the metrics-only listener: no token (the listener's address is the access control)."""
    return request.app[keys.METRICS].exposition()


@routes.get("/openapi.json", "This document")
async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=request.app[SPEC], content_type="application/json")


@routes.get("/docs", "This document as HTML", media="text/html")
async def docs(request: web.Request) -> web.Response:
    return web.Response(text=request.app[DOCS], content_type="text/html", headers=request.app[DOCS_HEADERS])


def docs_headers(page: str) -> dict[str, str]:
    """A CSP for the docs page: its inline stylesheets by hash, nothing else (no script, no image, no
    connection, no frame, no form), and the page never framed or sniffed."""
    hashes = " ".join(f"'sha256-{_digest(style)}'" for style in _STYLE.findall(page)) or "'none'"
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src {hashes}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


def _digest(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def _metrics_app(app: web.Application) -> web.Application:
    side = web.Application()
    side[keys.METRICS] = app[keys.METRICS]
    side.router.add_get("/metrics", exposition, allow_head=False)
    return side


async def _metrics_listener(app: web.Application) -> AsyncIterator[None]:
    """Serves ``/metrics`` alone on TICKD_API_METRICS_HOST:PORT while the API runs."""
    settings = app[keys.SETTINGS]
    runner = web.AppRunner(_metrics_app(app), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.metrics_host, settings.metrics_port).start()
        app[METRICS_LISTENER].port = runner.addresses[0][1]
        log.info("api_metrics_listening", host=settings.metrics_host, port=app[METRICS_LISTENER].port)
        yield
    finally:
        await runner.cleanup()


def setup(app: web.Application) -> None:
    """The document of the operations the app mounted (``OPERATIONS``), and the metrics-only listener."""
    declared: tuple[Operation, ...] = app[OPERATIONS]
    spec = openapi.build_spec(app[keys.SETTINGS], declared)
    app[SPEC] = openapi.encode(spec)
    app[DOCS] = openapi.render_html(spec)
    app[DOCS_HEADERS] = docs_headers(app[DOCS])
    app[METRICS_LISTENER] = MetricsListener()
    if app[keys.SETTINGS].metrics_port is not None:
        app.cleanup_ctx.append(_metrics_listener)
