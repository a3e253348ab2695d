"""Issue 4, scenarios 1-4: a steady load on three nodes, a node killed, a node joining, a node leaving."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta

import pytest

from tests.acceptance.api_client import Api, Tenant, create_client, create_many
from tests.acceptance.harness import (
    Made,
    PollerProcess,
    Scenario,
    delivered_all,
    exclusivity_violations,
    gather_status,
    header_problems,
    http_arrivals,
    instances_of,
    now_utc,
    ownership_intervals,
    report,
    spread,
    tally,
    wait_placement,
    wait_until,
)
from tickd.schema.model import HttpCallback

pytestmark = pytest.mark.acceptance


def seen_by(scenario: Scenario, endpoint: str) -> set[str]:
    return {d.fire_id for d in scenario.receiver.of(endpoint)}


async def cluster_with_load(
    sc: Scenario, api: Api, client: Tenant, node_ids: list[str], count: int, from_s: float, to_s: float, endpoint: str
) -> tuple[list[PollerProcess], dict[str, str], list[Made]]:
    """Start the nodes, wait until the client's instances are placed, then create ``count`` HTTP schedules
    due between ``from_s`` and ``to_s`` seconds from now, through ``POST /v1/schedules/batch``."""
    nodes = await sc.start_nodes(node_ids)
    placement = await wait_placement(
        nodes,
        f"{client.client_id}/",
        instances_of(client),
        timeout_s=60,
        accept=lambda p: set(p.values()) == set(node_ids),
        stable_s=3,
    )
    start = now_utc()
    times = spread(count, start + timedelta(seconds=from_s), start + timedelta(seconds=to_s))
    made = await create_many(api, client, times, HttpCallback(url=sc.receiver.endpoint(endpoint)))
    print(f"{sc.name}: created {count} schedules in {(now_utc() - start).total_seconds():.1f} s")
    return nodes, placement, made


async def mid_minute_with_progress(sc: Scenario, endpoint: str, made: list[Made], fraction: float) -> None:
    """Wait until ``fraction`` of the fires arrived and the wall clock is well inside a minute."""
    need = int(len(made) * fraction)
    await wait_until(lambda: len(seen_by(sc, endpoint)) >= need, 90, f"{need} fires did not arrive")
    await wait_until(lambda: 10 <= time.gmtime().tm_sec <= 50, 61, "never mid-minute")


def instance_of(made: list[Made]) -> dict[str, str]:
    return {m.fire_id: str(m.schedule.instance) for m in made}


def handover_delays(sc: Scenario, instances: list[str], victim: str, since: float) -> dict[str, float | None]:
    """Per instance, seconds from ``since`` until another node logged instance_started for it."""
    delays: dict[str, float | None] = {}
    for inst in instances:
        starts = [
            e["_t"]
            for e in sc.events("instance_started")
            if e.get("instance") == inst and e["_node"] != victim and e["_t"] >= since
        ]
        delays[inst] = min(starts) - since if starts else None
    return delays


async def _settle(seconds: float = 3.0) -> None:
    """Give late duplicates (the thing some checks are about) time to arrive."""
    await asyncio.sleep(seconds)


def exclusivity(sc: Scenario) -> list[str]:
    return exclusivity_violations(ownership_intervals(sc.nodes))


@pytest.mark.timeout(300)
async def test_s1_steady_load_three_nodes(scenario: Scenario, api: Api) -> None:
    """3 nodes, 12 pollers, 3,000 HTTP schedules over ~70 s: all delivered once and none early, each instance
    held by one node at a time. Lateness is reported here and measured by ``make bench-fire``, not asserted."""
    sc = scenario
    client = await create_client(api, "s1steady", 12)
    nodes, placement, made = await cluster_with_load(sc, api, client, ["n1", "n2", "n3"], 3000, 15, 85, "s1")

    await delivered_all(made, lambda: seen_by(sc, "s1"), timeout_s=85 + 30)
    await _settle()
    deliveries = sc.receiver.of("s1")
    t = tally(made, http_arrivals(deliveries))
    per_node = Counter(placement.values())
    report("S1 steady 3 nodes x 12 pollers, 3000 HTTP", **t.fields(), instances_per_node=dict(per_node))

    assert not t.missing, f"{len(t.missing)} fires lost, e.g. {t.missing[:5]}"
    assert not t.unknown, f"deliveries with fire ids nobody scheduled: {t.unknown[:5]}"
    assert not t.duplicated, f"{t.duplicates} duplicate deliveries without a crash: {list(t.duplicated.items())[:5]}"
    assert not header_problems(deliveries), header_problems(deliveries)[:5]
    assert not t.early, f"{len(t.early)} fires delivered before their fire time, e.g. {t.early[:5]}"
    assert not exclusivity(sc), exclusivity(sc)[:5]
    assert all(n.alive for n in nodes), [n.tail() for n in nodes if not n.alive]


@pytest.mark.timeout(300)
async def test_s2_kill9_one_node(scenario: Scenario, api: Api) -> None:
    """kill -9 one node mid-minute: nothing lost, duplicates only of fires in flight (same fire id), and
    its instances run elsewhere (how soon: reported)."""
    sc = scenario
    client = await create_client(api, "s2kill", 12)
    nodes, _, made = await cluster_with_load(sc, api, client, ["n1", "n2", "n3"], 1200, 8, 65, "s2")
    await mid_minute_with_progress(sc, "s2", made, 0.15)

    owners = await gather_status(nodes, f"{client.client_id}/")
    by_node = Counter(v[0] for v in owners.values())
    victim = next(n for n in nodes if n.node_id == by_node.most_common(1)[0][0])
    lost_instances = sorted(i for i, v in owners.items() if v == [victim.node_id])
    killed_at = victim.kill9()
    print(f"S2: killed {victim.node_id} (instances {lost_instances}) at second {time.gmtime(killed_at).tm_sec}")

    await delivered_all(made, lambda: seen_by(sc, "s2"), timeout_s=120)
    await _settle()
    deliveries = sc.receiver.of("s2")
    t = tally(made, http_arrivals(deliveries))
    delays = handover_delays(sc, lost_instances, victim.node_id, killed_at)
    where = instance_of(made)
    first = {f: min(d.arrival for d in deliveries if d.fire_id == f) for f in t.duplicated}
    report(
        "S2 kill -9 one of 3 nodes",
        **t.fields(),
        moved_instances=len(lost_instances),
        handover_max_s=max((d for d in delays.values() if d is not None), default=float("nan")),
        dup_first_arrival_vs_kill_s=sorted(round(a - killed_at, 2) for a in first.values())[:10],
    )

    assert not t.missing, f"{len(t.missing)} fires lost after kill -9, e.g. {t.missing[:5]}"
    assert not t.unknown, f"deliveries with fire ids nobody scheduled: {t.unknown[:5]}"
    not_victims = [f for f in t.duplicated if where[f] not in lost_instances]
    assert not not_victims, f"duplicates of instances the kill did not touch: {not_victims[:5]}"
    # A duplicate is a fire the killed node had on the wire: its first copy left before the kill. 1 s: the
    # receiver stamps an arrival once it has read the request, which a loaded host may delay after the send.
    refired_late = {f: a - killed_at for f, a in first.items() if a > killed_at + 1}
    assert not refired_late, f"duplicates whose first delivery came after the kill (not in flight): {refired_late}"
    # Each lost instance runs on another node again (how soon is reported: handover_max_s, and measured by the
    # node TTL's own settings; exclusivity below says it was never run by two at once).
    orphaned = sorted(i for i, d in delays.items() if d is None)
    assert not orphaned, f"instances of the killed node never run elsewhere: {orphaned}"
    assert not exclusivity(sc), exclusivity(sc)[:5]


@pytest.mark.timeout(300)
async def test_s3_fourth_node_joins(scenario: Scenario, api: Api) -> None:
    """A 4th node joins a 3-node cluster: 1/8..1/2 of 16 instances move, never two owners at once,
    epochs increase across owners, nothing lost."""
    sc = scenario
    client = await create_client(api, "s3join", 16)
    prefix, instances = f"{client.client_id}/", instances_of(client)
    _, before, made = await cluster_with_load(sc, api, client, ["n1", "n2", "n3"], 800, 8, 50, "s3")
    await wait_until(lambda: len(seen_by(sc, "s3")) >= 100, 60, "the load did not start")

    joined_at = time.time()
    n4 = sc.node("n4")
    await n4.wait_for("node_started", timeout_s=60)
    after = await wait_placement(
        sc.nodes, prefix, instances, timeout_s=45, accept=lambda p: "n4" in p.values(), stable_s=4
    )
    settled_s = time.time() - joined_at
    moved = sorted(i for i in instances if before[i] != after[i])
    sideways = [i for i in moved if after[i] != "n4"]

    await delivered_all(made, lambda: seen_by(sc, "s3"), timeout_s=90)
    await _settle()
    t = tally(made, http_arrivals(sc.receiver.of("s3")))
    violations = exclusivity(sc)
    report(
        "S3 4th node joins (16 instances)",
        **t.fields(),
        moved=len(moved),
        moved_not_to_new_node=len(sideways),
        settled_s=settled_s,
        exclusivity_violations=len(violations),
    )

    assert len(instances) / 8 <= len(moved) <= len(instances) / 2, f"{len(moved)} of 16 moved: {before} -> {after}"
    assert not violations, "\n".join(violations[:10])
    assert not t.missing, f"{len(t.missing)} fires lost during the join, e.g. {t.missing[:5]}"
    assert not t.unknown, f"deliveries with fire ids nobody scheduled: {t.unknown[:5]}"


@pytest.mark.timeout(300)
async def test_s4_sigterm_one_node(scenario: Scenario, api: Api) -> None:
    """SIGTERM one of 3 nodes mid-minute: exit code 0, claims released, instances taken over,
    zero duplicates, zero losses."""
    sc = scenario
    client = await create_client(api, "s4term", 12)
    nodes, _, made = await cluster_with_load(sc, api, client, ["n1", "n2", "n3"], 900, 8, 55, "s4")
    await mid_minute_with_progress(sc, "s4", made, 0.2)

    owners = await gather_status(nodes, f"{client.client_id}/")
    by_node = Counter(v[0] for v in owners.values())
    victim = next(n for n in nodes if n.node_id == by_node.most_common(1)[0][0])
    handed = sorted(i for i, v in owners.items() if v == [victim.node_id])
    termed_at = time.time()
    code = await victim.terminate(timeout_s=40)
    exit_s = time.time() - termed_at

    await delivered_all(made, lambda: seen_by(sc, "s4"), timeout_s=100)
    await _settle()
    deliveries = sc.receiver.of("s4")
    t = tally(made, http_arrivals(deliveries))
    delays = handover_delays(sc, handed, victim.node_id, termed_at)
    released = {e.get("instance") for e in victim.find("instance_released")}
    report(
        "S4 SIGTERM one of 3 nodes",
        **t.fields(),
        exit_code=code,
        exit_s=exit_s,
        handed_over=len(handed),
        handover_max_s=max((d for d in delays.values() if d is not None), default=float("nan")),
    )

    assert code == 0, f"exit code {code} after SIGTERM:\n{victim.tail()}"
    assert victim.find("node_stopped"), f"no node_stopped logged:\n{victim.tail()}"
    assert set(handed) <= released, f"claims not released on SIGTERM: {sorted(set(handed) - released)}"
    assert all(d is not None for d in delays.values()), f"instances never taken over: {delays}"
    assert not t.missing, f"{len(t.missing)} fires lost on SIGTERM, e.g. {t.missing[:5]}"
    assert not t.unknown, f"deliveries with fire ids nobody scheduled: {t.unknown[:5]}"
    assert not t.duplicated, f"{t.duplicates} duplicates on a graceful handover: {list(t.duplicated.items())[:5]}"
    assert not exclusivity(sc), exclusivity(sc)[:5]
