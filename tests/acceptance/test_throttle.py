"""Throttle policies end to end (issue 5, done-when 3 and 4): two real poller processes deliver the events
of one policy; the consumer (this test) releases each event through the API 50 ms after it arrives, then
stops releasing, and the policy's timeout releases the rest.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.acceptance.api_client import Api, call, event_ids, register
from tests.acceptance.harness import Delivery, Scenario, report, wait_placement, wait_until

pytestmark = pytest.mark.acceptance

EVENTS, SCHEDULES, LIMIT, TIMEOUT_S, RELEASED_BY_CONSUMER = 500, 4, 20, 3, 300


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    held = peak = 0
    for _, step in edges:
        held += step
        peak = max(peak, held)
    return peak


@pytest.mark.timeout(300)
async def test_s11_throttle_across_two_nodes(scenario: Scenario, api: Api) -> None:
    sc, r = scenario, scenario.receiver
    key = await register(api, "s11", 2)
    nodes = await sc.start_nodes(["n1", "n2"])
    await wait_placement(nodes, "s11/", {"s11/0", "s11/1"}, timeout_s=60, accept=lambda p: len(set(p.values())) == 2)
    policy = await call(
        api, "PUT", "/v1/throttle-policies/batch", key, {"max_in_flight": LIMIT, "release_timeout_s": TIMEOUT_S}
    )
    assert policy["max_in_flight"] == LIMIT

    # Schedules on both pollers (so on both nodes), each producing its share of the 500 events.
    per = EVENTS // SCHEDULES
    body = {"callback": {"type": "http", "url": r.endpoint("thr")}, "delay_s": 8, "events": per, "throttle": "batch"}
    made: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    while len(made[0]) < SCHEDULES // 2 or len(made[1]) < SCHEDULES // 2:
        created = await call(api, "POST", "/v1/schedules", key, body)
        poller = uuid.UUID(created["schedule_id"]).int % 2
        if len(made[poller]) < SCHEDULES // 2:
            made[poller].append(created)
        else:
            await call(api, "DELETE", f"/v1/schedules/{created['schedule_id']}", key)

    released: dict[str, float] = {}
    answered: dict[str, bool] = {}  # each release the consumer asked for: released, or already auto-released
    sampled: list[int] = []

    async def consumer() -> None:
        """Release each of the first events 50 ms after it arrives; the rest are never released."""
        seen: set[str] = set()
        tasks = []
        while True:
            for d in list(r.of("thr")):
                event = str(d.body.get("event_id"))
                if d.answered != 200 or event in seen:
                    continue
                seen.add(event)
                if len(seen) <= RELEASED_BY_CONSUMER:
                    tasks.append(asyncio.create_task(release(event, d.arrival)))
            await asyncio.sleep(0.005)

    async def release(event: str, arrival: float) -> None:
        await asyncio.sleep(max(0.0, arrival + 0.05 - time.time()))
        asked = time.time()  # the consumer lets go here; the token is freed a moment later
        answer = await call(api, "POST", f"/v1/events/{event}/release", key)
        answered[event] = answer["released"]
        if answer["released"]:
            released[event] = asked

    async def sampler() -> None:
        while True:
            sampled.append((await call(api, "GET", "/v1/throttle-policies/batch", key))["in_flight"])
            await asyncio.sleep(0.1)

    background = [asyncio.create_task(consumer()), asyncio.create_task(sampler())]
    try:
        await wait_until(lambda: len(event_ids(r.of("thr"))) >= EVENTS, 180, lambda: f"{len(event_ids(r.of('thr')))}")
        await asyncio.sleep(0.5)
    finally:
        for task in background:
            task.cancel()

    firsts: dict[str, Delivery] = {}
    for d in sorted(r.of("thr"), key=lambda d: d.arrival):
        firsts.setdefault(str(d.body.get("event_id")), d)
    # The consumer holds an event from its arrival until it asks to release it, or, for those it never
    # releases, until the timeout: no earlier than the token was taken (logged by the node) + the timeout.
    # Both ends are at or before the token was freed, so the overlap cannot exceed the tokens held.
    timed_out = {
        str(e["event_id"]): datetime.fromisoformat(str(e["taken_at"])).timestamp() + TIMEOUT_S
        for n in nodes
        for e in n.find("throttle_auto_released")
    }
    # An event neither released nor timed out yet is still held.
    intervals = [(d.arrival, released.get(e) or timed_out.get(e, math.inf)) for e, d in firsts.items()]
    auto = len(timed_out)
    expanded = {n.node_id: len(n.find("fire_expanded")) for n in nodes}
    report(
        "S11 throttle: 500 events, max_in_flight 20, 2 nodes",
        events=len(firsts),
        max_held_observed=max_overlap(intervals),
        max_in_flight_sampled=max(sampled or [0]),
        released_by_consumer=len(released),
        asked_after_auto_release=len(answered) - len(released),
        auto_released=auto,
        triggers_expanded=expanded,
        duration_s=round(max(d.arrival for d in firsts.values()) - min(d.arrival for d in firsts.values()), 1),
    )

    ids = {f"{m['fire_id']}:{i}" for group in made.values() for m in group for i in range(per)}
    assert set(firsts) == ids  # every event of every schedule, and nothing else
    assert max_overlap(intervals) <= LIMIT
    assert max(sampled) <= LIMIT
    assert all(count >= 1 for count in expanded.values()), expanded  # both nodes served the one policy
    # Every release the consumer asked for was answered. One answered "not released" must be one the node
    # had released itself at the timeout: under load (CI, 2 cores) a release asked 50 ms after arrival can
    # reach the API after TIMEOUT_S, and both answers are right then.
    assert len(answered) == RELEASED_BY_CONSUMER
    assert all(event in timed_out for event, done in answered.items() if not done), answered
    assert auto >= EVENTS - RELEASED_BY_CONSUMER - LIMIT  # the silent consumer's events timed out
    assert all(n.alive for n in nodes) and not any(n.errors() for n in nodes)
