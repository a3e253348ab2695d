"""Poller nodes on their own hosts over the 3-node Cassandra cluster (replication factor 3, LOCAL_QUORUM).

Layout: Cassandra nodes on hosts 1-3, poller nodes on hosts 4-6 (each a real ``tickd-poller`` in its own
network namespace, with its own address), the subscriber on host 7 (``sink.py``). Every delivery the
subscriber records carries the sending host's address, so each fire is attributed to the node that sent it.

P1: one poller host is partitioned from the three Cassandra hosts for 40 s while 3,000 schedules fire over
two minutes. It keeps running and can still reach the subscriber, so a node that failed to fence itself
would be seen delivering for instances it no longer owns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
from cassandra.cluster import Cluster as Driver
from cassandra.policies import WhiteListRoundRobinPolicy

from tests.acceptance.api_client import create_client, create_many, serve_api
from tests.acceptance.harness import (
    Delivery,
    Interval,
    Made,
    PollerProcess,
    delivered_all,
    exclusivity_violations,
    gather_status,
    instances_of,
    now_utc,
    ownership_intervals,
    spread,
    tally,
    wait_placement,
)
from tests.cluster.conftest import Stage
from tests.cluster.harness import ADMIN, SinkProcess, host_address, poller_on, report, request
from tests.cluster.test_quorum import CLIENT_DEADLINE_S
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import HttpCallback
from tickd.schema.settings import StoreSettings

CASSANDRA_HOSTS = (1, 2, 3)
POLLER_HOSTS = (4, 5, 6)
SINK_HOST = 7
POLLERS = 12  # instances of the one client: 4 per node
TAKEOVER_BOUND_S = 15.0
# A request written by a node just before it stopped an instance is recorded by the subscriber a moment
# after the node's instance_stopped line (same machine, same clock).
IN_FLIGHT_SLACK_S = 0.5
POLLER_AT = {host_address(h): f"n{h}" for h in range(4, 10)}  # a poller host's address -> its node id


@dataclass
class World:
    stage: Stage
    store: CassandraStore
    sink: SinkProcess
    nodes: list[PollerProcess] = field(default_factory=list)

    def node_at(self, address: str) -> str:
        return POLLER_AT.get(address, address)


@asynccontextmanager
async def world(stage: Stage, sink_host: int = SINK_HOST) -> AsyncIterator[World]:
    await stage.cluster.hosts(sink_host)
    sink = SinkProcess(sink_host, stage.log_dir).start()
    store = await CassandraStore.connect(StoreSettings.from_env({**os.environ, **stage.env}))
    here = World(stage, store, sink)
    try:
        await sink.wait_ready()
        yield here
    finally:
        for node in here.nodes:
            node.close()
        sink.close()
        await store.close()
        for index in range(POLLER_HOSTS[0], sink_host):
            await stage.cluster.join(index)


async def start_pollers(here: World, hosts: Sequence[int] = POLLER_HOSTS, **env: str) -> list[PollerProcess]:
    """Poller nodes ``n<host>`` on ``hosts``, added to the world's; returns the new ones once started."""
    new = [poller_on(h, f"n{h}", here.stage.env, here.stage.log_dir, **env).start() for h in hosts]
    here.nodes.extend(new)
    await asyncio.gather(*(n.wait_for("node_started", timeout_s=120) for n in new))
    return new


def stale_deliveries(
    deliveries: Sequence[Delivery], here: World, where: dict[str, str], spans: dict[str, list[Interval]]
) -> list[str]:
    """Deliveries a node sent for an instance it did not own at that moment (per its own log), or after
    another node had started the instance (per that node's log)."""
    problems = []
    for d in deliveries:
        node, inst = here.node_at(d.remote), where.get(d.fire_id)
        if inst is None:
            continue
        own = [s for s in spans.get(inst, []) if s.node == node and s.start <= d.arrival <= s.end + IN_FLIGHT_SLACK_S]
        if not own:
            problems.append(f"{d.fire_id} from {node} at {d.arrival:.3f}: {node} did not run {inst} then")
            continue
        later = [s for s in spans[inst] if s.node != node and own[0].start < s.start < d.arrival]
        if later:
            problems.append(
                f"{d.fire_id} from {node} at {d.arrival:.3f}: {later[0].node} runs {inst} since {later[0].start:.3f}"
            )
    return problems


def firing_spans(nodes: Sequence[PollerProcess]) -> dict[str, list[Interval]]:
    """Per instance, when each node could fire it: from instance_started to instance_stopped, or to the
    node's fence if that came first. A fenced node fires nothing (every fire checks the lease first), but
    an instance's task ends only once the outcomes of fires already sent are written or given up, which
    can take the store timeout when Cassandra is out of reach; its instance_stopped comes that much later."""
    fences = {n.node_id: sorted(e["_t"] for e in n.find("node_fenced")) for n in nodes}
    spans: dict[str, list[Interval]] = {}
    for inst, intervals in ownership_intervals(nodes).items():
        spans[inst] = [
            dataclasses.replace(i, end=min([i.end, *(t for t in fences[i.node] if i.start <= t)])) for i in intervals
        ]
    return spans


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch within [start, end] with no delivery."""
    inside = sorted(t for t in times if start <= t <= end)
    points = [start, *inside, end]
    return max((b - a for a, b in itertools.pairwise(points)), default=end - start)


@pytest.mark.timeout(900)
async def test_p1_poller_host_partitioned_from_cassandra(stage: Stage) -> None:
    # Created through the API (in-process on the test host, over the cluster's store), as users create.
    async with world(stage) as here, asynccontextmanager(serve_api)(here.store) as api:
        client = await create_client(api, "p1", POLLERS)
        nodes = await start_pollers(here)
        prefix = f"{client.client_id}/"
        await wait_placement(
            nodes, prefix, instances_of(client), timeout_s=90, accept=lambda p: len(set(p.values())) == 3, stable_s=3
        )
        # Due after the hot window (90 s) plus the time the 3,000 creates take: rows due within the window
        # must be confirmed within the hot-write deadline (3 s), and on this host's three-node cluster a
        # batch's confirmation took longer (503 for the items not confirmed, the API's true answer; not what
        # P1 is about). 100 s out was not enough on a loaded host (CI at 8dd3d8d: creates took over 10 s, so
        # the first items due were hot by the time their batch was sent): 60 s for the creates, as P3.
        start = now_utc() + timedelta(seconds=StoreSettings.hot_window_s + 60)
        times = spread(3000, start, start + timedelta(seconds=120))
        callback = HttpCallback(url=here.sink.url, timeout_s=5)
        made: list[Made] = await create_many(api, client, times, callback)
        where = {m.fire_id: str(m.schedule.instance) for m in made}
        print(f"P1: created 3000 schedules, first due at {start.isoformat()}")

        await asyncio.sleep(max(0.0, start.timestamp() + 30 - time.time()))  # a third of the way in
        owners = await gather_status(nodes, prefix)
        victim = nodes[0]
        lost = sorted(i for i, v in owners.items() if v == [victim.node_id])
        assert lost, f"{victim.node_id} runs nothing: {owners}"
        cut_at = time.time()
        await stage.cluster.partition(POLLER_HOSTS[0], CASSANDRA_HOSTS)
        await victim.wait_for("node_fenced", timeout_s=30)
        takeover: dict[str, float] = {}
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for e in (e for n in nodes[1:] for e in n.find("instance_started")):
                if e.get("instance") in lost and e["_t"] > cut_at:
                    takeover[e["instance"]] = min(takeover.get(e["instance"], 1e18), e["_t"] - cut_at)
            await asyncio.sleep(0.5)
        healed_at = time.time()
        await stage.cluster.join(POLLER_HOSTS[0])
        back = await victim.wait_for("instance_started", lambda e: e["_t"] > healed_at, timeout_s=60)
        rejoined_s = back["_t"] - healed_at
        placement = await wait_placement(
            nodes, prefix, instances_of(client), timeout_s=60, accept=lambda p: len(set(p.values())) == 3, stable_s=3
        )

        await delivered_all(made, lambda: {d.fire_id for d in here.sink.deliveries}, timeout_s=150)
        await asyncio.sleep(3)  # late duplicates
        deliveries = list(here.sink.deliveries)
        t = tally(made, [(d.fire_id, d.arrival) for d in deliveries])
        spans = firing_spans(nodes)
        stale = stale_deliveries(deliveries, here, where, spans)
        overlap = exclusivity_violations(spans)
        victim_spans = ownership_intervals([victim])
        fence_times = [e["_t"] for e in victim.find("node_fenced")]
        outlived = [
            i.end - t for k in lost for i in victim_spans.get(k, []) for t in fence_times if i.start <= t <= i.end
        ]
        fenced = victim.find("node_fenced")[0]
        by_sender = Counter(here.node_at(d.remote) for d in deliveries)
        during = [
            d for d in deliveries if cut_at <= d.arrival <= healed_at and here.node_at(d.remote) == victim.node_id
        ]
        epochs = {i: [(s.node, s.epoch) for s in spans[i]] for i in lost}
        due = {m.fire_id: m.fire_ts for m in made}
        first: dict[str, float] = {}
        for d in deliveries:
            first[d.fire_id] = min(d.arrival, first.get(d.fire_id, d.arrival))
        moved_late = [first[f] - due[f] for f, inst in where.items() if inst in lost and f in first]
        report(
            "P1 poller host partitioned from Cassandra 40 s, 3 nodes x 12 pollers, 3000 HTTP",
            **t.fields(),
            takeover_max_s=max(takeover.values(), default=float("nan")),
            taken_over=f"{len(takeover)}/{len(lost)}",
            fenced_after_s=fenced["_t"] - cut_at,
            victim_deliveries_while_cut=len(during),
            rejoined_after_s=rejoined_s,
            moved_instances_late_max_s=max(moved_late, default=float("nan")),
            stopped_after_fence_max_s=max(outlived, default=0.0),
            longest_gap_s=longest_gap([d.arrival for d in deliveries], times[0].timestamp(), max(times).timestamp()),
            per_sender=dict(by_sender),
            per_node_after=dict(Counter(placement.values())),
        )
        print(f"P1 epochs of the moved instances: {epochs}")
        assert not t.missing, f"{len(t.missing)} fires lost, e.g. {t.missing[:5]}"
        assert not t.unknown, t.unknown[:5]
        assert set(takeover) == set(lost), f"not taken over within 40 s: {sorted(set(lost) - set(takeover))}"
        assert max(takeover.values()) <= TAKEOVER_BOUND_S, takeover
        assert not stale, stale[:5]
        assert not overlap, overlap[:5]
        for inst in lost:  # each move went up in epoch; the victim's return took a newer one still
            assert [e for _, e in epochs[inst]] == sorted(e for _, e in epochs[inst]), epochs[inst]
        assert all(n.alive for n in nodes), [n.tail() for n in nodes if not n.alive]


@dataclass
class Create:
    """One POST /v1/schedules the creator made: when, the answer, and the fire id a 201 promised."""

    sent: float
    status: int
    elapsed_s: float
    fire_id: str | None
    fire_ts: float | None
    schedule_id: str | None


async def keep_creating(
    stage: Stage, base: str, key: dict[str, str], url: str, log: list[Create], stop: asyncio.Event
) -> None:
    """Creates one schedule due 15 s ahead every 50 ms (sequentially: a slow answer slows the rate)."""
    while not stop.is_set():
        sent = time.time()
        answer = await request(
            stage.session,
            "POST",
            f"{base}/v1/schedules",
            headers=key,
            json={
                "delay_s": 15,
                "payload": {"n": int(sent * 1000)},
                "callback": {"type": "http", "url": url, "timeout_s": 5},
            },
            deadline_s=CLIENT_DEADLINE_S,
        )
        body = answer.body if answer.status == 201 else {}
        fire_at = body.get("fire_at")
        log.append(
            Create(
                sent,
                answer.status,
                answer.elapsed_s,
                body.get("fire_id"),
                datetime.fromisoformat(fire_at.replace("Z", "+00:00")).timestamp() if fire_at else None,
                body.get("schedule_id"),
            )
        )
        await asyncio.sleep(0.05)


def refs_held(stage: Stage, client_id: str, schedule_ids: Sequence[str], *, only_node: int | None) -> list[str]:
    """Which of ``schedule_ids`` have their ``schedule_refs`` row: with ``only_node``, read at ONE through a
    session that may talk to that node alone (what it holds itself, mostly: the node may hand a read at ONE
    to another replica its dynamic snitch finds faster); without, read at ALL through every
    node, which makes Cassandra repair a replica that lacks the row before it answers (blocking read
    repair). Blocking: run it in a thread."""
    contact = [host_address(only_node)] if only_node else [host_address(n) for n in (1, 2, 3)]
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy(contact),
        consistency_level=ConsistencyLevel.ONE if only_node else ConsistencyLevel.ALL,
    )
    driver = Driver(contact, execution_profiles={EXEC_PROFILE_DEFAULT: profile}, protocol_version=5)
    try:
        session = driver.connect(stage.env["TICKD_KEYSPACE"])
        query = session.prepare("SELECT schedule_id FROM schedule_refs WHERE client_id = ? AND schedule_id = ?")
        return [sid for sid in schedule_ids if session.execute(query, (client_id, uuid.UUID(sid))).one() is not None]
    finally:
        driver.shutdown()


@pytest.mark.timeout(900)
async def test_p2_cassandra_nodes_down_while_creating_and_firing(stage: Stage) -> None:
    """A real API and three pollers while one schedule a 50 ms is created, due 15 s later:
    A) node 3 stopped (SIGTERM: it drains and tells its peers): every create still 201, fires keep coming
    (a node that crashes instead costs creates until the others convict it: test_quorum's C3);
    B) node 2 killed too (no quorum): creates answer 503 promptly, never 500 or a hang; the pollers fence;
    C) node 2 started again: creates and fires resume; D) node 3 started again: every schedule acknowledged
    while it was down answers a read at ALL (all three replicas). How many of them node 3 had from hints
    before any read repaired it is reported, not asserted: hints not yet flushed to node 2's disk died with
    it (Cassandra flushes them every 10 s), and a read "at ONE on node 3" may be served by another replica.
    Every create answered 201 is delivered, each schedule only ever with the fire id its create promised."""
    async with world(stage) as here:
        api = stage.api().start()
        try:
            await api.wait_ready(stage.session)
            client_id, key = await register_client(stage, api.base, POLLERS)
            nodes = await start_pollers(here)
            await wait_placement(nodes, f"{client_id}/", {f"{client_id}/{p}" for p in range(POLLERS)}, timeout_s=90)
            log: list[Create] = []
            stop = asyncio.Event()
            creator = asyncio.create_task(keep_creating(stage, api.base, key, here.sink.url, log, stop))
            marks: dict[str, float] = {"begin": time.time()}
            await asyncio.sleep(20)
            await stage.cluster.stop(3)
            marks["node3_stopped"] = time.time()
            await asyncio.sleep(30)
            marks["node2_killing"] = time.time()
            await stage.cluster.kill(2)
            marks["node2_killed"] = time.time()
            await asyncio.gather(
                *(n.wait_for("node_fenced", lambda e: e["_t"] > marks["node2_killed"], timeout_s=40) for n in nodes)
            )
            marks["all_fenced"] = time.time()
            await asyncio.sleep(max(0.0, marks["node2_killed"] + 30 - time.time()))
            marks["node2_starting"] = time.time()
            await stage.cluster.start(2)
            marks["node2_back"] = time.time()
            await asyncio.sleep(20)
            await stage.cluster.start(3)
            marks["node3_back"] = time.time()
            await asyncio.sleep(10)
            stop.set()
            await creator
            marks["end"] = time.time()

            acked = [c for c in log if c.status == 201]
            made = {c.fire_id: c.fire_ts for c in acked if c.fire_id and c.fire_ts}
            assert await delivered_all_ids(set(made), here, timeout_s=120)
            await asyncio.sleep(3)
            deliveries = list(here.sink.deliveries)
            counts = Counter(d.fire_id for d in deliveries)
            missing = sorted(set(made) - set(counts))
            unknown = sorted(set(counts) - set(made))
            dups = {f: n for f, n in counts.items() if n > 1}

            def phase(a: str, b: str) -> list[Create]:
                return [c for c in log if marks[a] <= c.sent < marks[b]]

            # Answered before node 2 was killed: with node 3 alone down.
            one_down = [
                c for c in log if marks["node3_stopped"] <= c.sent and c.sent + c.elapsed_s < marks["node2_killing"]
            ]
            # Sent once node 2 was gone (``cluster kill`` returns when its process has exited): no quorum can
            # be met, and each answers 503, whether the coordinator knows node 2 down yet or waits its timeout.
            no_quorum = phase("node2_killed", "node2_starting")
            after = phase("node2_back", "end")
            first_ok = min((c.sent for c in after if c.status == 201), default=float("nan"))
            in_a = [c.schedule_id for c in one_down if c.status == 201 and c.schedule_id]
            # Reported only: what node 3 got by hinted handoff (nodes 1 and 2 kept hints while it was down;
            # those on node 2 not yet flushed died with it), read before any read at ALL repairs it.
            hinted: list[str] = []
            began = time.monotonic()
            while time.monotonic() - began < 60:
                hinted = await asyncio.to_thread(refs_held, stage, client_id, in_a, only_node=3)
                if len(hinted) == len(in_a):
                    break
                await asyncio.sleep(5)
            caught_up_s = time.time() - marks["node3_back"]
            # A read at ONE through node 3 may still be served by another replica (the dynamic snitch picks
            # the replica; CI once saw 531/531 "held" here, then 529 after). At ALL every replica answers.
            lacking = sorted(in_a)
            answered_at_all = await asyncio.to_thread(refs_held, stage, client_id, lacking, only_node=None)
            held = len(await asyncio.to_thread(refs_held, stage, client_id, in_a, only_node=3))
            promised = {c.schedule_id: c.fire_id for c in acked if c.schedule_id}
            renamed = [d for d in deliveries if d.schedule_id in promised and d.fire_id != promised[d.schedule_id]]
            fires = sorted(d.arrival for d in deliveries)
            report(
                "P2 Cassandra nodes down while creating and firing, 3 pollers x 12 instances",
                creates=len(log),
                created_201=len(acked),
                delivered=len(set(counts) & set(made)),
                missing=len(missing),
                dup_fire_ids=len(dups),
                unknown=len(unknown),
                one_down_creates=len(one_down),
                one_down_not_201=sum(1 for c in one_down if c.status != 201),
                one_down_max_s=max((c.elapsed_s for c in one_down), default=float("nan")),
                no_quorum_creates=len(no_quorum),
                no_quorum_statuses=dict(Counter(c.status for c in no_quorum)),
                no_quorum_max_s=max((c.elapsed_s for c in no_quorum), default=float("nan")),
                fenced_after_s=marks["all_fenced"] - marks["node2_killed"],
                first_201_after_node2_back_s=first_ok - marks["node2_back"],
                node3_by_hints=f"{len(hinted)}/{len(in_a)}",
                node3_hints_waited_s=caught_up_s,
                node3_after_read_repair=f"{held}/{len(in_a)}",
                # Fires come 15 s after their creates: these windows have creates 15 s before every moment.
                longest_gap_one_down_s=longest_gap(fires, marks["node3_stopped"], marks["node2_killed"]),
                longest_gap_after_s=longest_gap(fires, marks["node2_back"] + 16, marks["end"]),
            )
            assert not missing, f"{len(missing)} acknowledged schedules never fired: {missing[:5]}"
            assert len(unknown) <= sum(1 for c in log if c.status != 201), unknown[:5]
            assert one_down and all(c.status == 201 for c in one_down), [c for c in one_down if c.status != 201][:5]
            assert no_quorum and all(c.status == 503 for c in no_quorum), [c for c in no_quorum if c.status != 503][:5]
            # No answer hung: a request past the client's deadline would have status 0 (checked in full above
            # for the one-down and no-quorum phases; here for every phase).
            assert all(c.status for c in log), [c for c in log if not c.status][:5]
            assert sorted(answered_at_all) == lacking, "a schedule acknowledged while node 3 was down is missing at ALL"
            assert not renamed, f"delivered with another fire id than its create promised: {renamed[:3]}"
            assert api.proc is not None and api.proc.poll() is None, "tickd-api exited"
            assert all(n.alive for n in nodes), [n.tail() for n in nodes if not n.alive]
        finally:
            api.stop()


async def delivered_all_ids(want: set[str], here: World, timeout_s: float) -> bool:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if want <= {d.fire_id for d in here.sink.deliveries}:
            return True
        await asyncio.sleep(0.5)
    return False


async def register_client(stage: Stage, base: str, pollers: int) -> tuple[str, dict[str, str]]:
    client_id = f"p2-{uuid.uuid4().hex[:8]}"
    answer = await request(
        stage.session,
        "POST",
        f"{base}/v1/clients",
        headers=ADMIN,
        json={"client_id": client_id, "poller_count": pollers},
        deadline_s=CLIENT_DEADLINE_S,
    )
    assert answer.status == 201, answer
    return client_id, {"Authorization": f"Bearer {answer.body['api_key']}"}


# What the pollers spend on coordination: membership, ownership, checkpoints, hot marks, clients. The rest
# is the work itself: reading minutes (per instance and slice) and recording what was delivered.
COORDINATION = frozenset(
    {
        "heartbeat",
        "live_nodes",
        "leave_cluster",
        "list_clients",
        "get_client",
        "get_claim",
        "list_claims",
        "first_claim",
        "take_claim",
        "release_claim",
        "get_checkpoint",
        "write_checkpoint",
        "record_skipped",
        "read_hot_marks",
        "get_horizon",
        "ping",
    }
)
MINUTE_READS = frozenset({"read_minute", "read_minute_until", "read_minute_stamps", "read_minute_stamps_until"})
WINDOW_S = float(os.environ.get("TICKD_CLUSTER_COST_WINDOW_S", "60"))
METRIC_LINE = re.compile(r'^tickd_store_requests_total\{kind="(\w+)",statement="([\w:+]+)"\} ([0-9.e+]+)$', re.M)


async def request_counts(nodes: Sequence[PollerProcess]) -> Counter[tuple[str, str]]:
    """(statement, kind) -> requests, summed over the nodes' /metrics."""
    total: Counter[tuple[str, str]] = Counter()
    for text in await asyncio.gather(*(n.metrics() for n in nodes)):
        for kind, statement, value in METRIC_LINE.findall(text):
            total[(statement, kind)] += int(float(value))
    return total


@dataclass(frozen=True)
class Cost:
    """Requests per second over one window, summed over the nodes."""

    coordination_lwt: float
    coordination_read: float
    coordination_write: float
    minute_reads: float
    other: float
    top: list[tuple[str, float]]

    @classmethod
    def of(cls, before: Counter[tuple[str, str]], after: Counter[tuple[str, str]], seconds: float) -> Cost:
        rate = {key: (after[key] - before[key]) / seconds for key in after}

        def total(pick: Callable[[str, str], bool]) -> float:
            return round(sum(r for (name, kind), r in rate.items() if pick(name, kind)), 2)

        coordination = [(n, r) for (n, _), r in rate.items() if n in COORDINATION and r > 0]
        return cls(
            coordination_lwt=total(lambda n, k: n in COORDINATION and k == "lwt"),
            coordination_read=total(lambda n, k: n in COORDINATION and k == "read"),
            coordination_write=total(lambda n, k: n in COORDINATION and k == "write"),
            minute_reads=total(lambda n, k: n in MINUTE_READS),
            other=total(lambda n, k: n not in COORDINATION and n not in MINUTE_READS),
            top=sorted(((n, round(r, 2)) for n, r in coordination), key=lambda x: -x[1])[:6],
        )

    @property
    def coordination(self) -> float:
        return self.coordination_lwt + self.coordination_read + self.coordination_write


async def measure(nodes: Sequence[PollerProcess]) -> Cost:
    before = await request_counts(nodes)
    began = time.monotonic()
    await asyncio.sleep(WINDOW_S)
    after = await request_counts(nodes)
    return Cost.of(before, after, time.monotonic() - began)


def per_node_within_cap(placement: dict[str, str], nodes: int) -> tuple[dict[str, int], int]:
    """Instances per node in a settled placement (every instance on exactly one node's /status), and the
    cap bounded placement keeps them under at the default TICKD_RING_LOAD_FACTOR: ceil(1.25 x average).
    Only this scenario's clients are in its keyspace, so the nodes place exactly these instances."""
    per_node = Counter(placement.values())
    assert len(per_node) == nodes, f"{nodes} nodes expected to run instances: {dict(per_node)}"
    return dict(per_node), math.ceil(1.25 * len(placement) / nodes)


@pytest.mark.timeout(1200)
async def test_p3_coordination_cost_grows_with_nodes_not_schedules(stage: Stage) -> None:
    """10 clients x 16 pollers. Requests per second summed over the nodes, each over a window of
    TICKD_CLUSTER_COST_WINDOW_S (60 s, so every minute's checkpoints are in it) once placement is stable:
    3 nodes idle, 3 nodes while 6,000 schedules fire, 6 nodes idle. Coordination must not grow with the
    schedules (invariant 5); it grows with the nodes (a heartbeat and a ring read each per node)."""
    async with world(stage, sink_host=10) as here, asynccontextmanager(serve_api)(here.store) as api:
        clients = [await create_client(api, f"p3c{i}", 16) for i in range(10)]
        every = set().union(*(instances_of(c) for c in clients))
        three = await start_pollers(here, (4, 5, 6))
        balance = {3: per_node_within_cap(await wait_placement(three, "p3c", every, timeout_s=120, stable_s=5), 3)}
        idle3 = await measure(three)

        # Due after the hot window (90 s) plus the time 6,000 creates take here (up to ~45 s on this host's
        # three-node cluster): rows due within the window must be confirmed within the hot-write deadline (3 s),
        # which a loaded host missed for some items of a 600-item batch (CI, 503 store_unavailable: the API's
        # true answer, and not what P3 measures). So every create is a cold write.
        start = now_utc() + timedelta(seconds=StoreSettings.hot_window_s + 60)
        made: list[Made] = []
        for client in clients:
            times = spread(600, start, start + timedelta(seconds=WINDOW_S + 10), seed=len(made))
            made += await create_many(api, client, times, HttpCallback(url=here.sink.url, timeout_s=5))
        await asyncio.sleep(max(0.0, start.timestamp() - time.time()))
        busy3 = await measure(three)
        assert await delivered_all(made, lambda: {d.fire_id for d in here.sink.deliveries}, timeout_s=60)

        six = [*three, *await start_pollers(here, (7, 8, 9))]
        placed6 = await wait_placement(
            six, "p3c", every, timeout_s=120, accept=lambda p: len(set(p.values())) == 6, stable_s=5
        )
        balance[6] = per_node_within_cap(placed6, 6)
        idle6 = await measure(six)
        for name, cost in (("3 nodes idle", idle3), ("3 nodes, 6000 fires", busy3), ("6 nodes idle", idle6)):
            report(
                f"P3 coordination, 10 clients x 16 pollers, {name} (requests/s)",
                lwt=cost.coordination_lwt,
                reads=cost.coordination_read,
                writes=cost.coordination_write,
                minute_reads=cost.minute_reads,
                delivery_and_other=cost.other,
                top=cost.top,
            )
        for count, (per_node, cap) in balance.items():
            report(f"P3 placement, 10 clients x 16 pollers on {count} nodes", per_node=per_node, cap=cap)
            assert max(per_node.values()) <= cap, f"{count} nodes: a node above ceil(1.25 x average): {per_node}"
        assert busy3.coordination_lwt == idle3.coordination_lwt == 0, (idle3, busy3)
        # Firing adds one read of each firing client per node per TICKD_CLIENTS_REFRESH_S (5 s; its
        # signing secrets), bounded by clients x nodes, whatever the number of schedules.
        client_refreshes = len(clients) * len(three) / 5.0
        # 15 %: each 60 s window cuts the nodes' periodic loops (heartbeats, ring and client reads,
        # checkpoints, every 1-10 s, with jitter) at a phase of its own, so two windows of one idle cluster
        # differ by a few percent; a cost that grew with the schedules would be far above it (6,000 fires
        # in the window, 100 a second). +1 minute read: a minute's boundary may fall in one window only.
        assert busy3.coordination <= idle3.coordination * 1.15 + client_refreshes, (idle3, busy3)
        assert busy3.minute_reads <= idle3.minute_reads * 1.15 + 1, (idle3, busy3)
        assert idle6.coordination > idle3.coordination, (idle3, idle6)
        assert all(n.alive for n in six), [n.tail() for n in six if not n.alive]
