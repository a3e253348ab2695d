"""A request's cost is bounded as a whole, not per item: the cron searches of one batch (or preview) share
one scan budget (TICKD_REQUEST_SCAN_STEPS), and run off the event loop. Work is counted (wall times the
searches look at), never timed; the loop's latency meanwhile is printed, not asserted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.integration.api_helpers import Api, Register, http_callback
from tickd.schema import recurrence as rec
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]

# Matches only wall times inside New York's spring-forward gap: with on_gap "skip" it never fires, and each
# search for it passes over MAX_SCAN_STEPS matching wall times before giving up.
NEVER = {"cron": "30 2 * 3 0#2", "timezone": "America/New_York", "on_gap": "skip", "callback": http_callback()}
HOURLY = {"cron": "0 * * * *", "callback": http_callback()}


@pytest.fixture
def looked_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Wall times the cron searches looked at (each one a step of ``schema.recurrence._scan``)."""
    seen = [0]
    original = rec._to_instant

    def counted(wall: datetime, zone: ZoneInfo, fold: int, on_gap: rec.GapPolicy) -> datetime | None:
        seen[0] += 1
        return original(wall, zone, fold, on_gap)

    monkeypatch.setattr(rec, "_to_instant", counted)
    yield seen


async def _ping_latencies(api: Api, stop: asyncio.Event) -> list[float]:
    """Another client's cheap request, again and again until ``stop``: each answer's latency (s)."""
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        resp = await api.get("/healthz")
        await resp.read()
        latencies.append(time.perf_counter() - started)
    return latencies


async def _batch_with_pings(api: Api, key: dict[str, str], items: list[dict[str, Any]]) -> Any:
    stop = asyncio.Event()
    pinger = asyncio.create_task(_ping_latencies(api, stop))
    started = time.perf_counter()
    resp = await api.post("/v1/schedules/batch", json={"schedules": items}, headers=key)
    took = time.perf_counter() - started
    stop.set()
    latencies = await pinger
    assert resp.status == 200, await resp.text()
    print(
        f"batch of {len(items)}: {took:.3f} s; meanwhile {len(latencies)} pings, "
        f"slowest {max(latencies, default=0) * 1000:.1f} ms"
    )
    return (await resp.json())["results"]


async def test_a_batch_of_never_firing_rules_shares_one_scan_budget(
    api: Api, register: Register, api_settings: ApiSettings, looked_at: list[int]
) -> None:
    """Base code: 40 such items cost 40 x 1,000 steps (each item its own budget), minutes for the
    largest batch; now the batch's items together pass over at most the request's budget."""
    _, key = await register()
    results = await _batch_with_pings(api, key, [NEVER] * 40 + [HOURLY] * 2)
    budget = api_settings.request_scan_steps
    codes = [r["error"]["code"] for r in results[:40]]
    assert codes.count("invalid") == budget // rec.MAX_SCAN_STEPS  # each refused by its own search
    assert codes.count("request_budget_spent") == 40 - budget // rec.MAX_SCAN_STEPS
    assert all(r["error"]["field"] == "cron" for r in results[:40])
    assert looked_at[0] <= budget + 100  # the hourly ones: a step or two each
    # the budget is gap steps: rules that need none are refused too once it is spent
    assert all(r.get("error", {}).get("code") == "request_budget_spent" for r in results[40:])


async def test_every_rules_and_one_time_items_need_no_search(
    api: Api, register: Register, looked_at: list[int]
) -> None:
    _, key = await register()
    items = [NEVER] * 10 + [{"every": "1h", "callback": http_callback()}, {"delay_s": 60, "callback": http_callback()}]
    results = await _batch_with_pings(api, key, items)
    assert [("schedule_id" in r) for r in results[10:]] == [True, True]


async def test_the_largest_batch_of_ordinary_rules_is_accepted(
    api: Api, register: Register, api_settings: ApiSettings, looked_at: list[int]
) -> None:
    _, key = await register()
    zones = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "UTC"]
    items = [
        {"cron": f"{i % 60} {i % 24} * * *", "timezone": zones[i % 4], "on_gap": "skip", "callback": http_callback()}
        for i in range(api_settings.max_batch)
    ]
    results = await _batch_with_pings(api, key, items)
    assert sum("schedule_id" in r for r in results) == api_settings.max_batch
    assert looked_at[0] < 4 * api_settings.max_batch


async def test_a_preview_of_a_never_firing_rule_costs_one_search(
    api: Api, register: Register, looked_at: list[int]
) -> None:
    _, key = await register()
    rule = {k: v for k, v in NEVER.items() if k != "callback"}
    resp = await api.post("/v1/schedules/preview", json={**rule, "count": 100}, headers=key)
    body = await resp.json()
    assert resp.status == 422 and body["error"]["field"] == "cron", body
    assert looked_at[0] <= rec.MAX_SCAN_STEPS + 10


async def test_one_clients_rule_searches_leave_a_thread_to_another(
    api: Api, register: Register, looked_at: list[int]
) -> None:
    """Client A sends 6 creates of never-firing rules at once (each a whole search); client B's hourly
    rule, sent after them, is answered before most of A's: A searches in one rule thread at a time, so
    B finds the other free instead of queueing behind A's searches. Order of answers, not time."""
    _, key_a = await register()
    _, key_b = await register()
    answered: list[str] = []

    async def create(name: str, key: dict[str, str], body: dict[str, Any]) -> None:
        resp = await api.post("/v1/schedules", json=body, headers=key)
        assert resp.status in (201, 422), await resp.text()
        answered.append(name)

    a = [asyncio.create_task(create(f"a{i}", key_a, NEVER)) for i in range(6)]
    await asyncio.sleep(0.05)  # A's searches are under way (or queued) before B asks
    await create("b", key_b, HOURLY)
    await asyncio.gather(*a)
    assert answered.index("b") <= 2, answered
