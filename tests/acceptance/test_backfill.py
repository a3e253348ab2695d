"""Backfill end to end (issue 27, item 2): a recurring schedule through the API (in-process, on the
scenario's keyspace), its backfill run by a real ``tickd-api`` process, two real poller processes on
Cassandra, counted by an HTTP subscriber.

B1: an every-2s schedule made with no start (its timeline reaches back before it was made) has fired a few
times; a backfill of the minute before it was made and of its own timeline so far runs at 5 fires a second,
and the poller node owning the schedule's instance is killed with SIGKILL once a few of the backfill's
fires are out. The other node takes the instance over after the lease: every occurrence from before the
schedule was made is delivered, each under its own backfill fire id (a repeat only with the same id,
across the kill); none of the timeline's is fired again by the backfill; the job ends done, counting the
first fired and the second left alone; the schedule's runs mark each backfilled occurrence; the timeline
goes on after the handover.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import aiohttp
import pytest

from tests.acceptance.api_client import Api, call
from tests.acceptance.harness import Scenario, gather_status, report, wait_until
from tests.acceptance.test_bulk import api_process, get, ready
from tests.acceptance.test_operations import Subscriber, iso, nominal_ts, runs, setup, sub, ts
from tickd.schema import timing

pytestmark = pytest.mark.acceptance
__all__ = ["sub"]  # the fixture, used by name

EVERY_S = 2
BEFORE_S = 60  # how far before the schedule was made the backfill reaches: 30 occurrences


@pytest.mark.timeout(300)
async def test_b1_backfill_fires_each_past_occurrence_once_across_a_node_kill(
    scenario: Scenario, api: Api, sub: Subscriber
) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "b1", ["n1", "n2"])
    body = {"every": f"{EVERY_S}s", "callback": {"type": "http", "url": sub.endpoint("bf")}}
    made: dict[str, Any] = await call(api, "POST", "/v1/schedules", key, body)
    sid, anchor = made["schedule_id"], ts(made["fire_at"])  # its first occurrence, one interval after now

    def firsts(backfill: bool) -> dict[float, float]:
        """Nominal time -> first arrival of each occurrence delivered by the backfill (or the timeline)."""
        out: dict[float, float] = {}
        for d in sorted(sub.ok("bf"), key=lambda d: d.arrival):
            if d.fire_id.endswith(":backfill") == backfill:
                out.setdefault(int(d.fire_id.split(":")[1]) / 1000, d.arrival)
        return out

    await wait_until(lambda: len(firsts(False)) >= 3, 60, "the timeline did not fire")
    runner = api_process(sc, "api-b1")
    async with aiohttp.ClientSession() as http:
        await ready(http, runner)
        start, end = anchor - BEFORE_S, time.time()
        span = {"from": iso(start), "to": iso(end), "rate_per_s": 5}
        async with http.post(f"{runner.url}/v1/schedules/{sid}/backfill", headers=key, json=span) as resp:  # type: ignore[attr-defined]
            assert resp.status == 202, await resp.text()
            job_id = (await resp.json())["job_id"]
        job_url = f"{runner.url}/v1/bulk-jobs/{job_id}"  # type: ignore[attr-defined]

        await wait_until(lambda: len(firsts(True)) >= 5, 60, "no backfill fire went out")
        poller = f"b1/{timing.poller_id_for(uuid.UUID(sid), 2)}"
        owner = (await gather_status(nodes, "b1/"))[poller][0]
        victim = next(n for n in nodes if n.node_id == owner)
        killed_at = victim.kill9()
        delivered_at_kill = len(firsts(True))

        deadline = time.monotonic() + 120
        while (job := await get(http, job_url, key))["state"] not in ("done", "cancelled"):
            assert time.monotonic() < deadline, f"the backfill did not finish: {job}"
            await asyncio.sleep(0.5)

    # The grid before it was made: up to the one at its creation (the one before its first, one interval
    # after it was made), which a backfill leaves to the timeline like any since (it has no run).
    before = [anchor - EVERY_S * i for i in range(BEFORE_S // EVERY_S, 1, -1)]
    await wait_until(
        lambda: set(before) <= set(firsts(True)),
        120,
        lambda: f"backfill fires not delivered: {sorted(set(before) - set(firsts(True)))} (job {job})",
    )
    await wait_until(lambda: any(n > killed_at + 10 for n in firsts(False)), 120, "the timeline did not go on")
    backfilled, live = firsts(True), firsts(False)
    by_fire = Counter(d.fire_id for d in sub.ok("bf") if d.fire_id.endswith(":backfill"))
    marked = {ts(r["nominal_at"]) for r in await runs(api, key, sid) if r.get("backfill")}
    report(
        "B1 backfill: every 2s schedule, 60 s before it was made and its own timeline, 5 a second, the "
        "owner of its instance killed with SIGKILL mid-way",
        occurrences_before=len(before),
        job=f"{job['state']} matched {job['matched']} changed {job['changed']} unchanged {job['unchanged']}",
        delivered_at_kill=delivered_at_kill,
        backfill_delivered=len(backfilled),
        repeats_same_fire_id=sum(n - 1 for n in by_fire.values()),
        live_delivered=len(live),
        runs_marked=len(marked),
    )
    assert job["state"] == "done" and job["failed"] == 0, job
    # Fired: the occurrences from before it was made, each once as far as the job counts; left alone: its
    # timeline's, sent (or on its way) when the job came to them.
    assert job["changed"] == len(before) and job["unchanged"] == job["matched"] - len(before), job
    assert sorted(backfilled) == before, (sorted(backfilled), before)  # nothing the timeline had
    assert not set(backfilled) & set(live)
    assert all(
        fire_id.endswith(":backfill") and nominal_ts(fire_id.removesuffix(":backfill")) in before for fire_id in by_fire
    )
    assert marked >= set(before), sorted(set(before) - marked)
