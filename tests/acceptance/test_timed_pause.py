"""Timed pause end to end (issue 27, item 6): through the API (in-process, on the scenario's keyspace) and
real poller processes on Cassandra, counted by an HTTP subscriber.

T1: an every-2s schedule is paused for 12 s with a note, and the node owning its instance is killed with
SIGKILL right after the pause is answered: the other node takes the instance over and, at the pause's
end (or as soon as it holds the instance, if that is later), resumes the schedule by itself. Nothing from
the paused occurrence on goes out before ``until``; the occurrences that fell while paused are recorded
skipped; the schedule fires again after it; GET shows it scheduled with no pause; its audit trail says
tickd resumed it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.acceptance.api_client import Api, call
from tests.acceptance.harness import Scenario, gather_status, report, wait_until
from tests.acceptance.test_operations import Subscriber, errors, iso, nominal_ts, runs, setup, sub, ts
from tickd.schema import timing

pytestmark = pytest.mark.acceptance
__all__ = ["sub"]  # the fixture, used by name

PAUSE_S = 12
# The subscriber's clock and the nodes' are this machine's; a request is seen a little after it is sent.
TOLERANCE_S = 0.5


@pytest.mark.timeout(300)
async def test_t1_a_timed_pause_ends_by_itself_across_a_node_kill(
    scenario: Scenario, api: Api, sub: Subscriber
) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "t1", ["n1", "n2"])
    body = {"every": "2s", "callback": {"type": "http", "url": sub.endpoint("t1")}}
    made: dict[str, Any] = await call(api, "POST", "/v1/schedules", key, body)
    sid = made["schedule_id"]
    poller = timing.poller_id_for(uuid.UUID(sid), 2)

    def fired() -> dict[float, float]:
        """Nominal time -> first arrival of each occurrence delivered."""
        out: dict[float, float] = {}
        for d in sorted(sub.ok("t1"), key=lambda d: d.arrival):
            out.setdefault(nominal_ts(d.fire_id), d.arrival)
        return out

    await wait_until(lambda: len(fired()) >= 3, 60, "no fires before the pause")
    until = time.time() + PAUSE_S
    paused = await call(
        api, "POST", f"/v1/schedules/{sid}/pause", key, {"until": iso(until), "note": "vendor maintenance"}
    )
    assert paused["status"] == "paused" and paused["pause"]["note"] == "vendor maintenance", paused
    until = ts(paused["pause"]["until"])  # as stored (to the ms)
    stopped_at = ts(paused["fire_at"])  # the occurrence the pause stopped at
    owner = (await gather_status(nodes, "t1/"))[f"t1/{poller}"][0]
    victim = next(n for n in nodes if n.node_id == owner)
    killed_at = victim.kill9()
    survivor = next(n for n in nodes if n is not victim)

    await wait_until(lambda: any(n >= until for n in fired()), 180, "the schedule did not fire again after its pause")
    resumed_first = min(a for n, a in fired().items() if n >= until)
    await wait_until(lambda: len([n for n in fired() if n >= until]) >= 3, 60, "it did not go on firing")
    current = await call(api, "GET", f"/v1/schedules/{sid}", key)
    skipped = sorted(ts(r["nominal_at"]) for r in await runs(api, key, sid) if r["status"] == "skipped")
    trail = (await call(api, "GET", f"/v1/schedules/{sid}/audit", key))["records"]
    early = sorted((n, a) for n, a in fired().items() if n >= stopped_at and a < until - TOLERANCE_S)
    between = [stopped_at + 2 * i for i in range(int((until - stopped_at) / 2) + 1) if stopped_at + 2 * i < until]
    report(
        "T1 timed pause: every 2s, paused 12 s, its owner killed with SIGKILL right after",
        handover_s=round(resumed_first - killed_at, 1),
        late_after_until_s=round(resumed_first - until, 1),
        skipped=len(skipped),
        paused_occurrences=len(between),
        early=len(early),
    )

    assert early == [], early  # nothing from the paused occurrence on went out before until
    assert skipped == between, (skipped, between)  # what fell while paused, and only that, recorded skipped
    assert current["status"] == "scheduled" and "pause" not in current, current
    actions = [r["action"] for r in trail]
    assert "schedule.resume_at_until" in actions and "schedule.pause" in actions, actions
    by_tickd = next(r for r in trail if r["action"] == "schedule.resume_at_until")
    assert by_tickd["actor"] == "tickd", by_tickd
    assert survivor.alive and not errors([survivor]), errors([survivor])[:3]
