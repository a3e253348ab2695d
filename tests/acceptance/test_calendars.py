"""Calendars end to end (issue 27, item 4): through the API (in-process, on the scenario's keyspace) and
real poller processes on Cassandra, counted by an HTTP subscriber.

K1: an every-2s schedule names calendar "quiet", a blackout of a few seconds ahead. A new version of the
calendar adds a second blackout while the schedule fires, and the node owning the schedule's instance is
killed with SIGKILL inside it; the other node takes the instance over. No occurrence inside a blackout is
delivered, every other one on the 2 s grid is, and the runs name the calendar and the version that
excluded each stretch.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.acceptance.api_client import Api, call
from tests.acceptance.harness import Scenario, gather_status, report, wait_until
from tests.acceptance.test_operations import Subscriber, errors, nominal_ts, runs, setup, sub, ts
from tickd.schema import timing

pytestmark = pytest.mark.acceptance
__all__ = ["sub"]  # the fixture, used by name

# The calendar's new version reaches every node within TICKD_CLIENTS_REFRESH_S (5 s by default): a blackout
# added starts this long after the change is answered, so no node can still be reading the old version.
LEAD_S = 12


def wall(second: int) -> str:
    """A Unix second as a calendar's local wall time (the calendar is in UTC)."""
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def blackout(start: int, length_s: int) -> tuple[int, int]:
    return start, start + length_s


def as_range(span: tuple[int, int]) -> dict[str, str]:
    return {"from": wall(span[0]), "to": wall(span[1])}


@pytest.mark.timeout(300)
async def test_k1_calendar_blackouts_hold_across_a_change_and_a_node_kill(
    scenario: Scenario, api: Api, sub: Subscriber
) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "k1", ["n1", "n2"])
    first = blackout(int(time.time()) + LEAD_S, 8)
    await call(api, "PUT", "/v1/calendars/quiet", key, {"ranges": [as_range(first)]})
    body: dict[str, Any] = {
        "every": "2s",
        "calendars": ["quiet"],
        "callback": {"type": "http", "url": sub.endpoint("k")},
    }
    made = await call(api, "POST", "/v1/schedules", key, body)
    sid, grid0 = made["schedule_id"], ts(made["fire_at"])
    fired = lambda: {d.fire_id for d in sub.ok("k")}  # noqa: E731

    await wait_until(lambda: any(nominal_ts(f) >= first[1] for f in fired()), 60, "no fire after the first blackout")
    second = blackout(int(time.time()) + LEAD_S, 10)
    v2 = await call(api, "PUT", "/v1/calendars/quiet", key, {"ranges": [as_range(first), as_range(second)]})
    await wait_until(lambda: time.time() >= second[0] + 2, LEAD_S + 5, "the clock did not reach the second blackout")
    instance = f"k1/{timing.poller_id_for(uuid.UUID(sid), 2)}"
    owner = (await gather_status(nodes, "k1/"))[instance][0]
    victim = next(n for n in nodes if n.node_id == owner)
    killed_at = victim.kill9()
    survivor = next(n for n in nodes if n is not victim)
    observed_until = second[1] + 10
    await wait_until(
        lambda: any(nominal_ts(f) >= observed_until for f in fired()), 150, "no fire 10 s after the second blackout"
    )

    delivered = sorted({nominal_ts(f) for f in fired()})
    blackouts = [first, second]

    def excluded(t: float) -> bool:
        return any(start <= t < end for start, end in blackouts)

    grid = [grid0 + 2 * i for i in range(int((observed_until - grid0) / 2) + 1)]
    allowed = [t for t in grid if not excluded(t)]
    skipped_runs = [r for r in await runs(api, key, sid) if r["status"] == "skipped"]
    report(
        "K1 calendars: every 2s through two blackouts, the second added while it fires, its owner killed in it",
        delivered=len(delivered),
        delivered_in_a_blackout=len([t for t in delivered if excluded(t)]),
        allowed_not_delivered=len([t for t in allowed if t not in delivered]),
        skipped_runs=len(skipped_runs),
        killed_in_blackout_s=round(killed_at - second[0], 3),
    )

    assert v2["version"] == 2
    # No occurrence inside a blackout is delivered; every one outside them, up to the end observed, is.
    assert not [t for t in delivered if excluded(t)], (blackouts, delivered)
    assert [t for t in allowed if t not in delivered] == [], (blackouts, delivered)
    assert all(round((t - grid0) * 1000) % 2000 == 0 for t in delivered), delivered  # on the 2 s grid
    # The runs say which calendar and version excluded each stretch (each from its first occurrence).
    reasons = [r["last_error"] for r in skipped_runs]
    assert any(r.startswith("skipped: calendar quiet v1") for r in reasons), reasons
    assert any(r.startswith("skipped: calendar quiet v2") for r in reasons), reasons
    assert all(excluded(ts(r["nominal_at"])) for r in skipped_runs), skipped_runs
    assert survivor.alive and not errors([survivor]), errors([survivor])[:3]
