"""Operational endpoints: liveness, readiness, metrics, the OpenAPI document and its HTML page.

``/metrics`` names every route, status and count the API has served, so it is not public by default:
on the API port it answers the admin token only (``TICKD_METRICS_AUTH=admin``; ``none`` opens it). A
scraper that should not hold the admin token reads it from a listener of its own
(``TICKD_API_METRICS_PORT``), bound where the load balancer does not reach, serving ``/metrics`` only.

``/docs`` is Swagger UI over ``/openapi.json``: the release files the ``swagger-ui-py`` package ships,
served from this process (nothing from another origin, the online validator off), under a Content Security
Policy that allows this origin's scripts and styles only. ``/docs/plain`` is the same document as one
self-contained page for a reader without JavaScript (inline CSS, no script); its policy allows exactly
that stylesheet, by its hash, and nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

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
_UI_FILES = web.AppKey("docs_ui_files", dict[str, bytes])

# /docs and its files: path -> (where, file, content type).
_SWAGGER = Path(str(files("swagger_ui") / "static"))  # the swagger-ui-py package's copy of Swagger UI
_OURS = Path(__file__).resolve().parent.parent / "ui"
DOCS_FILES: dict[str, tuple[Path, str, str]] = {
    "/docs/swagger-ui.css": (_SWAGGER, "swagger-ui.css", "text/css"),
    "/docs/swagger-ui-bundle.js": (_SWAGGER, "swagger-ui-bundle.js", "text/javascript"),
    "/docs/init.js": (_OURS, "docs.js", "text/javascript"),
}
DOCS_PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>tickd API</title>'
    '<link rel="stylesheet" href="/docs/swagger-ui.css"></head><body>'
    '<noscript><p>This page needs JavaScript: <a href="/docs/plain">/docs/plain</a> is the same document without '
    'it, and <a href="/openapi.json">/openapi.json</a> the machine-readable one.</p></noscript>'
    '<div id="swagger-ui"></div><script src="/docs/swagger-ui-bundle.js"></script>'
    '<script src="/docs/init.js"></script></body></html>'
)
# Swagger UI runs on this origin's script and stylesheet alone: no inline script or style, nothing else.
UI_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

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


@routes.get("/docs", "This document, browsable (Swagger UI)", media="text/html")
async def docs(request: web.Request) -> web.Response:
    return web.Response(text=DOCS_PAGE, content_type="text/html", headers=UI_HEADERS)


@routes.get("/docs/plain", "This document as one HTML page without script", media="text/html")
async def docs_plain(request: web.Request) -> web.Response:
    return web.Response(text=request.app[DOCS], content_type="text/html", headers=request.app[DOCS_HEADERS])


async def docs_file(request: web.Request) -> web.Response:
    path = request.match_info.route.resource.canonical if request.match_info.route.resource else ""
    media = DOCS_FILES[path][2]
    return web.Response(body=request.app[_UI_FILES][path], content_type=media, charset="utf-8", headers=UI_HEADERS)


for _path, (_, _name, _media) in DOCS_FILES.items():
    routes.get(_path, f"/docs: {_name}", media=_media)(docs_file)


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
    app[_UI_FILES] = {path: (folder / name).read_bytes() for path, (folder, name, _) in DOCS_FILES.items()}
    app[METRICS_LISTENER] = MetricsListener()
    if app[keys.SETTINGS].metrics_port is not None:
        app.cleanup_ctx.append(_metrics_listener)
