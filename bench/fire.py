"""bench-fire: how fast do poller nodes fire? Stops by itself.

100,000 schedules (``--count``) due in one minute across one client's pollers (``--pollers``, 16), fired
by ``--nodes`` real ``tickd-poller`` processes, once to Kafka and once (a separate client, a separate
minute) to an HTTP receiver in this process. Prints a table: fires/s, lateness p50/p99/max (arrival at
the subscriber minus nominal fire time), poller RSS, and the raw aiokafka send rate of the same messages
in the same run (one awaited send at a time, and batched).

    .venv/bin/python -m bench.fire [--count 100000] [--pollers 16] [--nodes 1] [--only kafka|http]

Needs Cassandra and Kafka up (``make infra-up``); uses the keyspace ``$TICKD_KEYSPACE_bench`` (default
``tickd_test_bench``), dropped and re-created on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaProducer

from tests.acceptance.harness import (
    KAFKA_BOOTSTRAP,
    REPO,
    KafkaCounter,
    Lateness,
    Made,
    PollerProcess,
    Receiver,
    create_client,
    create_many,
)
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import Callback, Client, HttpCallback, KafkaCallback
from tickd.schema.settings import StoreSettings

# A guess used only to pick a minute far enough ahead for the creates to finish first.
CREATE_RATE_GUESS = 700.0


@dataclass
class Row:
    name: str
    count: int
    delivered: int
    seconds: float
    lateness: Lateness
    rss_mb: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else float("nan")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def target_minute(count: int) -> datetime:
    """The first minute that starts after the creates are likely done, with room for nodes to start."""
    ready = datetime.now(UTC) + timedelta(seconds=count / CREATE_RATE_GUESS + 30)
    return timing.minute_bucket(ready) + timedelta(minutes=1)


def fire_times(count: int, minute: datetime, spread_s: float) -> list[datetime]:
    step = spread_s / count
    return [minute + timedelta(seconds=i * step) for i in range(count)]


async def seed(store: CassandraStore, client: Client, count: int, callback: Callback, spread_s: float) -> list[Made]:
    minute = target_minute(count)
    started = time.monotonic()
    made = await create_many(store, client, fire_times(count, minute, spread_s), callback, concurrency=256)
    took = time.monotonic() - started
    log(f"{client.client_id}: {count} schedules for {minute:%H:%M} created in {took:.0f} s ({count / took:.0f}/s)")
    if datetime.now(UTC) > minute - timedelta(seconds=10):
        log("warning: creates finished late; lateness includes that")
    return made


async def watch(
    made: list[Made], arrivals: Callable[[], dict[str, float]], nodes: list[PollerProcess], timeout_s: float
) -> tuple[int, float, float]:
    """Wait until every fire arrived (or the deadline); (delivered, seconds from first fire to last arrival,
    peak RSS in MB across nodes)."""
    first_fire = min(m.fire_ts for m in made)
    deadline = max(m.fire_ts for m in made) + timeout_s
    peak = 0.0
    while time.time() < deadline and len(arrivals()) < len(made):
        peak = max(peak, *(n.rss_mb() for n in nodes))
        await asyncio.sleep(1)
    seen = arrivals()
    last = max(seen.values(), default=first_fire)
    return len(seen), max(last - first_fire, 1e-9), peak


async def run_target(
    name: str,
    store: CassandraStore,
    client: Client,
    callback: Callback,
    arrivals: Callable[[], dict[str, float]],
    args: argparse.Namespace,
    keyspace: str,
) -> tuple[Row, list[Made]]:
    made = await seed(store, client, args.count, callback, args.spread_s)
    log_dir = REPO / ".cache" / "bench-fire" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    nodes = [PollerProcess(f"{name}-{i}", keyspace, log_dir).start() for i in range(args.nodes)]
    try:
        await asyncio.gather(*(n.wait_for("node_started", timeout_s=60) for n in nodes))
        delivered, seconds, peak = await watch(made, arrivals, nodes, args.timeout_s)
    finally:
        for node in nodes:
            node.close()
    seen = arrivals()
    late = Lateness.of(seen[m.fire_id] - m.fire_ts for m in made if m.fire_id in seen)
    note = "" if delivered == len(made) else f"{len(made) - delivered} not delivered within the deadline"
    return Row(name, len(made), delivered, seconds, late, peak, note), made


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


async def raw_kafka(made: list[Made], awaited_sample: int) -> list[Row]:
    """The same messages through one aiokafka producer configured like the poller's (acks=all,
    idempotent, lz4): one awaited send at a time (a sample), then all of them as batched futures."""
    topic = f"tickd-bench-raw-{uuid.uuid4().hex[:8]}"
    records = [sample_record(m) for m in made]
    await KafkaCounter(topic).create_topic()
    producer = AIOKafkaProducer(
        bootstrap_servers=KAFKA_BOOTSTRAP, acks="all", enable_idempotence=True, compression_type="lz4", linger_ms=5
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up")
        started = time.monotonic()
        for key, value, headers in records[:awaited_sample]:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
        awaited_s = time.monotonic() - started
        started = time.monotonic()
        futures = [await producer.send(topic, value, key=key, headers=headers) for key, value, headers in records]
        await asyncio.gather(*futures)
        batched_s = time.monotonic() - started
    finally:
        await producer.stop()
    nan = Lateness(0, math.nan, math.nan, math.nan)
    return [
        Row("raw send, awaited each", awaited_sample, awaited_sample, awaited_s, nan, math.nan),
        Row("raw send, batched", len(records), len(records), batched_s, nan, math.nan),
    ]


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    print(
        f"\nbench-fire: {args.count} schedules over {args.spread_s:.0f} s, {args.pollers} pollers, {args.nodes} node(s)"
    )
    columns = ("fires", "delivered", "fires/s", "p50 s", "p99 s", "max s", "RSS MB")
    head = f"{'target':<28} " + " ".join(f"{c:>{max(7, len(c))}}" for c in columns)
    print(head)
    print("-" * len(head))
    for r in rows:
        lat = r.lateness
        print(
            f"{r.name:<28} {r.count:>7} {r.delivered:>9} {r.rate:>7.0f} {lat.p50:>7.3f} {lat.p99:>7.3f} "
            f"{lat.max:>7.3f} {r.rss_mb:>7.0f}  {r.note}"
        )
    print(
        "fires/s = delivered / (last arrival - first nominal fire time); the load itself arrives at "
        f"{args.count / max(args.spread_s, 1):.0f}/s, so a rate near that means the poller kept up."
    )


async def main_async(args: argparse.Namespace) -> int:
    keyspace = f"{os.environ.get('TICKD_KEYSPACE', 'tickd_test')}_bench"
    settings = StoreSettings.from_env({**os.environ, "TICKD_KEYSPACE": keyspace})
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    store = await CassandraStore.connect(settings)
    receiver = await Receiver().start()
    rows: list[Row] = []
    kafka_made: list[Made] = []
    try:
        if args.only in (None, "kafka"):
            topic = f"tickd-bench-{uuid.uuid4().hex[:8]}"
            client = await create_client(store, "benchkafka", args.pollers, kafka_topics=[topic])
            counter = await KafkaCounter(topic).start()
            try:
                row, kafka_made = await run_target(
                    "kafka", store, client, KafkaCallback(topic=topic), lambda: counter.first_arrival, args, keyspace
                )
                rows.append(row)
            finally:
                await counter.close()
        if args.only in (None, "http"):
            client = await create_client(store, "benchhttp", args.pollers)
            url = receiver.endpoint("bench")
            row, _ = await run_target(
                "http", store, client, HttpCallback(url=url), lambda: _first_http(receiver), args, keyspace
            )
            rows.append(row)
        if kafka_made:
            rows += await raw_kafka(kafka_made, awaited_sample=min(2000, len(kafka_made)))
    finally:
        await receiver.close()
        await store.close()
    print_table(rows, args)
    return 0 if all(r.delivered == r.count for r in rows) else 1


def _first_http(receiver: Receiver) -> dict[str, float]:
    first: dict[str, float] = {}
    for d in receiver.deliveries:
        first.setdefault(d.fire_id, d.arrival)
    return first


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench-fire", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--pollers", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2, 3, 4))
    parser.add_argument("--spread-s", type=float, default=60.0, help="fire times spread over this many seconds")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="give up this long after the last fire time")
    parser.add_argument("--only", choices=("kafka", "http"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
