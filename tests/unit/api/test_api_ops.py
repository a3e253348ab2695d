from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.api_helpers import ADMIN, Api, Register, schedule_body
from tickd.schema.errors import StoreUnavailable
from tickd.schema.store import Store
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


def served_routes(app: web.Application) -> set[tuple[str, str]]:
    return {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }


async def test_openapi_lists_every_route_and_nothing_else(api: Api, api_settings: ApiSettings, store: Store) -> None:
    resp = await api.get("/openapi.json")
    spec = await resp.json()
    assert resp.status == 200 and spec["openapi"].startswith("3.1")
    documented = {(method, path) for path, methods in spec["paths"].items() for method in methods}
    assert documented == served_routes(create_app(api_settings, store))
    for methods in spec["paths"].values():
        for op in methods.values():
            for response in op["responses"].values():
                ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
                if ref:
                    assert ref.rsplit("/", 1)[1] in spec["components"]["schemas"]


async def test_docs_page_is_self_contained(api: Api) -> None:
    resp = await api.get("/docs")
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
