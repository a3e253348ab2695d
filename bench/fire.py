"""bench-fire: how fast do poller nodes fire, at what lateness and at what cost? Stops by itself.

Real ``tickd-poller`` processes (``--nodes``, one by default) against the local Cassandra and Kafka, firing
one client's schedules (``--pollers`` poller instances) to Kafka and to an HTTP receiver in this process.

- **Ramp** (per target): the offered rate climbs step by step (``--kafka-rates``, ``--http-rates``), each
  step ``--step-s`` seconds of fires at that rate, seeded just before it. A step holds when every fire
  arrived and p99 lateness (arrival at the subscriber minus nominal fire time) stayed under 1 s; the ramp
  stops at the first step that does not. The highest step that held is the target's **maximum sustained
  rate**. Each step reports the nodes' CPU per fire (from /proc, between the step's first fire and its
  last arrival) and their peak RSS during the step.
- **Burst** (``--burst``, 100,000 by default; 0 skips): that many Kafka fires due within one minute, on a
  freshly started node, after ``--background`` other schedules were stored in later minutes: the node's
  peak RSS (VmHWM) and how late the minute ran.
- **Raw ceiling**: the same Kafka messages sent by one aiokafka producer configured like the poller's,
  as batched futures and one awaited send at a time, in the same run.

    .venv/bin/python -m bench.fire [--only kafka,http,burst] [--nodes 1] [--loop asyncio|uvloop]

Needs Cassandra and Kafka up (``make infra-up``); uses the keyspace ``$TICKD_KEYSPACE_bench`` (default
``tickd_test_bench``), dropped and re-created on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.acceptance.harness import (
    KAFKA_BOOTSTRAP,
    REPO,
    KafkaCounter,
    Lateness,
    Made,
    PollerProcess,
    Receiver,
    now_utc,
)
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import Callback, Client, HttpCallback, KafkaCallback, Location, Schedule
from tickd.schema.settings import StoreSettings

P99_LIMIT_S = 1.0
# Rows per create_schedules write while seeding (one logged batch) and such writes in flight.
SEED_GROUP = 8
SEED_IN_FLIGHT = 48
# Before the first measured seeding, how fast seeding is assumed to go (it only picks the first fire time).
SEED_RATE_GUESS = 2500.0
# Time between the end of seeding and a step's first fire: the node loads the minute ahead of it.
SEED_MARGIN_S = 12.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Arrivals = Callable[[], dict[str, float]]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- the nodes' CPU and memory


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_mb(pid: int, key: str) -> float:
    """A memory figure of /proc/<pid>/status (VmRSS: now; VmHWM: the peak so far), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


@dataclass
class Sample:
    at: float
    cpu_s: float
    rss_mb: float


class NodeMeter:
    """Samples the nodes' summed CPU time and RSS every ``interval_s``; answers for a time window."""

    def __init__(self, nodes: Sequence[PollerProcess], interval_s: float = 0.25) -> None:
        self._pids = [n.proc.pid for n in nodes if n.proc is not None]
        self._interval = interval_s
        self.samples: list[Sample] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> NodeMeter:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self._interval)

    def sample(self) -> Sample:
        s = Sample(time.time(), sum(cpu_seconds(p) for p in self._pids), sum(status_mb(p, "VmRSS") for p in self._pids))
        self.samples.append(s)
        return s

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds the nodes spent from ``start`` to ``end`` (nearest samples)."""
        before = [s for s in self.samples if s.at <= start] or self.samples[:1]
        after = [s for s in self.samples if s.at >= end] or [self.sample()]
        return after[0].cpu_s - before[-1].cpu_s

    def rss_peak(self, start: float, end: float) -> float:
        inside = [s.rss_mb for s in self.samples if start <= s.at <= end]
        return max(inside, default=math.nan)

    def peak_hwm_mb(self) -> float:
        return sum(status_mb(p, "VmHWM") for p in self._pids)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# --------------------------------------------------------------------------- seeding


class Seeder:
    """Writes schedules the way the API's batch creates do (a few per atomic write), and learns how fast."""

    def __init__(self, store: CassandraStore) -> None:
        self._store = store
        self.rate = SEED_RATE_GUESS

    def first_fire_for(self, count: int) -> datetime:
        """A first fire time that leaves room to seed ``count`` rows and for the node to load them."""
        return datetime.now(UTC) + timedelta(seconds=count / self.rate * 1.2 + SEED_MARGIN_S)

    async def seed(self, client: Client, fire_times: Sequence[datetime], callback: Callback) -> list[Made]:
        now = datetime.now(UTC)
        rows = [schedule_row(client, t, callback, now) for t in fire_times]
        gate = asyncio.Semaphore(SEED_IN_FLIGHT)

        async def write(group: list[Schedule]) -> None:
            async with gate:
                await self._store.create_schedules(group, now)

        started = time.monotonic()
        await asyncio.gather(*(write(rows[i : i + SEED_GROUP]) for i in range(0, len(rows), SEED_GROUP)))
        took = max(time.monotonic() - started, 1e-3)
        if len(rows) >= 5000:
            self.rate = len(rows) / took
        log(f"{client.client_id}: {len(rows)} schedules seeded in {took:.1f} s ({len(rows) / took:.0f}/s)")
        return [Made(r, r.fire_id) for r in rows]


def evenly(start: datetime, rate: float, seconds: float) -> list[datetime]:
    count = int(rate * seconds)
    return [start + timedelta(seconds=i / rate) for i in range(count)]


# --------------------------------------------------------------------------- measuring a load


@dataclass
class Result:
    target: str
    offered: float  # fires/s offered (nan for a burst)
    count: int
    delivered: int
    lateness: Lateness
    cpu_us: float  # node CPU per delivered fire
    rss_mb: float
    note: str = ""
    raw_rate: float = math.nan  # raw producer rows only
    holds: bool = field(init=False)

    def __post_init__(self) -> None:
        self.holds = self.delivered == self.count and self.lateness.p99 < P99_LIMIT_S


def schedule_row(client: Client, fire_at: datetime, callback: Callback, now: datetime) -> Schedule:
    """The row the API would write for a create at ``now``: a random id, the due time, the poller by id."""
    schedule_id = uuid.uuid4()
    fire_at = timing.truncate_ms(fire_at)
    poller_id = timing.poller_id_for(schedule_id, client.poller_count)
    payload = json.dumps({"n": schedule_id.hex[:8]}).encode()
    location = Location(poller_id, timing.due_time(fire_at, now))
    return Schedule(client.client_id, schedule_id, location, fire_at, payload, callback, now)


async def create_client(
    store: CassandraStore, client_id: str, poller_count: int, kafka_topics: Iterable[str] = ()
) -> Client:
    """A client written straight to the store: the bench seeds its schedules there too (its subject is
    the fire path, not the API's)."""
    now = now_utc()
    client = Client(client_id, poller_count, True, "x", now, now, kafka_topics=frozenset(kafka_topics))
    assert await store.create_client(client), f"client {client_id} already exists"
    return client


async def measure(
    target: str,
    offered: float,
    made: list[Made],
    arrivals: Arrivals,
    meter: NodeMeter,
    drain_s: float,
    dump: Path | None = None,
) -> Result:
    """Wait for ``made``'s fires (until every one arrived, or ``drain_s`` after the last fire time) and
    report their lateness and what the nodes spent on them."""
    first = min(m.fire_ts for m in made)
    last_fire = max(m.fire_ts for m in made)
    deadline = last_fire + drain_s
    ids = [m.fire_id for m in made]
    while True:
        seen = arrivals()
        missing = sum(1 for i in ids if i not in seen)
        if missing == 0 or time.time() > deadline:
            break
        await asyncio.sleep(0.5)
    seen = arrivals()
    if dump is not None:
        write_dump(dump, target, offered, made, seen)
    late = Lateness.of(seen[m.fire_id] - m.fire_ts for m in made if m.fire_id in seen)
    delivered = len(made) - missing
    last_arrival = max((seen[i] for i in ids if i in seen), default=last_fire)
    cpu = meter.cpu_between(first, max(last_arrival, last_fire))
    note = "" if missing == 0 else f"{missing} not delivered within {drain_s:.0f} s of the last fire time"
    return Result(
        target,
        offered,
        len(made),
        delivered,
        late,
        cpu / max(delivered, 1) * 1e6,
        meter.rss_peak(first, max(last_arrival, last_fire)),
        note,
    )


def write_dump(directory: Path, target: str, offered: float, made: list[Made], seen: dict[str, float]) -> None:
    """One line per fire: nominal fire time, poller instance, lateness in seconds (empty: not arrived)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{target.replace(' ', '-')}-{'burst' if math.isnan(offered) else f'{offered:.0f}'}.csv"
    with (directory / name).open("w") as out:
        out.write("fire_ts,poller_id,lateness_s\n")
        for m in made:
            got = seen.get(m.fire_id)
            late = "" if got is None else f"{got - m.fire_ts:.3f}"
            out.write(f"{m.fire_ts:.3f},{m.schedule.location.poller_id},{late}\n")


@dataclass
class Target:
    name: str
    client: Client
    callback: Callback
    arrivals: Arrivals


async def start_nodes(name: str, keyspace: str, args: argparse.Namespace) -> list[PollerProcess]:
    log_dir = REPO / ".cache" / "bench-fire" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {"TICKD_EVENT_LOOP": args.loop}
    nodes = [PollerProcess(f"{name}-{i}", keyspace, log_dir, env=env).start() for i in range(args.nodes)]
    await asyncio.gather(*(n.wait_for("node_started", timeout_s=60) for n in nodes))
    return nodes


def stop_nodes(nodes: Sequence[PollerProcess]) -> None:
    for node in nodes:
        node.close()


async def ramp(
    target: Target, rates: Sequence[float], seeder: Seeder, keyspace: str, args: argparse.Namespace
) -> tuple[list[Result], list[Made]]:
    """Steps of rising offered rate on one set of nodes, until a step does not hold."""
    results: list[Result] = []
    biggest: list[Made] = []
    nodes = await start_nodes(f"ramp-{target.name}", keyspace, args)
    meter = NodeMeter(nodes).start()
    try:
        for rate in rates:
            count = int(rate * args.step_s)
            made = await seeder.seed(
                target.client, evenly(seeder.first_fire_for(count), rate, args.step_s), target.callback
            )
            lead = min(m.fire_ts for m in made) - time.time()
            if lead < 2:
                log(f"warning: seeding ended {-lead:.1f} s after the step's first fire time; lateness includes it")
            log(f"{target.name}: {rate:.0f}/s for {args.step_s:.0f} s begins in {lead:.0f} s")
            result = await measure(target.name, rate, made, target.arrivals, meter, args.drain_s, args.dump)
            results.append(result)
            if len(made) > len(biggest):
                biggest = made
            log(
                f"{target.name}: {rate:.0f}/s -> delivered {result.delivered}/{result.count}, "
                f"p99 {result.lateness.p99:.3f} s, {result.cpu_us:.0f} us CPU/fire, "
                f"{'holds' if result.holds else 'does not hold'}"
            )
            if not result.holds:
                break
            await asyncio.sleep(2)
    finally:
        await meter.close()
        stop_nodes(nodes)
    return results, biggest


async def burst(
    target: Target, seeder: Seeder, store: CassandraStore, keyspace: str, args: argparse.Namespace
) -> Result:
    """``args.burst`` fires due within one minute on a fresh node, ``args.background`` rows stored beside."""
    if args.background:
        far = datetime.now(UTC) + timedelta(days=1)
        times = evenly(far, args.background / 3600, 3600)
        await seeder.seed(target.client, times, target.callback)
    first = timing.minute_bucket(seeder.first_fire_for(args.burst) + timedelta(seconds=30)) + timedelta(minutes=1)
    made = await seeder.seed(target.client, evenly(first, args.burst / 60, 60), target.callback)
    nodes = await start_nodes(f"burst-{target.name}", keyspace, args)
    meter = NodeMeter(nodes).start()
    try:
        result = await measure(f"{target.name} burst", math.nan, made, target.arrivals, meter, args.drain_s, args.dump)
        result.rss_mb = meter.peak_hwm_mb()
    finally:
        await meter.close()
        stop_nodes(nodes)
    return result


# --------------------------------------------------------------------------- the raw producer


def sample_record(m: Made) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """A record shaped like a fire: key = schedule id, JSON value, the three headers."""
    s = m.schedule
    now = datetime.now(UTC).isoformat()
    value = {
        "schedule_id": str(s.schedule_id),
        "fire_id": m.fire_id,
        "client_id": s.client_id,
        "fire_at": s.fire_at.isoformat(),
        "fired_at": now,
        "attempt": 1,
        "payload": json.loads(s.payload),
    }
    headers = [
        ("X-Tickd-Schedule-Id", str(s.schedule_id).encode()),
        ("X-Tickd-Fire-Id", m.fire_id.encode()),
        ("X-Tickd-Attempt", b"1"),
    ]
    return str(s.schedule_id).encode(), json.dumps(value).encode(), headers


async def raw_kafka(made: list[Made], awaited_sample: int) -> list[Result]:
    """The same messages through one aiokafka producer configured like the poller's (acks=all,
    idempotent, lz4): all of them as batched futures, then one awaited send at a time (a sample)."""
    topic = f"tickd-bench-raw-{uuid.uuid4().hex[:8]}"
    records = [sample_record(m) for m in made]
    await KafkaCounter(topic).create_topic()
    producer = AIOKafkaProducer(
        bootstrap_servers=KAFKA_BOOTSTRAP, acks="all", enable_idempotence=True, compression_type="lz4", linger_ms=5
    )
    await producer.start()
    cpu_before = time.process_time()
    try:
        await producer.send_and_wait(topic, b"warm-up")
        started, cpu_before = time.monotonic(), time.process_time()
        futures = [await producer.send(topic, value, key=key, headers=headers) for key, value, headers in records]
        await asyncio.gather(*futures)
        batched_s, batched_cpu = time.monotonic() - started, time.process_time() - cpu_before
        started, cpu_before = time.monotonic(), time.process_time()
        for key, value, headers in records[:awaited_sample]:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
        awaited_s, awaited_cpu = time.monotonic() - started, time.process_time() - cpu_before
    finally:
        await producer.stop()
    nan = Lateness(0, math.nan, math.nan, math.nan)
    batched = Result("raw aiokafka, batched", math.nan, len(records), len(records), nan, math.nan, math.nan)
    batched.raw_rate, batched.cpu_us = len(records) / batched_s, batched_cpu / len(records) * 1e6
    awaited = Result("raw aiokafka, each awaited", math.nan, awaited_sample, awaited_sample, nan, math.nan, math.nan)
    awaited.raw_rate, awaited.cpu_us = awaited_sample / awaited_s, awaited_cpu / awaited_sample * 1e6
    return [batched, awaited]


# --------------------------------------------------------------------------- the report


def print_report(results: list[Result], args: argparse.Namespace) -> None:
    print(
        f"\nbench-fire: {args.nodes} node(s), {args.pollers} poller instances, {args.loop} event loop, "
        f"steps of {args.step_s:.0f} s; a step holds when every fire arrived and p99 < {P99_LIMIT_S:.0f} s"
    )
    columns = ("offered/s", "fires", "delivered", "p50 s", "p99 s", "max s", "CPU us/fire", "RSS MB", "holds")
    head = f"{'load':<27} " + " ".join(f"{c:>{max(7, len(c))}}" for c in columns)
    print(head)
    print("-" * len(head))
    for r in results:
        lat = r.lateness
        if not math.isnan(r.raw_rate):
            print(f"{r.target:<27} {'':>9} {r.count:>7} {r.count:>9} {'':>7} {'':>7} {'':>7} {r.cpu_us:>11.0f}")
            continue
        offered = "" if math.isnan(r.offered) else f"{r.offered:.0f}"
        print(
            f"{r.target:<27} {offered:>9} {r.count:>7} {r.delivered:>9} {lat.p50:>7.3f} {lat.p99:>7.3f} "
            f"{lat.max:>7.3f} {r.cpu_us:>11.0f} {r.rss_mb:>7.0f} {'yes' if r.holds else 'NO':>7}  {r.note}"
        )
    print("(CPU us/fire: the poller nodes' CPU; for raw rows, this process's CPU per message.)")
    raw = next((r.raw_rate for r in results if r.target == "raw aiokafka, batched"), math.nan)
    for name in ("kafka", "http"):
        steps = [r for r in results if r.target == name]
        if not steps:
            continue
        held = [r.offered for r in steps if r.holds]
        best = max(held, default=0.0)
        line = f"{name}: maximum sustained rate {best:.0f}/s"
        if name == "kafka" and not math.isnan(raw):
            line += f" = {best / raw:.2f}x the raw batched producer ({raw:.0f}/s)"
        if steps[-1].holds:
            line += " (every step held: the ceiling is higher; add rates)"
        print(line)
    for r in results:
        if not math.isnan(r.raw_rate):
            print(f"{r.target}: {r.raw_rate:.0f} messages/s")


async def main_async(args: argparse.Namespace) -> int:
    only = set(args.only.split(","))
    keyspace = f"{os.environ.get('TICKD_KEYSPACE', 'tickd_test')}_bench"
    settings = StoreSettings.from_env({**os.environ, "TICKD_KEYSPACE": keyspace})
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    store = await CassandraStore.connect(settings)
    receiver = await Receiver().start()
    seeder = Seeder(store)
    results: list[Result] = []
    kafka_made: list[Made] = []
    counters: list[KafkaCounter] = []
    try:

        async def kafka_target(name: str) -> Target:
            topic = f"tickd-bench-{uuid.uuid4().hex[:8]}"
            client = await create_client(store, name, args.pollers, kafka_topics=[topic])
            counter = await KafkaCounter(topic).start()
            counters.append(counter)
            return Target("kafka", client, KafkaCallback(topic=topic), lambda: counter.first_arrival)

        if "kafka" in only:
            steps, kafka_made = await ramp(await kafka_target("benchkafka"), args.kafka_rates, seeder, keyspace, args)
            results += steps
        if "http" in only:
            client = await create_client(store, "benchhttp", args.pollers)
            target = Target("http", client, HttpCallback(url=receiver.endpoint("bench")), lambda: _first_http(receiver))
            results += (await ramp(target, args.http_rates, seeder, keyspace, args))[0]
        if "burst" in only and args.burst:
            results.append(await burst(await kafka_target("benchburst"), seeder, store, keyspace, args))
        if kafka_made:
            results += await raw_kafka(kafka_made[:100_000], awaited_sample=min(2000, len(kafka_made)))
    finally:
        for counter in counters:
            await counter.close()
        await receiver.close()
        await store.close()
    print_report(results, args)
    return 0 if all(r.delivered == r.count for r in results) else 1


def _first_http(receiver: Receiver) -> dict[str, float]:
    first: dict[str, float] = {}
    for d in receiver.deliveries:
        first.setdefault(d.fire_id, d.arrival)
    return first


def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of rates: {text!r}") from None
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must be positive: {text!r}")
    return rates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench-fire", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="kafka,http,burst", help="comma-separated: kafka, http, burst")
    parser.add_argument("--kafka-rates", type=_rates, default=_rates("1000,2000,3000,4000,5000,6000,8000,10000"))
    parser.add_argument("--http-rates", type=_rates, default=_rates("500,1000,1500,2000,2500,3000,4000"))
    parser.add_argument("--step-s", type=float, default=30.0, help="seconds of fires per ramp step")
    parser.add_argument("--burst", type=int, default=100_000, help="Kafka fires due within one minute (0: none)")
    parser.add_argument("--background", type=int, default=0, help="rows stored in later minutes before the burst")
    parser.add_argument("--pollers", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2, 3, 4))
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--dump", type=Path, help="write each load's per-fire lateness as CSV into this folder")
    parser.add_argument("--drain-s", type=float, default=90.0, help="wait for stragglers this long after a step")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - {"kafka", "http", "burst"}
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
