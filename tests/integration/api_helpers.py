"""Helpers for the API tests (constants, bodies, raw row counts); fixtures live in api_fixtures.

The API tests run over either adapter of the store: ``tests/unit/api`` over the in-memory store (no
Cassandra), the hostile corpus, idempotency races and the fuzzer in ``tests/integration`` over the real one.
Raw row counts come from the adapter's own tables either way (``rows`` fixture)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from cassandra.cluster import Session

from tests.integration import api_statuses
from tickd.schema.memory import Tables, cql_schema
from tickd.schema.store import Store
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

ADMIN_TOKEN = "test-admin-token-0123"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
Api = TestClient[Any, Any]
Register = Callable[..., Awaitable[tuple[str, dict[str, str]]]]
# Raw row counts of everything a create or change could write for a client: ``await rows(client_id)``.
Rows = Callable[[str], Awaitable[dict[str, int]]]


async def serve(settings: ApiSettings, store: Store) -> AsyncIterator[Api]:
    """The app over ``store``, served on a local port; every answer is held against the statuses its
    operation declares (``api_statuses``)."""
    app = create_app(settings, store)
    api_statuses.watch(app)
    client: Api = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def with_settings(settings: ApiSettings, **changes: Any) -> ApiSettings:
    return dataclasses.replace(settings, **changes)


def http_callback(**changes: Any) -> dict[str, Any]:
    return {"type": "http", "url": "http://127.0.0.1:9/cb", **changes}


def schedule_body(**changes: Any) -> dict[str, Any]:
    """A valid create body; a change to None drops that field."""
    body = {"delay_s": 3600, "payload": {"order": 42}, "callback": http_callback(), **changes}
    return {k: v for k, v in body.items() if v is not None}


_COUNTS = {
    "schedules": "SELECT COUNT(*) FROM schedules WHERE client_id = %s ALLOW FILTERING",
    "refs": "SELECT COUNT(*) FROM schedule_refs WHERE client_id = %s ALLOW FILTERING",
    "idempotency": "SELECT COUNT(*) FROM idempotency_keys WHERE client_id = %s ALLOW FILTERING",
}


async def stored_rows(cql: Session, client_id: str) -> dict[str, int]:
    """Raw row counts of everything a create or change could write for ``client_id``."""

    def count() -> dict[str, int]:
        return {name: cql.execute(query, (client_id,)).one()[0] for name, query in _COUNTS.items()}

    return await asyncio.to_thread(count)


_MEMORY_TABLES = {"schedules": "schedules", "refs": "schedule_refs", "idempotency": "idempotency_keys"}


def memory_rows(tables: Tables, client_id: str) -> dict[str, int]:
    """The same counts as ``stored_rows``, read from the in-memory store's tables."""
    return {
        key: sum(1 for _, row in tables.scan(cql_schema.load()[name].table) if row["client_id"] == client_id)
        for key, name in _MEMORY_TABLES.items()
    }
