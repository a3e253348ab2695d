"""Issue 9: one tenant's largest batch trigger must not cost another tenant anything.

The biggest fire the API's amplification limits accept (``TICKD_MAX_EVENTS_PER_MINUTE`` events whose
payloads together fill ``TICKD_MAX_FIRE_BYTES``, all due at once) fires on a real poller node while a
second tenant's schedules come due around it: the node stays alive, every event arrives, and the other
tenant's fires due while the big fire's events are being sent arrive among them, not queued behind them.
Lateness is reported, not asserted (``make bench-isolation`` and ``make bench-fire`` measure it)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.acceptance.api_client import SETTINGS, Api, create_client, create_many, create_schedule
from tests.acceptance.harness import (
    Scenario,
    delivered_all,
    http_arrivals,
    instances_of,
    ms,
    now_utc,
    report,
    spread,
    tally,
    wait_placement,
    wait_until,
)
from tickd.schema.model import HttpCallback, Options
from tickd.service import budgets
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.acceptance


def _largest_allowed_fire(limits: ApiSettings) -> tuple[int, bytes]:
    """Events and payload of the largest fire the API accepts with its default limits (checked by the
    API's own budget function, so a change of the limits changes this test's load with them)."""
    events = min(limits.max_events, limits.max_events_per_minute)
    size = limits.max_fire_bytes // events
    payload = json.dumps({"pad": "x" * (size - 11)}).encode()
    assert len(payload) == size
    options = Options(events=events, window_ms=0)
    budgets.check(options, len(payload), limits)  # raises if the API would refuse it
    return events, payload


@pytest.mark.timeout(300)
async def test_s15_largest_batch_trigger_beside_another_tenant(scenario: Scenario, api: Api) -> None:
    sc = scenario
    r = sc.receiver
    events, payload = _largest_allowed_fire(SETTINGS)
    big = await create_client(api, "s15big", 2)
    other = await create_client(api, "s15other", 2)
    [node] = await sc.start_nodes(["n1"])
    await wait_placement([node], "s15", instances_of(big) | instances_of(other), timeout_s=45)

    fire_at = ms(now_utc() + timedelta(seconds=15))
    # The trigger is a POST like any other: the API's own checks accept it (json.dumps, as aiohttp sends it,
    # gives the payload's bytes back exactly, so the fire is exactly the largest allowed).
    trigger = await create_schedule(
        api, big, fire_at, HttpCallback(url=r.endpoint("big")), events=events, payload=json.loads(payload)
    )
    assert trigger.schedule.payload == payload and trigger.schedule.options is not None
    assert (trigger.schedule.options.events, trigger.schedule.options.window_ms) == (events, 0)
    made = await create_many(
        api,
        other,
        spread(300, fire_at - timedelta(seconds=5), fire_at + timedelta(seconds=25), seed=15),
        HttpCallback(url=r.endpoint("other")),
    )

    await delivered_all(made, lambda: {d.fire_id for d in r.of("other")}, timeout_s=120)

    def big_events() -> set[str]:
        return {str(d.body.get("event_id")) for d in r.of("big")}

    await wait_until(lambda: len(big_events()) >= events, 180, lambda: f"{len(big_events())} of {events} events")
    t = tally(made, http_arrivals(r.of("other")))
    big_arrivals = sorted(d.arrival for d in r.of("big"))
    report(
        "S15 largest batch trigger beside another tenant (1 node)",
        events=events,
        payload_bytes=len(payload),
        big_delivered=len(big_events()),
        big_spread_s=round(big_arrivals[-1] - big_arrivals[0], 1),
        **{f"other_{k}": v for k, v in t.fields().items()},
        node_rss_mb=round(node.rss_mb(), 1),
    )

    assert node.alive, node.tail()
    assert not t.missing and not t.duplicated, t.fields()
    assert len(big_events()) == events
    assert not t.early, t.early[:5]
    # Order, not speed: the other tenant's fires due in the first half of the big fire's sending (half of
    # ~48 s here, so ~150 of its 300) each arrive before the big fire's last event. A node whose slots the
    # big fire held would send them only after its 10,000 events, i.e. after that last event.
    first_big, last_big = big_arrivals[0], big_arrivals[-1]
    arrived = dict(http_arrivals(r.of("other")))
    during = [m for m in made if first_big <= m.fire_ts <= (first_big + last_big) / 2]
    assert during, f"no fire of the other tenant was due while the big fire was sent ({first_big}..{last_big})"
    queued = [m.fire_id for m in during if arrived[m.fire_id] > last_big]
    assert not queued, f"{len(queued)} of {len(during)} fires due during the big fire arrived after its last event"
