"""O7: a bulk pause of 10,000 schedules by tag, on real API processes over the real Cassandra, with the
replica running the job killed with SIGKILL mid-job: another replica takes it on once the lease runs out,
from the last saved page, and the job completes with every schedule paused exactly once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest

from tests.acceptance.api_client import ADMIN_TOKEN, Api, call, register
from tests.acceptance.harness import API_BIN, PollerProcess, Scenario, free_port, report

COUNT = 10_000
TAG = "wave=o7"
LEASE_S = 5

pytestmark = pytest.mark.acceptance


def api_process(sc: Scenario, name: str, **env: str) -> PollerProcess:
    """A ``tickd-api`` process on the scenario's keyspace, running bulk jobs with a short lease."""
    port = free_port()
    proc = PollerProcess(
        name,
        sc.keyspace,
        sc.log_dir,
        {
            "TICKD_API_PORT": str(port),
            "TICKD_ADMIN_TOKEN": ADMIN_TOKEN,
            "TICKD_CALLBACK_ALLOW_PRIVATE": "true",
            "TICKD_BULK_POLL_S": "0.2",
            "TICKD_BULK_LEASE_S": str(LEASE_S),
            "TICKD_BULK_RATE_PER_S": "2000",
            **env,
        },
    )
    proc.command = [str(API_BIN)]
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    sc.nodes.append(proc)  # closed with the scenario
    return proc.start()


async def get(http: aiohttp.ClientSession, url: str, key: dict[str, str]) -> dict[str, Any]:
    async with http.get(url, headers=key) as resp:
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())


async def ready(http: aiohttp.ClientSession, proc: PollerProcess) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            async with http.get(f"{proc.url}/readyz") as resp:  # type: ignore[attr-defined]
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        assert proc.alive, proc.tail()
        assert time.monotonic() < deadline, f"{proc.name} not ready within 60 s:\n{proc.tail()}"
        await asyncio.sleep(0.2)


async def every_schedule(api: Api, key: dict[str, str], status: str) -> list[dict[str, Any]]:
    found, cursor = [], None
    while True:
        query = f"/v1/schedules?tag={TAG}&status={status}&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        page = await call(api, "GET", query, key)
        found += page["schedules"]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def pause_records(api: Api, key: dict[str, str]) -> Counter[str]:
    """How many schedule.pause records the client's audit trail holds per schedule."""
    counted: Counter[str] = Counter()
    cursor = None
    while True:
        page = await call(api, "GET", "/v1/audit?limit=1000" + (f"&cursor={cursor}" if cursor else ""), key)
        counted.update(r["target"] for r in page["records"] if r["action"] == "schedule.pause")
        cursor = page["next_cursor"]
        if cursor is None:
            return counted


@pytest.mark.exclusive  # 10,000 creates and pauses load the one Cassandra: run alone, not beside timing scenarios
@pytest.mark.timeout(600)
async def test_o7_bulk_pause_of_10000_completes_exactly_once_across_a_replica_kill(
    scenario: Scenario, api: Api
) -> None:
    sc = scenario
    key = await register(api, "o7", 4)
    started = time.monotonic()
    for offset in range(0, COUNT, 1000):  # a day ahead and more: nothing fires meanwhile
        items = [
            {
                "delay_s": 86400 + offset + i,
                "callback": {"type": "http", "url": "http://127.0.0.1:9/o7"},
                "tags": {"wave": "o7"},
            }
            for i in range(1000)
        ]
        made = await call(api, "POST", "/v1/schedules/batch", key, {"schedules": items})
        assert all(r["status"] == "scheduled" for r in made["results"]), made["results"][:3]
    created_s = time.monotonic() - started

    first = api_process(sc, "api-a")
    async with aiohttp.ClientSession() as http:
        await ready(http, first)
        async with http.post(
            f"{first.url}/v1/bulk-jobs", headers=key, json={"action": "pause", "filter": {"tag": TAG}}
        ) as resp:  # type: ignore[attr-defined]
            assert resp.status == 202, await resp.text()
            job_id = (await resp.json())["job_id"]
        job_url = f"{first.url}/v1/bulk-jobs/{job_id}"  # type: ignore[attr-defined]
        deadline = time.monotonic() + 120
        while (job := await get(http, job_url, key))["matched"] < COUNT // 4:
            assert job["state"] in ("queued", "running") and time.monotonic() < deadline, job
            await asyncio.sleep(0.05)
        before_kill = job
        killed_at = first.kill9()  # mid-job, its lease held

        second = api_process(sc, "api-b")
        await ready(http, second)
        job_url = f"{second.url}/v1/bulk-jobs/{job_id}"  # type: ignore[attr-defined]
        deadline = time.monotonic() + 300
        while (job := await get(http, job_url, key))["state"] != "done":
            assert job["state"] == "running" or job["state"] == "queued", job
            assert time.monotonic() < deadline, job
            await asyncio.sleep(0.5)
        done_s = time.time() - killed_at
    taken = second.find("bulk_job_taken")

    paused = await every_schedule(api, key, "paused")
    still = await every_schedule(api, key, "scheduled")
    records = await pause_records(api, key)
    report(
        "O7 bulk pause of 10,000 by tag, the running replica killed with SIGKILL mid-job",
        created_s=round(created_s, 1),
        matched_before_kill=before_kill["matched"],
        done_after_kill_s=round(done_s, 1),
        matched=job["matched"],
        changed=job["changed"],
        unchanged=job["unchanged"],
        failed=job["failed"],
        paused=len(paused),
        pause_records=sum(records.values()),
    )
    assert job["matched"] == COUNT and job["failed"] == 0, job
    assert job["changed"] + job["unchanged"] == COUNT, job
    assert len(paused) == COUNT and not still
    # Exactly once: each schedule paused by one change (created at version 1, paused at 2), recorded at most
    # once (a record of the killed replica's last changes may be lost with it; a change never twice).
    assert Counter(s["version"] for s in paused) == {2: COUNT}
    assert max(records.values()) == 1 and len(records) >= COUNT - 200, len(records)
    # The second replica took the job on from the first one's last saved page, not from the start.
    assert taken and taken[0]["previous"] and taken[0]["cursor"], taken
    assert second.alive and not second.errors(), second.errors()[:3]
