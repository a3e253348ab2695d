"""Operations on live schedules, end to end: through the API (in-process, on the scenario's keyspace) and
real poller processes, counted by an HTTP subscriber that also records the ``webhook-id`` header.

O1 a dead letter redriven is delivered once more with its original fire id (a one-time schedule refused
with a 4xx, and an occurrence of a recurring one that ran out of attempts); a second redrive writes
nothing. O2 a paused recurring schedule fires nothing once the pause is answered, shows what it skipped,
and goes on from the resume time. O3 twenty concurrent upserts of one business key leave one schedule
and only the last answered version fires. O4 a trigger fires now with its own fire id and leaves the
schedule's time as it was. O6 a recurring schedule failing with pause_after_failures=3 is auto-paused
once across a SIGKILL of its owner, and the client is notified once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from tests.acceptance.api_client import Api, call, register
from tests.acceptance.harness import (
    Delivery,
    PollerProcess,
    Receiver,
    Scenario,
    gather_status,
    report,
    wait_placement,
    wait_until,
)
from tickd.schema import timing

pytestmark = pytest.mark.acceptance

# Failing callbacks run out of attempts in about a second: 3 attempts, backoff 0.2 s up to 0.5 s.
FAST_RETRIES = {
    "TICKD_CALLBACK_MAX_ATTEMPTS": "3",
    "TICKD_CALLBACK_BACKOFF_BASE_S": "0.2",
    "TICKD_CALLBACK_BACKOFF_CAP_S": "0.5",
}
GUARD_S = 2.0  # TICKD_MUTATION_GUARD_S, the API's and the pollers' default


# --------------------------------------------------------------------------- a subscriber that can refuse


@dataclass
class Signed(Delivery):
    webhook_id: str | None = None


class Subscriber(Receiver):
    """The harness's receiver, plus: an endpoint can be switched to answer a fixed status (a 4xx the
    poller does not retry, or a 503 it retries until attempts run out) and back to 200 at any moment,
    and each delivery keeps its ``webhook-id`` header."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: dict[str, int] = {}

    def refuse(self, name: str, status: int) -> str:
        self.answer[name] = status
        return self.endpoint(name)

    def accept(self, name: str) -> None:
        self.answer.pop(name, None)

    async def _handle(self, request: web.Request) -> web.Response:
        arrival = time.time()
        name = request.match_info["endpoint"]
        try:
            body = json.loads(await request.read())
            fire_id = str(body["fire_id"])
        except (ValueError, KeyError, TypeError) as exc:
            self.bad_requests.append(f"{name}: {exc!r}")
            return web.Response(status=400)
        status = self.answer.get(name, 200)
        h = request.headers
        self.deliveries.append(
            Signed(
                name,
                fire_id,
                str(body.get("schedule_id")),
                str(body.get("client_id")),
                int(body.get("attempt", -1)),
                arrival,
                status,
                h.get("X-Tickd-Fire-Id"),
                h.get("X-Tickd-Attempt"),
                body,
                h.get("webhook-id"),
            )
        )
        return web.Response(status=status)

    def signed(self, name: str) -> list[Signed]:
        return [d for d in self.deliveries if d.endpoint == name and isinstance(d, Signed)]

    def ok(self, name: str, fire_id: str | None = None) -> list[Signed]:
        return [d for d in self.signed(name) if d.answered == 200 and fire_id in (None, d.fire_id)]


@pytest.fixture
async def sub(scenario: Scenario) -> AsyncIterator[Subscriber]:
    """The scenario's receiver swapped for a Subscriber (the scenario's teardown closes it)."""
    await scenario.receiver.close()
    subscriber = await Subscriber().start()
    scenario.receiver = subscriber
    yield subscriber


# --------------------------------------------------------------------------- helpers


def nominal_ts(fire_id: str) -> float:
    return int(fire_id.rsplit(":", 1)[1]) / 1000


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def same_fire_everywhere(d: Signed, fire_id: str) -> bool:
    """The body's fire id, ``X-Tickd-Fire-Id`` and ``webhook-id`` all name ``fire_id``."""
    return (d.fire_id, d.header_fire_id, d.webhook_id) == (fire_id, fire_id, fire_id)


async def setup(sc: Scenario, api: Api, client_id: str, nodes: list[str]) -> tuple[dict[str, str], list[PollerProcess]]:
    key = await register(api, client_id, len(nodes))
    procs = await sc.start_nodes(nodes, **FAST_RETRIES)
    want = {f"{client_id}/{i}" for i in range(len(nodes))}
    await wait_placement(procs, f"{client_id}/", want, timeout_s=45, stable_s=2 if len(nodes) > 1 else 0)
    return key, procs


async def request(api: Api, method: str, path: str, key: dict[str, str], body: Any = None) -> tuple[int, Any]:
    resp = await api.request(method, path, json=body, headers=key)
    return resp.status, await resp.json()


async def dead_letters(api: Api, key: dict[str, str], schedule_id: str) -> list[dict[str, Any]]:
    page = await call(api, "GET", f"/v1/dead-letters?schedule_id={schedule_id}", key)
    letters: list[dict[str, Any]] = page["dead_letters"]
    return letters


async def wait_letter(api: Api, key: dict[str, str], schedule_id: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        letters = await dead_letters(api, key, schedule_id)
        if letters:
            return letters
        await asyncio.sleep(0.3)
    raise AssertionError(f"no dead letter for {schedule_id} within {timeout_s:.0f} s")


async def runs(api: Api, key: dict[str, str], schedule_id: str) -> list[dict[str, Any]]:
    page = await call(api, "GET", f"/v1/schedules/{schedule_id}/runs?limit=1000", key)
    found: list[dict[str, Any]] = page["runs"]
    return found


def errors(procs: list[PollerProcess]) -> list[dict[str, Any]]:
    return [e for p in procs for e in p.errors()]


# --------------------------------------------------------------------------- O1 redrive


@pytest.mark.timeout(120)
async def test_o1_redrive_delivers_once_with_original_fire_id(scenario: Scenario, api: Api, sub: Subscriber) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "o1", ["n1"])

    # A one-time schedule whose subscriber refuses it with a 410 (not retried): one attempt, a dead letter.
    url = sub.refuse("once", 410)
    made = await call(
        api, "POST", "/v1/schedules", key, {"delay_s": 3, "payload": {"o": 1}, "callback": {"type": "http", "url": url}}
    )
    sid, fire_id = made["schedule_id"], made["fire_id"]
    [letter] = await wait_letter(api, key, sid)
    failed = await call(api, "GET", f"/v1/schedules/{sid}", key)
    refused = sub.signed("once")

    sub.accept("once")
    redrive_sent = time.time()
    first = await call(api, "POST", f"/v1/dead-letters/{letter['dead_letter_id']}/redrive", key)
    await wait_until(lambda: bool(sub.ok("once")), 20, "the redriven fire was not delivered")
    redrive_latency = sub.ok("once")[0].arrival - redrive_sent
    status, again = await request(api, "POST", f"/v1/dead-letters/{letter['dead_letter_id']}/redrive", key)
    await asyncio.sleep(5)
    after = await call(api, "GET", f"/v1/schedules/{sid}", key)
    delivered = sub.ok("once")

    # A recurring schedule every 2 s whose subscriber answers 503 until its occurrences run out of attempts.
    rurl = sub.refuse("rec", 503)
    rec = await call(
        api,
        "POST",
        "/v1/schedules",
        key,
        {"every": "2s", "payload": {"o": 2}, "callback": {"type": "http", "url": rurl}},
    )
    rid = rec["schedule_id"]
    letters = await wait_letter(api, key, rid)
    sub.accept("rec")
    accepted_at = time.time()
    oldest = min(letters, key=lambda x: x["failed_at"])
    occ_fire = oldest["fire_id"]
    occ_attempts = [d for d in sub.signed("rec") if d.fire_id == occ_fire]
    redriven = await call(api, "POST", f"/v1/dead-letters/{oldest['dead_letter_id']}/redrive", key)
    await wait_until(lambda: bool(sub.ok("rec", occ_fire)), 20, "the redriven occurrence was not delivered")
    later = lambda: sorted({d.fire_id for d in sub.ok("rec") if nominal_ts(d.fire_id) > accepted_at})  # noqa: E731
    await wait_until(lambda: len(later()) >= 3, 20, "the timeline did not go on after the redrive")
    rstatus, ragain = await request(api, "POST", f"/v1/dead-letters/{oldest['dead_letter_id']}/redrive", key)
    await asyncio.sleep(3)
    occ_runs = [r for r in await runs(api, key, rid) if r["fire_id"] == occ_fire]
    occ_ok = sub.ok("rec", occ_fire)
    following = later()
    rec_now = await call(api, "GET", f"/v1/schedules/{rid}", key)

    report(
        "O1 redrive: one-time 410 and recurring 503x3, redriven after the subscriber accepts (1 node)",
        one_time_refused=len(refused),
        one_time_delivered=f"{len(delivered)}/1",
        redrive_to_delivery_s=round(redrive_latency, 3),
        second_redrive_status=status,
        occurrence_attempts_before=len(occ_attempts),
        occurrence_delivered=f"{len(occ_ok)}/1",
        occurrence_second_redrive_status=rstatus,
        occurrences_after=len(following),
        letters_before_accept=len(letters),
    )

    # The one-time schedule: refused once, dead-lettered with its fire id, failed.
    assert len(refused) == 1 and refused[0].answered == 410, refused
    assert letter["fire_id"] == fire_id and letter["redriven_at"] is None, letter
    assert failed["status"] == "failed", failed
    # The redrive: marked, then delivered exactly once with the original fire id in body and headers.
    assert first["redriven_at"] is not None and first["redriven_due_at"] is not None, first
    assert len(delivered) == 1, [(d.fire_id, d.arrival) for d in delivered]
    assert same_fire_everywhere(delivered[0], fire_id), delivered[0]
    assert delivered[0].schedule_id == sid and delivered[0].body["payload"] == {"o": 1}
    assert after["status"] == "succeeded" and after["fire_id"] == fire_id, after
    # Redriving again: 200 with the same marks, and nothing more is written or delivered.
    assert status == 200, again
    assert (again["redriven_at"], again["redriven_due_at"]) == (first["redriven_at"], first["redriven_due_at"])
    assert len(sub.signed("once")) == 2, [(d.fire_id, d.answered) for d in sub.signed("once")]

    # The recurring schedule's occurrence: 3 attempts refused, redriven once, delivered once with its fire id.
    assert occ_fire.startswith(rid + ":") and len(occ_attempts) == 3, occ_attempts
    assert redriven["fire_id"] == occ_fire and redriven["redriven_at"] is not None, redriven
    assert len(occ_ok) == 1 and same_fire_everywhere(occ_ok[0], occ_fire), occ_ok
    assert rstatus == 200 and ragain["redriven_at"] == redriven["redriven_at"], ragain
    assert [r["status"] for r in occ_runs] == ["succeeded"], occ_runs
    # ... and the timeline went on untouched: later occurrences on the 2 s grid, the schedule still scheduled.
    first_nominal = ts(rec["fire_at"])
    assert all(round((nominal_ts(f) - first_nominal) * 1000) % 2000 == 0 for f in following), following
    assert rec_now["status"] == "scheduled" and ts(rec_now["fire_at"]) > nominal_ts(following[-1]) - 0.001
    assert not errors(nodes), errors(nodes)[:3]


# --------------------------------------------------------------------------- O2 pause / resume


@pytest.mark.timeout(120)
async def test_o2_pause_fires_nothing_then_resumes_from_now(scenario: Scenario, api: Api, sub: Subscriber) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "o2", ["n1", "n2"])
    url = sub.endpoint("tick")
    made = await call(
        api,
        "POST",
        "/v1/schedules",
        key,
        {"every": "2s", "payload": {"o": 2}, "callback": {"type": "http", "url": url}},
    )
    sid = made["schedule_id"]
    grid0 = ts(made["fire_at"])
    fired = lambda: {d.fire_id for d in sub.ok("tick")}  # noqa: E731
    await wait_until(lambda: len(fired()) >= 3, 30, "the every-2s schedule did not fire 3 times")

    paused = await call(api, "POST", f"/v1/schedules/{sid}/pause", key)
    paused_at = time.time()
    before = fired()
    await asyncio.sleep(10)
    during = [d for d in sub.signed("tick") if d.arrival > paused_at]
    again_status, again = await request(api, "POST", f"/v1/schedules/{sid}/pause", key)
    resume_sent = time.time()
    resumed = await call(api, "POST", f"/v1/schedules/{sid}/resume", key)
    resume_answered = time.time()
    skipped = [r for r in await runs(api, key, sid) if r["status"] == "skipped"]
    await wait_until(
        lambda: len([f for f in fired() if nominal_ts(f) >= resume_sent]) >= 3, 20, "no fires after resume"
    )
    after = sorted((nominal_ts(d.fire_id), d.arrival) for d in sub.ok("tick") if nominal_ts(d.fire_id) >= resume_sent)
    burst = [a for _, a in after if a - resume_answered < 1.5]
    all_nominals = sorted(nominal_ts(f) for f in fired())

    report(
        "O2 pause: every 2s paused 10 s then resumed (2 nodes)",
        fires_before_pause=len(before),
        arrived_after_pause=len(during),
        fired_after_pause_nominal=len([d for d in during if nominal_ts(d.fire_id) > paused_at]),
        skipped_runs=len(skipped),
        fires_after_resume=len(after),
        first_after_resume_s=round(after[0][0] - resume_sent, 3),
        arrived_within_1_5s_of_resume=len(burst),
    )

    assert paused["status"] == "paused" and again_status == 200 and again["status"] == "paused", again
    # The promise: once the pause is answered no occurrence fires; one the poller had already moved past
    # (fired before the pause) may still be arriving, so count by nominal time, and allow at most one such.
    assert not [d.fire_id for d in during if nominal_ts(d.fire_id) > paused_at], during
    assert len({d.fire_id for d in during}) <= 1, [(d.fire_id, d.arrival - paused_at) for d in during]
    # The occurrences that fell while it was paused are in its runs as skipped, none of them delivered.
    skipped_times = sorted(ts(r["nominal_at"]) for r in skipped)
    assert 4 <= len(skipped) <= 6, skipped
    assert all(paused_at - GUARD_S <= t <= resume_answered for t in skipped_times), (paused_at, skipped_times)
    assert not {r["fire_id"] for r in skipped} & fired(), skipped
    # Resumed: scheduled again, its next occurrence at or after the resume, on the original 2 s grid.
    assert resumed["status"] == "scheduled" and resume_sent - 0.001 <= ts(resumed["fire_at"]) <= resume_answered + 2.001
    assert after[0][0] == ts(resumed["fire_at"]), (after[0], resumed["fire_at"])
    assert all(round((t - grid0) * 1000) % 2000 == 0 for t in all_nominals), all_nominals
    # ... not a burst of the missed ones: each nominal time once, 2 s apart, at most one right at resume.
    assert [round(b[0] - a[0], 3) for a, b in itertools.pairwise(after)] == [2.0] * (len(after) - 1)
    assert len(burst) <= 1, burst
    assert not errors(nodes), errors(nodes)[:3]


# --------------------------------------------------------------------------- O3 upsert by key


@dataclass
class KeyStorm:
    """Twenty concurrent PUTs of one business key and what each was answered, in the order answered."""

    key: str
    answers: list[tuple[float, int, int, Any]]

    @property
    def ok(self) -> list[tuple[float, int, int, Any]]:
        return [a for a in sorted(self.answers, key=lambda a: a[0]) if a[2] in (200, 201)]

    @property
    def refused(self) -> list[tuple[float, int, int, Any]]:
        return [a for a in self.answers if a[2] not in (200, 201)]


@pytest.mark.timeout(120)
async def test_o3_bykey_concurrent_puts_one_schedule_last_fires(scenario: Scenario, api: Api, sub: Subscriber) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "o3", ["n1"])
    base = time.time() + 8
    storms = [KeyStorm(f"order-{k}", []) for k in range(3)]  # three keys, each stormed by 20 PUTs at once

    async def put(storm: KeyStorm, i: int) -> None:
        url = sub.endpoint(storm.key)
        body = {"fire_at": iso(base + i * 0.1), "payload": {"put": i}, "callback": {"type": "http", "url": url}}
        resp = await api.put(f"/v1/schedules/by-key/{storm.key}", json=body, headers=key)
        data = await resp.json()
        storm.answers.append((time.monotonic(), i, resp.status, data))

    started = time.monotonic()
    await asyncio.gather(*(put(storm, i) for i in range(20) for storm in storms))
    storm_s = time.monotonic() - started
    lives = [await call(api, "GET", f"/v1/schedules/by-key/{s.key}", key) for s in storms]
    await wait_until(lambda: all(sub.ok(s.key) for s in storms), 25, "a key's schedule did not fire")
    await asyncio.sleep(4)
    listed = await call(api, "GET", f"/v1/schedules?from={iso(base - 60)}&to={iso(base + 60)}&limit=1000", key)

    report(
        "O3 by-key: 3 keys x 20 concurrent PUTs (1 node)",
        storm_s=round(storm_s, 3),
        created=[len([a for a in s.ok if a[2] == 201]) for s in storms],
        replaced=[len([a for a in s.ok if a[2] == 200]) for s in storms],
        refused=[len(s.refused) for s in storms],
        refusal_codes=sorted({a[3].get("error", {}).get("code") for s in storms for a in s.refused}),
        last_answered_put=[s.ok[-1][1] for s in storms],
        live_put=[live["payload"].get("put") for live in lives],
        delivered=f"{sum(len(sub.signed(s.key)) for s in storms)}/{len(storms)}",
        delivered_put=[[d.body["payload"].get("put") for d in sub.signed(s.key)] for s in storms],
    )

    live_ids = set()
    for storm, live in zip(storms, lives, strict=True):
        ok, refused = storm.ok, storm.refused
        assert ok and all(a[2] == 409 for a in refused), [(a[1], a[2], a[3]) for a in refused]
        assert len([a for a in ok if a[2] == 201]) == 1, [(a[1], a[2]) for a in ok]
        # One live schedule for the key: every 2xx named it.
        assert {a[3]["schedule_id"] for a in ok} == {live["schedule_id"]}, storm.key
        live_ids.add(live["schedule_id"])
        # The live version is the last PUT answered 2xx; it alone fires, once, with its payload and fire id.
        last = ok[-1]
        assert live["payload"] == {"put": last[1]} and live["fire_id"] == last[3]["fire_id"], (storm.key, live, last)
        delivered = sub.signed(storm.key)
        assert len(delivered) == 1, [(d.fire_id, d.body.get("payload")) for d in delivered]
        assert delivered[0].answered == 200 and delivered[0].body["payload"] == {"put": last[1]}, delivered
        assert same_fire_everywhere(delivered[0], last[3]["fire_id"]), delivered[0]
    # ... and the client has exactly those three schedules: no second schedule was made for any key.
    assert sorted(s["schedule_id"] for s in listed["schedules"]) == sorted(live_ids), listed
    assert all(s["status"] == "succeeded" for s in listed["schedules"]), listed
    assert not errors(nodes), errors(nodes)[:3]


# --------------------------------------------------------------------------- O4 trigger now


@pytest.mark.timeout(120)
async def test_o4_trigger_fires_now_with_own_fire_id(scenario: Scenario, api: Api, sub: Subscriber) -> None:
    sc = scenario
    key, nodes = await setup(sc, api, "o4", ["n1", "n2"])
    url = sub.endpoint("later")
    made = await call(
        api,
        "POST",
        "/v1/schedules",
        key,
        {"delay_s": 3600, "payload": {"o": 4}, "callback": {"type": "http", "url": url}},
    )
    sid = made["schedule_id"]
    sent = time.time()
    resp = await api.post(f"/v1/schedules/{sid}/trigger", headers=key)
    trigger = await resp.json()
    await wait_until(lambda: bool(sub.ok("later")), 15, "the trigger did not fire")
    first = sub.ok("later")[0]
    await asyncio.sleep(4)
    delivered = sub.signed("later")
    parent = await call(api, "GET", f"/v1/schedules/{sid}", key)
    own = await call(api, "GET", f"/v1/schedules/{trigger['schedule_id']}", key)

    report(
        "O4 trigger: a schedule due in an hour triggered now (2 nodes)",
        status=resp.status,
        delivered=f"{len(delivered)}/1",
        trigger_to_delivery_s=round(first.arrival - sent, 3),
        parent_fire_at_moved_s=round(ts(parent["fire_at"]) - ts(made["fire_at"]), 3),
    )

    assert resp.status == 201 and trigger["trigger_of"] == sid and trigger["schedule_id"] != sid, trigger
    assert trigger["fire_id"].startswith(sid + ":") and trigger["fire_id"] != made["fire_id"], trigger
    assert abs(nominal_ts(trigger["fire_id"]) - sent) < 2, trigger
    # One delivery, soon, with the trigger's own fire id (body and headers) and the schedule's id and payload.
    assert len(delivered) == 1 and delivered[0].answered == 200, delivered
    assert same_fire_everywhere(first, trigger["fire_id"]), first
    assert first.schedule_id == sid and first.body["payload"] == {"o": 4}, first.body
    assert first.arrival - sent < 5, first.arrival - sent
    # The schedule itself is untouched: still due in an hour with the same fire id; the trigger succeeded.
    for field in ("status", "fire_at", "due_at", "fire_id", "attempts"):
        assert parent[field] == made[field], (field, parent[field], made[field])
    assert ts(parent["fire_at"]) - time.time() > 3500
    assert own["status"] == "succeeded" and own["fire_id"] == trigger["fire_id"], own
    assert not errors(nodes), errors(nodes)[:3]


# --------------------------------------------------------------------------- O5 a slow change, adopted


@pytest.mark.timeout(120)
async def test_o5_slowput_last_answered_fires(
    scenario: Scenario, api: Api, sub: Subscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two PUTs of one key, the first one's row write slow (1 s of Cassandra latency, injected into the
    in-process API's store): the README promises the live version is the last one answered 2xx. The
    second PUT starts while the first is between its compare-and-set of the pointer and its rows, takes
    the first for an abandoned change (``schema.changes.abandoned``), adopts its version and answers; the
    first then lands its rows (fenced: moved) and answers 200 too, last."""
    sc = scenario
    key, nodes = await setup(sc, api, "o5", ["n1"])
    url = sub.endpoint("slow")
    base = time.time() + 10
    store = sc.store
    real = store._write_replacement

    async def slow(current: Any, new: Any, now: Any, **kw: Any) -> None:
        if b'"A"' in (new.payload or b""):
            await asyncio.sleep(1.0)
        await real(current, new, now, **kw)

    monkeypatch.setattr(store, "_write_replacement", slow)
    answers: list[tuple[str, int, float, Any]] = []

    async def put(name: str, offset_s: float, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        body = {"fire_at": iso(base + offset_s), "payload": {"put": name}, "callback": {"type": "http", "url": url}}
        resp = await api.put("/v1/schedules/by-key/order-7", json=body, headers=key)
        answers.append((name, resp.status, time.monotonic(), await resp.json()))

    await put("first", 0.0, 0)
    await asyncio.gather(put("A", 1.0, 0), put("B", 2.0, 0.3))
    live = await call(api, "GET", "/v1/schedules/by-key/order-7", key)
    await wait_until(lambda: bool(sub.ok("slow")), 25, "the key's schedule did not fire")
    await asyncio.sleep(4)
    delivered = sub.signed("slow")
    last = answers[-1]

    report(
        "O5 by-key: PUT A (row write 1 s slow) and PUT B 0.3 s later (1 node)",
        answered=[(a[0], a[1]) for a in answers],
        last_answered=last[0],
        live_put=live["payload"].get("put"),
        delivered=f"{len(delivered)}/1",
        delivered_put=[d.body["payload"].get("put") for d in delivered],
    )

    assert [a[1] for a in answers] == [201, 200, 200], answers
    assert len(delivered) == 1, [(d.fire_id, d.body.get("payload")) for d in delivered]
    # The promise: the live version, the one that fires, is the last PUT answered 2xx.
    assert live["payload"] == {"put": last[0]}, f"PUT {last[0]} was answered 200 last, but the live version is {live}"
    assert delivered[0].body["payload"] == {"put": last[0]} and delivered[0].fire_id == last[3]["fire_id"]
    assert not errors(nodes), errors(nodes)[:3]


# --------------------------------------------------------------------------- O6 auto-pause across a kill


@pytest.mark.timeout(180)
async def test_o6_auto_pause_after_failures_notifies_once_across_a_node_kill(
    scenario: Scenario, api: Api, sub: Subscriber
) -> None:
    """An every-2s schedule whose subscriber answers 503 (3 attempts, then a dead letter), with
    pause_after_failures=3 and the client's notifications sent to another endpoint of the subscriber. After
    its first dead letter the node owning its instance is killed with SIGKILL; the other node takes the
    instance over, and the streak goes on across the handover: the schedule is paused after three dead
    letters in a row, one auto_paused notice is in the feed and reaches the notify endpoint once, the
    audit trail names tickd, and nothing fires after the pause."""
    sc = scenario
    key, nodes = await setup(sc, api, "o6", ["n1", "n2"])
    await call(api, "PATCH", "/v1/settings", key, {"notify": {"type": "http", "url": sub.endpoint("notices")}})
    url = sub.refuse("failing", 503)
    body = {"every": "2s", "pause_after_failures": 3, "callback": {"type": "http", "url": url}}
    made = await call(api, "POST", "/v1/schedules", key, body)
    sid = made["schedule_id"]
    instance = f"o6/{timing.poller_id_for(uuid.UUID(sid), 2)}"

    await wait_letter(api, key, sid)
    owner = (await gather_status(nodes, "o6/"))[instance][0]
    victim = next(n for n in nodes if n.node_id == owner)
    killed_at = victim.kill9()
    survivor = next(n for n in nodes if n is not victim)

    async def status() -> str:
        return str((await call(api, "GET", f"/v1/schedules/{sid}", key))["status"])

    deadline = time.monotonic() + 120
    while (now := await status()) != "paused":
        assert time.monotonic() < deadline, f"not auto-paused within 120 s of the kill (still {now})"
        await asyncio.sleep(0.5)
    paused_seen = time.time()
    await asyncio.sleep(8)  # then check nothing new fired after the pause (by nominal time)

    feed = (await call(api, "GET", "/v1/notifications?limit=1000", key))["notices"]
    paused_notices = [n for n in feed if n["kind"] == "schedule.auto_paused" and n["schedule_id"] == sid]
    letters = await dead_letters(api, key, sid)
    delivered_notices = {
        d.body["payload"]["notice_id"] for d in sub.ok("notices") if d.body["payload"]["kind"] == "schedule.auto_paused"
    }
    trail = (await call(api, "GET", f"/v1/schedules/{sid}/audit", key))["records"]
    the_pause = [r for r in trail if r["action"] == "schedule.auto_pause"]
    run_list = sorted(await runs(api, key, sid), key=lambda r: r["nominal_at"])
    tried = sorted({d.fire_id for d in sub.signed("failing")}, key=nominal_ts)
    paused_at = ts(paused_notices[0]["at"]) if paused_notices else paused_seen

    report(
        "O6 auto-pause: every 2s answered 503, pause_after_failures=3, owner killed after the first dead letter",
        killed_after_first_letter_s=round(killed_at - ts(letters[-1]["failed_at"]), 3) if letters else None,
        pause_after_kill_s=round(paused_at - killed_at, 3),
        dead_letters=len(letters),
        auto_paused_notices=len(paused_notices),
        delivered_to_notify=len(delivered_notices),
        occurrences_tried=len(tried),
    )

    assert len(paused_notices) == 1, feed
    assert delivered_notices == {paused_notices[0]["notice_id"]}, sub.ok("notices")
    assert paused_notices[0]["detail"]["failed_in_a_row"] == 3
    assert len(the_pause) == 1 and the_pause[0]["actor"] == "tickd", trail
    # The three occurrences before the pause, the last of them its trigger, all failed.
    trigger = paused_notices[0]["detail"]["fire_id"]
    streak = [r for r in run_list if nominal_ts(r["fire_id"]) <= nominal_ts(trigger)][-3:]
    assert [r["status"] for r in streak] == ["failed"] * 3 and streak[-1]["fire_id"] == trigger, run_list
    # A paused schedule fires nothing new: an occurrence already out when it landed may still be tried.
    assert not [f for f in tried if nominal_ts(f) > paused_at + GUARD_S], (tried, paused_at)
    assert survivor.alive and not survivor.errors(), survivor.errors()[:3]
