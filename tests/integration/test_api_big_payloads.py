"""Payloads as large as the API accepts, on the real Cassandra with its production batch thresholds
(batch_size_fail_threshold 50 KiB, as deploy/local keeps it): single and batch creates, several tenants
at once, big and small mixed, every one answered 2xx and every row there (issue #9)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from cassandra.cluster import Session

from tests.integration.api_helpers import Api, Register, http_callback
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]


def payload_of(size: int, tag: str) -> str:
    """A JSON string whose encoding is exactly ``size`` bytes."""
    return tag + "x" * (size - 2 - len(tag))


def body(size: int, tag: str) -> dict[str, Any]:
    return {"delay_s": 3600, "payload": payload_of(size, tag), "callback": http_callback()}


async def assert_stored(api: Api, headers: dict[str, str], expected: dict[str, int]) -> None:
    for schedule_id, size in expected.items():
        resp = await api.get(f"/v1/schedules/{schedule_id}", headers=headers)
        assert resp.status == 200, await resp.text()
        assert len(json.dumps((await resp.json())["payload"])) == size


def test_the_local_cassandra_keeps_the_production_batch_thresholds(cql: Session) -> None:
    rows = cql.execute("SELECT name, value FROM system_views.settings")
    found = {r.name: r.value for r in rows}
    assert (found["batch_size_fail_threshold"], found["batch_size_warn_threshold"]) == ("50KiB", "5KiB")


async def test_the_largest_payloads_single_creates_of_mixed_tenants(
    api: Api, register: Register, api_settings: ApiSettings
) -> None:
    largest = api_settings.max_payload_bytes
    tenants = [await register() for _ in range(3)]
    sizes = [largest, 10, largest - 1, 50 * 1024, 200, largest, 49 * 1024, 30]

    async def create(headers: dict[str, str], size: int, i: int) -> tuple[int, str, int]:
        resp = await api.post("/v1/schedules", json=body(size, f"s{i}"), headers=headers)
        answer = await resp.json()
        return resp.status, answer.get("schedule_id", json.dumps(answer)), size

    # All at once, so the API groups creates of different tenants together.
    calls = [create(headers, size, i) for _, headers in tenants for i, size in enumerate(sizes)]
    results = await asyncio.gather(*calls)
    assert [status for status, _, _ in results] == [201] * len(calls), results
    for t, (_, headers) in enumerate(tenants):
        mine = results[t * len(sizes) : (t + 1) * len(sizes)]
        await assert_stored(api, headers, {schedule_id: size for _, schedule_id, size in mine})


async def test_the_largest_payloads_in_batches_of_mixed_tenants(
    api: Api, register: Register, api_settings: ApiSettings
) -> None:
    largest = api_settings.max_payload_bytes
    tenants = [await register() for _ in range(2)]
    sizes = [largest, 10, largest, 20 * 1024, 20 * 1024, 20 * 1024, largest - 1, 100] * 3

    async def create_batch(headers: dict[str, str]) -> list[dict[str, Any]]:
        items = [body(size, f"b{i}") for i, size in enumerate(sizes)]
        resp = await api.post("/v1/schedules/batch", json={"schedules": items}, headers=headers)
        assert resp.status == 200, await resp.text()
        results: list[dict[str, Any]] = (await resp.json())["results"]
        return results

    answers = await asyncio.gather(*(create_batch(headers) for _, headers in tenants))
    for (_, headers), results in zip(tenants, answers, strict=True):
        assert [r.get("error") for r in results] == [None] * len(sizes)
        await assert_stored(api, headers, {r["schedule_id"]: sizes[r["index"]] for r in results})


async def test_a_big_payload_can_be_rescheduled_and_replaced(
    api: Api, register: Register, api_settings: ApiSettings
) -> None:
    """A move writes the new row and retires the old one: with a big row, in steps, never one batch."""
    largest = api_settings.max_payload_bytes
    _, headers = await register()
    resp = await api.post("/v1/schedules", json=body(10, "p"), headers=headers)
    schedule_id = (await resp.json())["schedule_id"]
    for change in ({"payload": payload_of(largest, "p1")}, {"delay_s": 7200}, {"payload": payload_of(largest, "p2")}):
        resp = await api.patch(f"/v1/schedules/{schedule_id}", json=change, headers=headers)
        assert resp.status == 200, await resp.text()
    await assert_stored(api, headers, {schedule_id: largest})
    resp = await api.get(f"/v1/schedules/{schedule_id}", headers=headers)
    assert (await resp.json())["payload"].startswith("p2")
    assert uuid.UUID(schedule_id)
