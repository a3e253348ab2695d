"""Debounce by key end to end (issue 27, item 5): through the API (in-process, on the scenario's keyspace)
and two real poller processes on Cassandra, counted by an HTTP subscriber.

D1: three keys, each PUT in a burst through ``PUT /v1/schedules/by-key/{key}`` with a debounce:
- ``typing``: 8 PUTs 0.3 s apart with a 1 s window (inside the 2 s mutation guard, where a plain PUT is 409
  ``fire_imminent``): every PUT is answered 2xx, and the key fires with the last PUT's payload. A version a
  later PUT replaced may go out only if it was already due when that PUT was answered (the one race).
- ``feed``: 16 PUTs 0.4 s apart with a 1 s window and ``max_wait_s`` 2: the burst never pauses for a
  window, yet it fires during the burst (the cap), and its last PUT's payload goes out after it.
- ``lead``: ``edge: leading``: the first PUT fires before the second is sent (waited for); the burst's
  5 later PUTs, 0.3 s apart, make a trailing fire with the last payload.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.acceptance.api_client import Api
from tests.acceptance.harness import Scenario, report, wait_until
from tests.acceptance.test_operations import Subscriber, errors, nominal_ts, setup, sub

pytestmark = pytest.mark.acceptance
__all__ = ["sub"]  # the fixture, used by name

# The nodes share this machine's clock, and a PUT's answer is seen a moment after the PUT landed (its
# confirmation, the response): no more than this between the two moments compared.
TOLERANCE_S = 0.3


async def burst(
    api: Api,
    key: dict[str, str],
    name: str,
    url: str,
    puts: int,
    gap_s: float,
    debounce: dict[str, Any],
    start: int = 0,
) -> list[tuple[int, float, int]]:
    """PUT ``name`` ``puts`` times, ``gap_s`` apart, payloads numbered from ``start``: (payload number,
    answered at, status) per PUT."""
    answered = []
    for n in range(start, start + puts):
        body = {"callback": {"type": "http", "url": url}, "payload": {"put": n}, "debounce": debounce}
        resp = await api.put(f"/v1/schedules/by-key/{name}", json=body, headers=key)
        await resp.read()
        answered.append((n, time.time(), resp.status))
        await asyncio.sleep(gap_s)
    return answered


def delivered(sub: Subscriber, name: str) -> list[tuple[int, float]]:
    """(payload number, first arrival) of each fire delivered, in arrival order."""
    return [(n, arrival) for n, arrival, _ in fires_of(sub, name)]


def fires_of(sub: Subscriber, name: str) -> list[tuple[int, float, float]]:
    """(payload number, first arrival, fire time from its fire id) of each fire delivered, by arrival."""
    first: dict[str, tuple[int, float, float]] = {}
    for d in sorted(sub.ok(name), key=lambda d: d.arrival):
        first.setdefault(d.fire_id, (int(d.body["payload"]["put"]), d.arrival, nominal_ts(d.fire_id)))
    return sorted(first.values(), key=lambda f: f[1])


def superseded_after_answer(fires: list[tuple[int, float, float]], answers: list[tuple[int, float, int]]) -> list[Any]:
    """Delivered versions that a later PUT had replaced before they were due, beyond the tolerance: a
    version pushed back that went out anyway. A version already due (so on its way out) when the next
    PUT landed may still arrive: that is the one race."""
    answered_at = {n: at for n, at, _ in answers}
    return [
        (n, round(due - answered_at[n + 1], 3))
        for n, _, due in fires
        if n + 1 in answered_at and due > answered_at[n + 1] + TOLERANCE_S
    ]


@pytest.mark.timeout(240)
async def test_d1_debounced_bursts_fire_once_with_the_latest_payload(
    scenario: Scenario, api: Api, sub: Subscriber
) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "d1", ["n1", "n2"])

    typing = await burst(api, key, "typing", sub.endpoint("typing"), 8, 0.3, {"window_s": 1})
    await wait_until(lambda: any(n == 7 for n, _ in delivered(sub, "typing")), 60, "typing: the last PUT never fired")

    feed = await burst(api, key, "feed", sub.endpoint("feed"), 16, 0.4, {"window_s": 1, "max_wait_s": 2})
    feed_end = feed[-1][1]
    await wait_until(lambda: any(n == 15 for n, _ in delivered(sub, "feed")), 60, "feed: the last PUT never fired")

    lead_url, lead_body = sub.endpoint("lead"), {"window_s": 2, "edge": "leading"}
    first = await burst(api, key, "lead", lead_url, 1, 0, lead_body)
    await wait_until(lambda: bool(delivered(sub, "lead")), 30, "lead: the leading PUT did not fire at once")
    rest = await burst(api, key, "lead", lead_url, 5, 0.3, lead_body, start=1)
    await wait_until(lambda: any(n == 5 for n, _ in delivered(sub, "lead")), 60, "lead: the trailing fire never came")
    await asyncio.sleep(3)  # room for a stray extra fire to show up before counting

    typing_fires, feed_fires, lead_fires = delivered(sub, "typing"), delivered(sub, "feed"), delivered(sub, "lead")
    typing_due, feed_due, lead_due = fires_of(sub, "typing"), fires_of(sub, "feed"), fires_of(sub, "lead")
    report(
        "D1 debounce by key (2 nodes)",
        typing_puts=len(typing),
        typing_fires=[n for n, _ in typing_fires],
        typing_last_after_last_put_s=round(typing_fires[-1][1] - typing[-1][1], 3),
        feed_puts=len(feed),
        feed_fires=[n for n, _ in feed_fires],
        feed_fires_during_burst=len([1 for _, at in feed_fires if at < feed_end]),
        lead_fires=[n for n, _ in lead_fires],
    )

    assert {status for _, _, status in typing + feed + first + rest} <= {200, 201}, typing + feed + first + rest
    # typing: the last PUT's payload went out, after the last PUT; a replaced version only in the race.
    assert typing_fires[-1][0] == 7 and typing_fires[-1][1] > typing[-1][1], typing_fires
    assert superseded_after_answer(typing_due, typing) == [], (typing_due, typing)
    assert len(typing_fires) < len(typing), typing_fires  # coalesced: not one fire per PUT
    # feed: the cap made it fire while PUTs kept coming, and the last PUT's payload went out after it.
    assert any(at < feed_end for _, at in feed_fires), (feed_fires, feed_end)
    assert feed_fires[-1][0] == 15 and feed_fires[-1][1] > feed_end, feed_fires
    assert superseded_after_answer(feed_due, feed) == [], (feed_due, feed)
    # lead: the first PUT went out before the second was sent; the rest made one trailing fire, the last.
    assert lead_fires[0][0] == 0 and lead_fires[0][1] < rest[0][1], (lead_fires, rest)
    assert lead_fires[-1][0] == 5 and lead_fires[-1][1] > rest[-1][1], lead_fires
    assert superseded_after_answer(lead_due[1:], rest) == [], (lead_due, rest)
    assert not errors(nodes), errors(nodes)[:3]
