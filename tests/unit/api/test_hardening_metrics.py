"""``/metrics`` is not public by default: on the API port it answers the admin token only, unless
TICKD_METRICS_AUTH=none; TICKD_API_METRICS_PORT serves it, without a token, on a listener of its own that
serves nothing else. ``/docs`` carries a Content Security Policy that allows its own inline stylesheet and
nothing else."""

from __future__ import annotations

import base64
import hashlib
import re

import aiohttp
import pytest

from tests.integration.api_helpers import ADMIN, Api, Register, schedule_body, serve, with_settings
from tickd.schema.errors import ConfigError
from tickd.schema.store import Store
from tickd.service.routes import ops
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


async def test_metrics_on_the_api_port_need_the_admin_token(api: Api, register: Register) -> None:
    _, key = await register()
    assert (await api.post("/v1/schedules", json=schedule_body(), headers=key)).status == 201
    anonymous = await api.get("/metrics")
    assert anonymous.status == 401 and (await anonymous.json())["error"]["code"] == "unauthorized"
    tenant = await api.get("/metrics", headers=key)
    assert tenant.status == 403
    assert "tickd_api" not in await anonymous.text() + await tenant.text()
    admin = await api.get("/metrics", headers=ADMIN)
    assert admin.status == 200 and "tickd_api_schedules_created_total 1.0" in await admin.text()


async def test_metrics_without_an_admin_token_configured_answer_503(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, admin_token=None), store):
        resp = await api.get("/metrics")
        assert resp.status == 503 and (await resp.json())["error"]["code"] == "admin_disabled"


async def test_metrics_auth_none_makes_them_public(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, metrics_auth="none"), store):
        resp = await api.get("/metrics")
        assert resp.status == 200 and "tickd_api_requests_total" in await resp.text()
        spec = await (await api.get("/openapi.json")).json()
        assert spec["paths"]["/metrics"]["get"]["security"] == []


async def test_the_spec_says_metrics_need_the_admin_token(api: Api) -> None:
    spec = await (await api.get("/openapi.json")).json()
    operation = spec["paths"]["/metrics"]["get"]
    assert operation["security"] == [{"admin": []}] and "401" in operation["responses"]


async def test_a_metrics_port_serves_metrics_alone_without_a_token(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, metrics_port=0), store):
        port = api.app[ops.METRICS_LISTENER].port if api.app is not None else None
        assert port is not None and port != api.port
        assert (await api.get("/healthz")).status == 200
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200
                assert 'tickd_api_requests_total{method="GET",route="/healthz",status="200"} 1.0' in await resp.text()
            for other in ("/healthz", "/v1/clients", "/docs", "/ui"):
                async with http.get(f"http://127.0.0.1:{port}{other}", headers=ADMIN) as resp:
                    assert resp.status == 404, other
        assert (await api.get("/metrics")).status == 401  # the API port still wants the token
    async with aiohttp.ClientSession() as http:  # closed with the app
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{port}/metrics")


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"TICKD_METRICS_AUTH": "token"}, "TICKD_METRICS_AUTH"),
        ({"TICKD_API_METRICS_PORT": "70000"}, "TICKD_API_METRICS_PORT"),
        ({"TICKD_API_METRICS_PORT": "metrics"}, "TICKD_API_METRICS_PORT"),
        ({"TICKD_API_METRICS_PORT": "8080"}, "TICKD_API_METRICS_PORT"),  # the API's own port
        ({"TICKD_API_PORT": "9000", "TICKD_API_METRICS_PORT": "9000"}, "TICKD_API_METRICS_PORT"),
    ],
)
def test_bad_metrics_settings_stop_the_api_at_start(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ApiSettings.from_env(env)
    assert exc.value.field == name


def test_metrics_settings_default_to_the_admin_token_and_no_listener() -> None:
    settings = ApiSettings.from_env({})
    assert (settings.metrics_auth, settings.metrics_port) == ("admin", None)
    chosen = ApiSettings.from_env({"TICKD_METRICS_AUTH": "None", "TICKD_API_METRICS_PORT": "9108"})
    assert (chosen.metrics_auth, chosen.metrics_port) == ("none", 9108)


async def test_docs_have_a_csp_allowing_their_own_stylesheet_only(api: Api) -> None:
    resp = await api.get("/docs/plain")
    page = await resp.text()
    policy = resp.headers["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(styles) == 1 and "<script" not in page and "<link" not in page
    digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
    assert directives["style-src"] == f"'sha256-{digest}'"
    assert {directives[d] for d in ("base-uri", "form-action", "frame-ancestors")} == {"'none'"}
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
