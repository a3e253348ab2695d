"""Fixtures for the API tests: the app from ``create_app`` over the shared store, served by aiohttp's
TestServer, and client registration. Test modules load this with ``pytest_plugins``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN, ADMIN_TOKEN, Api, Register, Rows, memory_rows, serve, stored_rows
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import MemoryConnection
from tickd.schema.store import Store
from tickd.service.settings import ApiSettings


@pytest.fixture
def api_settings() -> ApiSettings:
    return ApiSettings(
        admin_token=ADMIN_TOKEN,
        callback_allow_private=True,
    )


@pytest.fixture
async def api(api_settings: ApiSettings, store: Store) -> AsyncIterator[Api]:
    async for client in serve(api_settings, store):
        yield client


@pytest.fixture
def rows(store: Store, request: pytest.FixtureRequest) -> Rows:
    """Raw row counts per client from whichever store the API runs on."""
    if isinstance(store, CassandraStore) and isinstance(store.connection, MemoryConnection):
        tables = store.connection.tables

        async def count_memory(client_id: str) -> dict[str, int]:
            return memory_rows(tables, client_id)

        return count_memory
    cql = request.getfixturevalue("cql")

    async def count_cassandra(client_id: str) -> dict[str, int]:
        return await stored_rows(cql, client_id)

    return count_cassandra


@pytest.fixture
def register(api: Api) -> Register:
    """Register a fresh client; returns (client_id, its auth headers)."""

    async def register(poller_count: int = 4, kafka_topics: list[str] | None = None) -> tuple[str, dict[str, str]]:
        client_id = f"t{uuid.uuid4().hex[:12]}"
        body: dict[str, Any] = {"client_id": client_id, "poller_count": poller_count}
        if kafka_topics is not None:
            body["kafka_topics"] = kafka_topics
        resp = await api.post("/v1/clients", json=body, headers=ADMIN)
        assert resp.status == 201, await resp.text()
        key = (await resp.json())["api_key"]
        return client_id, {"Authorization": f"Bearer {key}"}

    return register
