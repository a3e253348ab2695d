"""Callback ports at create time: a URL naming a port the policy denies is refused with 422
``forbidden_port`` on ``callback.url``, by every path that takes a callback (create, batch, PATCH, PUT by
key), with private targets allowed or not; the port policy is configurable (schema.ports)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN, Api, Register, http_callback, schedule_body, serve, with_settings
from tickd.schema.ports import PortPolicy
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


def _body(url: str) -> dict[str, Any]:
    return schedule_body(callback=http_callback(url=url))


async def assert_refused(resp: Any, port: int) -> None:
    error = (await resp.json())["error"]
    assert resp.status == 422, error
    assert (error["code"], error["field"]) == ("forbidden_port", "callback.url")
    assert f"port {port}" in error["message"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://127.0.0.1:22/x",
        "https://hooks.example.com:2375/v1.41/containers/create",
        "http://[::1]:11211/",
        "http://127.0.0.1:9042/",
        "HTTP://127.0.0.1:25/",
        "http://127.0.0.1:0/",
    ],
)
async def test_a_create_naming_a_denied_port_is_refused(api: Api, register: Register, url: str) -> None:
    _, key = await register()
    resp = await api.post("/v1/schedules", json=_body(url), headers=key)
    await assert_refused(resp, int(url.rsplit(":", 1)[1].split("/")[0]))


async def test_every_path_taking_a_callback_checks_its_port(api: Api, register: Register) -> None:
    _, key = await register()
    created = await api.post("/v1/schedules", json=_body("http://127.0.0.1:8080/ok"), headers=key)
    assert created.status == 201, await created.text()
    schedule_id = (await created.json())["schedule_id"]
    patched = await api.patch(
        f"/v1/schedules/{schedule_id}", json={"callback": http_callback(url="http://127.0.0.1:5432/")}, headers=key
    )
    await assert_refused(patched, 5432)
    put = await api.put("/v1/schedules/by-key/order-1", json=_body("http://127.0.0.1:3306/"), headers=key)
    await assert_refused(put, 3306)
    batch = await api.post(
        "/v1/schedules/batch",
        json={"schedules": [_body("http://127.0.0.1:8080/ok"), _body("http://127.0.0.1:6443/")]},
        headers=key,
    )
    assert batch.status < 500
    assert "forbidden_port" in await batch.text() and "6443" in await batch.text()
    unchanged = await (await api.get(f"/v1/schedules/{schedule_id}", headers=key)).json()
    assert unchanged["callback"]["url"] == "http://127.0.0.1:8080/ok"


async def test_the_denied_port_is_refused_with_private_targets_denied_too(
    api_settings: ApiSettings, store: Store
) -> None:
    """With private targets denied (production): a public address on a denied port is refused for its port."""
    settings = with_settings(api_settings, callback_allow_private=False)
    async for api in serve(settings, store):
        resp = await api.post("/v1/clients", json={"client_id": "ports-public", "poller_count": 1}, headers=ADMIN)
        key = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
        await assert_refused(await api.post("/v1/schedules", json=_body("https://8.8.8.8:6379/"), headers=key), 6379)
        ok = await api.post("/v1/schedules", json=_body("https://8.8.8.8:8443/"), headers=key)
        assert ok.status == 201, await ok.text()


async def test_the_policy_is_configurable(api_settings: ApiSettings, store: Store) -> None:
    policy = PortPolicy.from_env(
        {"TICKD_CALLBACK_ALLOWED_PORTS": "443,9000-9100", "TICKD_CALLBACK_DENIED_PORTS": "9050"}
    )
    async for api in serve(with_settings(api_settings, callback_ports=policy), store):
        resp = await api.post("/v1/clients", json={"client_id": "ports-configured", "poller_count": 1}, headers=ADMIN)
        key = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
        for url, status in (
            ("https://127.0.0.1/", 201),
            ("http://127.0.0.1:9001/", 201),
            ("http://127.0.0.1/", 422),  # 80: not in the allow-list
            ("http://127.0.0.1:9050/", 422),  # in the range, but denied
            ("http://127.0.0.1:8080/", 422),
        ):
            answer = await api.post("/v1/schedules", json=_body(url), headers=key)
            assert answer.status == status, (url, await answer.text())
        assert ApiSettings.from_env({"TICKD_CALLBACK_DENIED_PORTS": "none"}).callback_ports.refusal(6379) is None
