from __future__ import annotations

import uuid

import pytest

from tests.integration.api_helpers import ADMIN, Api, Register, schedule_body, serve, with_settings
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


async def test_register_get_list(api: Api) -> None:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post(
        "/v1/clients", json={"client_id": client_id, "poller_count": 4, "kafka_topics": ["orders.*"]}, headers=ADMIN
    )
    assert resp.status == 201
    body = await resp.json()
    assert body["client_id"] == client_id and body["poller_count"] == 4 and body["active"] is True
    assert body["api_key"].startswith(f"{client_id}.") and body["kafka_topics"] == ["orders.*"]

    got = await (await api.get(f"/v1/clients/{client_id}", headers=ADMIN)).json()
    assert "api_key" not in got and got["poller_span"] == 4
    listed = await (await api.get("/v1/clients", headers=ADMIN)).json()
    assert client_id in [c["client_id"] for c in listed["clients"]]

    again = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert again.status == 409
    assert (await again.json())["error"] == {
        "code": "already_exists",
        "message": f"client {client_id!r} already exists",
        "field": "client_id",
    }


async def test_unknown_client_is_404(api: Api) -> None:
    resp = await api.get("/v1/clients/nobody-here", headers=ADMIN)
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


async def test_quota_decrease_keeps_span_and_increase_spreads(api: Api, store: Store) -> None:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 8}, headers=ADMIN)

    down = await (await api.patch(f"/v1/clients/{client_id}", json={"poller_count": 2}, headers=ADMIN)).json()
    assert (down["poller_count"], down["poller_span"]) == (2, 8) and down["resized_at"] is not None
    down2 = await (await api.patch(f"/v1/clients/{client_id}", json={"poller_count": 1}, headers=ADMIN)).json()
    assert (down2["poller_count"], down2["poller_span"]) == (1, 8)
    up = await (await api.patch(f"/v1/clients/{client_id}", json={"poller_count": 16}, headers=ADMIN)).json()
    assert (up["poller_count"], up["poller_span"]) == (16, 16)

    stored = await store.get_client(client_id)
    assert stored is not None and stored.poller_count == 16 and stored.poller_span == 16


async def test_patch_active_and_topics(api: Api, register: Register) -> None:
    client_id, key = await register()
    resp = await api.patch(
        f"/v1/clients/{client_id}", json={"active": False, "kafka_topics": ["a.b", "c-*"]}, headers=ADMIN
    )
    body = await resp.json()
    assert resp.status == 200 and body["active"] is False and body["kafka_topics"] == ["a.b", "c-*"]
    refused = await api.post("/v1/schedules", json=schedule_body(), headers=key)
    assert refused.status == 403 and (await refused.json())["error"]["code"] == "client_inactive"


async def test_rotation_replaces_the_key(api: Api, register: Register) -> None:
    client_id, old = await register()
    resp = await api.post(f"/v1/clients/{client_id}/api-keys", headers=ADMIN)
    assert resp.status == 201
    new = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
    assert (await api.get("/v1/schedules/" + str(uuid.uuid4()), headers=old)).status == 401
    assert (await api.get("/v1/schedules/" + str(uuid.uuid4()), headers=new)).status == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/clients"),
        ("POST", "/v1/clients"),
        ("GET", "/v1/clients/x"),
        ("PATCH", "/v1/clients/x"),
        ("POST", "/v1/clients/x/api-keys"),
    ],
)
async def test_admin_endpoints_refuse_client_keys_and_no_key(
    api: Api, register: Register, method: str, path: str
) -> None:
    _, client_key = await register()
    cases = [
        (client_key, 403, "forbidden"),
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong-token"}, 401, "unauthorized"),
        ({"Authorization": "Basic abc"}, 401, "unauthorized"),
    ]
    for headers, status, code in cases:
        resp = await api.request(method, path, json={"poller_count": 1}, headers=headers)
        assert resp.status == status, (headers, await resp.text())
        assert (await resp.json())["error"]["code"] == code


async def test_admin_token_is_not_a_client_key(api: Api) -> None:
    resp = await api.post("/v1/schedules", json=schedule_body(), headers=ADMIN)
    assert resp.status == 401


async def test_no_admin_token_configured_answers_503(api_settings: ApiSettings, store: Store) -> None:
    async for api in serve(with_settings(api_settings, admin_token=None), store):
        resp = await api.get("/v1/clients", headers=ADMIN)
        assert resp.status == 503 and (await resp.json())["error"]["code"] == "admin_disabled"
