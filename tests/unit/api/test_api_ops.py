from __future__ import annotations

import re

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.api_helpers import ADMIN, Api, Register, schedule_body, with_settings
from tickd.schema.errors import StoreUnavailable
from tickd.schema.store import Store
from tickd.service import openapi, params
from tickd.service.app import create_app
from tickd.service.declare import Routes
from tickd.service.routes import operations, ops
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


def test_every_route_comes_from_a_declaration(api_settings: ApiSettings, store: Store) -> None:
    """The router holds exactly the declared operations: each route is one declaration's method, path
    and handler, and nothing registers a route (a HEAD among them) on its own."""
    app = create_app(api_settings, store)
    declared = {(op.method.upper(), op.path): op.handler for op in operations()}
    assert all(route.resource is not None for route in app.router.routes())
    routes = [(route.method, route.resource.canonical, route.handler) for route in app.router.routes()]
    assert len(routes) == len(declared) == len(operations())
    assert [(method, path) for method, path, handler in routes if declared.get((method, path)) is not handler] == []
    assert app[ops.OPERATIONS] == operations()


async def test_openapi_documents_every_declared_operation(api: Api) -> None:
    resp = await api.get("/openapi.json")
    spec = await resp.json()
    assert resp.status == 200 and spec["openapi"].startswith("3.1")
    documented = [(method, path) for path, methods in spec["paths"].items() for method in methods]
    assert sorted(documented) == sorted((op.method, op.path) for op in operations())
    for methods in spec["paths"].values():
        for op in methods.values():
            for response in op["responses"].values():
                ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
                if ref:
                    assert ref.rsplit("/", 1)[1] in spec["components"]["schemas"]


def test_a_path_parameter_without_a_type_is_refused_at_declaration() -> None:
    routes = Routes("test", path_params=(params.SchedulePath,))
    with pytest.raises(TypeError, match="name"):
        routes.get("/v1/things/{name}", "A thing")


def test_other_successes_and_a_setting_that_lifts_auth_are_declared(api_settings: ApiSettings) -> None:
    """What were special cases keyed on paths in service.openapi are fields of the declarations."""
    by_key = {(op.method, op.path): op for op in operations()}
    put_policy = openapi.statuses(by_key["put", "/v1/throttle-policies/{name}"], api_settings)
    assert (put_policy[201], put_policy[200]) == ("OK", "Replaced")
    assert openapi.statuses(by_key["post", "/v1/schedules"], api_settings)[200] == "Replayed (Idempotency-Key)"
    metrics = by_key["get", "/metrics"]
    assert 401 in openapi.statuses(metrics, api_settings)
    assert set(openapi.statuses(metrics, with_settings(api_settings, metrics_auth="none"))) == {200}


async def test_docs_page_is_self_contained(api: Api) -> None:
    resp = await api.get("/docs/plain")
    text = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html"
    assert "/v1/schedules/batch" in text and "<script" not in text and "http://" not in text.replace("http://x", "")


async def test_health_ready_metrics(api: Api, register: Register) -> None:
    assert await (await api.get("/healthz")).json() == {"status": "ok"}
    assert await (await api.get("/readyz")).json() == {"status": "ready"}
    _, key = await register()
    await api.post("/v1/schedules", json=schedule_body(), headers=key)
    text = await (await api.get("/metrics", headers=ADMIN)).text()  # the admin token (TICKD_METRICS_AUTH)
    assert 'tickd_api_requests_total{method="POST",route="/v1/schedules",status="201"} 1.0' in text
    assert 'tickd_api_request_duration_seconds_bucket{le="0.5",method="POST",route="/v1/schedules"}' in text
    assert "tickd_api_schedules_created_total 1.0" in text


async def test_readyz_fails_when_store_is_down(api_settings: ApiSettings, store: Store) -> None:
    class DownStore:
        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        async def ping(self) -> None:
            raise StoreUnavailable("down for the test")

    async with TestClient(TestServer(create_app(api_settings, DownStore()))) as client:  # type: ignore[arg-type]
        resp = await client.get("/readyz")
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        assert (await resp.json())["error"]["code"] == "store_unavailable"


async def test_unknown_routes_and_methods_get_json_4xx(api: Api) -> None:
    missing = await api.get("/v1/nothing-here")
    assert missing.status == 404 and (await missing.json())["error"]["code"] == "route_not_found"
    wrong = await api.put("/v1/schedules")
    assert wrong.status == 405 and (await wrong.json())["error"]["code"] == "method_not_allowed"
    assert "POST" in wrong.headers["Allow"]
    assert (await api.get("/healthz")).headers["X-Request-Id"]


async def test_docs_is_swagger_ui_served_from_this_origin(api: Api) -> None:
    """/docs: Swagger UI's files from the installed package, our initializer, nothing from elsewhere."""
    resp = await api.get("/docs")
    page = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html"
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources and all(s.startswith("/") and not s.startswith("//") for s in sources), sources
    policy = resp.headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "'unsafe-eval'" not in policy and "connect-src 'self'" in policy
    for path, media in (
        ("/docs/swagger-ui.css", "text/css"),
        ("/docs/swagger-ui-bundle.js", "text/javascript"),
        ("/docs/init.js", "text/javascript"),
    ):
        assert path in sources
        got = await api.get(path)
        assert (got.status, got.content_type) == (200, media), path
        assert got.headers["Content-Security-Policy"] == policy
    init = await (await api.get("/docs/init.js")).text()
    assert 'url: "/openapi.json"' in init and "validatorUrl: null" in init
