"""Per-tenant delivery statistics end to end: a real poller process counts each attempt and writes the
counts to the real Cassandra; ``GET /v1/stats`` (the API in-process on the scenario's keyspace) shows
each tenant its own, ``GET /v1/admin/stats`` the cluster's, and the node's Prometheus metrics carry the
same counts per client."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.acceptance.api_client import ADMIN, Api, call, register
from tests.acceptance.harness import OK, Behaviour, Scenario, report, wait_placement, wait_until

pytestmark = pytest.mark.acceptance

# Durable retries only (no inline ones), two attempts, a short backoff, statistics written every second.
NODE_ENV = {
    "TICKD_STATS_FLUSH_S": "1",
    "TICKD_CALLBACK_MAX_ATTEMPTS": "2",
    "TICKD_CALLBACK_INLINE_BUDGET_S": "0",
    "TICKD_CALLBACK_BACKOFF_BASE_S": "0.5",
    "TICKD_CALLBACK_BACKOFF_CAP_S": "1",
}


def _counts(window: dict[str, Any]) -> tuple[int, int, int, int]:
    return window["fired"], window["delivered"], window["retried"], window["failed"]


def _metric(text: str, name: str, client_id: str, outcome: str | None = None) -> float:
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith(name)
            and f'client_id="{client_id}"' in line
            and (outcome is None or f'outcome="{outcome}"' in line)
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.timeout(180)
async def test_st_each_tenant_reads_its_own_counts(scenario: Scenario, api: Api) -> None:
    sc, r = scenario, scenario.receiver
    busy, quiet = await register(api, "st-busy", 1), await register(api, "st-quiet", 1)
    [node] = await sc.start_nodes(["n1"], **NODE_ENV)
    await wait_placement([node], "st-", {"st-busy/0", "st-quiet/0"}, timeout_s=45)

    due = (datetime.now(UTC) + timedelta(seconds=4)).isoformat()

    def body(endpoint: str, behaviour: Behaviour = OK) -> dict[str, Any]:
        return {"fire_at": due, "callback": {"type": "http", "url": r.endpoint(endpoint, behaviour)}}

    made = [call(api, "POST", "/v1/schedules", busy, body("busy-ok")) for _ in range(30)]
    made += [call(api, "POST", "/v1/schedules", busy, body("busy-bad", Behaviour(always_fail=True))) for _ in range(5)]
    made += [call(api, "POST", "/v1/schedules", quiet, body("quiet-ok")) for _ in range(10)]
    await asyncio.gather(*made)

    async def stats(key: dict[str, str]) -> dict[str, Any]:
        return await call(api, "GET", "/v1/stats", key)

    seen: dict[str, Any] = {}

    async def settled() -> bool:
        seen["busy"], seen["quiet"] = await stats(busy), await stats(quiet)
        return _counts(seen["busy"]["windows"][0]) == (35, 30, 5, 5) and seen["quiet"]["windows"][0]["fired"] == 10

    deadline = asyncio.get_running_loop().time() + 60
    while not await settled():
        assert asyncio.get_running_loop().time() < deadline, f"stats never settled: {seen}"
        await asyncio.sleep(0.5)
    await wait_until(lambda: len(r.of("busy-bad")) == 10, 10, "the failing fires did not make two attempts each")

    busy_windows, quiet_windows = seen["busy"]["windows"], seen["quiet"]["windows"]
    assert seen["busy"]["client_id"] == "st-busy" and seen["quiet"]["client_id"] == "st-quiet"
    for window in busy_windows:  # every window holds the same minute or two
        assert _counts(window) == (35, 30, 5, 5)
        assert 0 <= window["lateness_p50_s"] <= window["lateness_p99_s"] <= window["lateness_max_s"]
    for window in quiet_windows:
        assert _counts(window) == (10, 10, 0, 0)
    # An admin sees every client's attempts together (the node writes those rows too), or one client's.
    cluster = await call(api, "GET", "/v1/admin/stats", ADMIN)
    assert cluster["client_id"] is None and _counts(cluster["windows"][0]) == (45, 40, 5, 5)
    one = await call(api, "GET", "/v1/admin/stats?client_id=st-quiet", ADMIN)
    assert _counts(one["windows"][0]) == (10, 10, 0, 0)
    # The node's own metrics agree, per client.
    metrics = await node.metrics()
    assert _metric(metrics, "tickd_callbacks_total", "st-busy", "succeeded") == 30
    assert _metric(metrics, "tickd_callbacks_total", "st-busy", "failed") == 5
    assert _metric(metrics, "tickd_fire_lateness_seconds_count", "st-quiet") == 10
    assert re.search(r'tickd_fire_lateness_seconds_bucket\{client_id="st-busy",le="\+Inf"\} 35', metrics)
    print(
        report(
            "ST",
            busy=_counts(busy_windows[0]),
            quiet=_counts(quiet_windows[0]),
            busy_p99_s=busy_windows[0]["lateness_p99_s"],
            busy_max_s=busy_windows[0]["lateness_max_s"],
        )
    )
