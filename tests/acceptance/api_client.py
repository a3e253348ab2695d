"""The API, in-process on a scenario's keyspace, for acceptance tests that create through it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tests.acceptance.harness import Delivery, Scenario
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

ADMIN_TOKEN = "acceptance-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
Api = TestClient[Any, Any]


async def serve_api(scenario: Scenario) -> AsyncIterator[Api]:
    settings = ApiSettings(admin_token=ADMIN_TOKEN, callback_allow_private=True)
    client: Api = TestClient(TestServer(create_app(settings, scenario.store)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def register(api: Api, client_id: str, poller_count: int) -> dict[str, str]:
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": poller_count}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['api_key']}"}


async def call(api: Api, method: str, path: str, key: dict[str, str], body: Any = None) -> dict[str, Any]:
    resp = await api.request(method, path, json=body, headers=key)
    data: dict[str, Any] = await resp.json()
    assert resp.status in (200, 201), (resp.status, data)
    return data


def event_ids(deliveries: list[Delivery]) -> set[str]:
    """Events of one fire share its fire id: they are told apart by their event id."""
    return {str(d.body.get("event_id")) for d in deliveries if d.answered == 200}
