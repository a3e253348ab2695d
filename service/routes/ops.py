"""Operational endpoints: liveness, readiness, metrics, the OpenAPI document and its HTML page."""

from __future__ import annotations

from aiohttp import web

from tickd.service import keys, openapi
from tickd.service.errors import json_response
from tickd.service.views import Health

SPEC = web.AppKey("openapi_spec", bytes)
DOCS = web.AppKey("openapi_docs", str)


async def healthz(request: web.Request) -> web.Response:
    return json_response(Health("ok"))


async def readyz(request: web.Request) -> web.Response:
    await request.app[keys.STORE].ping()  # StoreUnavailable -> 503
    return json_response(Health("ready"))


async def metrics(request: web.Request) -> web.Response:
    return request.app[keys.METRICS].exposition()


async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=request.app[SPEC], content_type="application/json")


async def docs(request: web.Request) -> web.Response:
    return web.Response(text=request.app[DOCS], content_type="text/html")


def setup(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz, allow_head=False)
    app.router.add_get("/readyz", readyz, allow_head=False)
    app.router.add_get("/metrics", metrics, allow_head=False)
    app.router.add_get("/openapi.json", openapi_json, allow_head=False)
    app.router.add_get("/docs", docs, allow_head=False)
    spec = openapi.build_spec(app[keys.SETTINGS])
    app[SPEC] = openapi.encode(spec)
    app[DOCS] = openapi.render_html(spec)
