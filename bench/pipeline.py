"""bench-pipeline: where a poller node's CPU goes per fire, with no servers. Stops by itself.

``--count`` one-time schedules due within one minute across one client's pollers, stored in the in-memory store and
fired by one real ``Node`` on the simulation's virtual-time event loop (no waiting: a minute passes as
fast as its callbacks run, so what is measured is CPU, not sleep). Deliveries go through the real
``CallbackRouter`` (signed with the client's secret, as a node's are) and, for Kafka, the real
``KafkaDispatcher`` (retrier, batch sender, signing) with a stand-in producer that acknowledges each record at
once; for HTTP, a stand-in dispatcher that builds each request's body and headers as the real one does
and answers 200.

What it prints: CPU µs per fire of the whole node (load, plan, fire, deliver, record the outcome), and
with ``--profile`` where that CPU went, by module (own time under cProfile, which inflates the total).
The in-memory store stands in for the Cassandra driver, so its share is not the driver's: ``make
bench-fire`` measures the real thing end to end; this measures tickd's own code between the two.

    .venv/bin/python -m bench.pipeline [--count 20000] [--pollers 4] [--channel kafka|http] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import logging
import pstats
import random
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch

from tests.simulation import vloop
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings, compression_type
from tickd.poller.delivery import FIRE_ID_HEADER, DeliveryResult, encode_body, http_headers
from tickd.poller.main import stamped_router
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.poller.signing import signed_headers
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import memory_store
from tickd.schema.model import Callback, Client, HttpCallback, InstanceKey, KafkaCallback, Location, Schedule, Status
from tickd.schema.settings import StoreSettings

START = datetime(2030, 1, 1, tzinfo=UTC)
T = TypeVar("T")
PAYLOAD = b'{"order_id":"A-1001","action":"remind","attempt_window_s":300}'


@dataclass
class Counter:
    clock: Callable[[], datetime]
    delivered: int = 0
    rows_read: int = 0
    lateness_s: list[float] = field(default_factory=list)

    def arrived(self, fire_ms: int) -> None:
        """A delivery left the node: its lateness is now (the CPU-charged clock) minus its fire time."""
        self.delivered += 1
        self.lateness_s.append(self.clock().timestamp() - fire_ms / 1000)


class _CpuLoop(vloop.VirtualLoop):
    """Virtual time that also moves with the CPU the process spends: as if the node ran alone on one
    core with storage and broker answering at once. A busy node falls behind as a real one would, so
    lateness and the groups a fire pass takes are those of that load, not of an idle loop."""

    def __init__(self) -> None:
        super().__init__()
        self._cpu0 = time.process_time()

    def time(self) -> float:
        return super().time() + time.process_time() - self._cpu0


def _run_on_cpu_time(main: Coroutine[Any, Any, T]) -> T:
    loop = _CpuLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.close()


class _CountedReads(CassandraStore):
    """The in-memory store, counting the rows the node's minute reads return."""

    counter: Counter

    async def _count(self, pages: AsyncIterator[list[Schedule]]) -> AsyncIterator[list[Schedule]]:
        async for page in pages:
            self.counter.rows_read += len(page)
            yield page

    def read_minute(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> Any:
        return self._count(super().read_minute(instance, minute, from_due=from_due, until_due=until_due))


_CODECS = {"lz4": DefaultRecordBatch.CODEC_LZ4, "gzip": DefaultRecordBatch.CODEC_GZIP}


class _Records(BatchBuilder):
    """aiokafka's batch builder, noting each record's lateness (from its fire id) as it is appended."""

    def __init__(self, counter: Counter) -> None:
        super().__init__(KafkaSettings.max_batch_size, _CODECS[compression_type("auto")])
        self._counter = counter

    def append(self, *, timestamp: Any, key: Any, value: Any, headers: Any = ()) -> Any:
        metadata = super().append(timestamp=timestamp, key=key, value=value, headers=headers)
        if metadata is not None:
            fire_id = next(v for k, v in headers if k == FIRE_ID_HEADER)
            self._counter.arrived(int(fire_id.rsplit(b":", 1)[1]))
        return metadata


class _Producer:
    """Stands in for ``AIOKafkaProducer``: metadata known, every record acknowledged at once. Records go
    into aiokafka's own batches, built and compressed as the producer's sender would, so that counts:
    one at a time for ``send`` (as its accumulator appends them), whole for ``send_batch``."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._open: BatchBuilder | None = None

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    async def send(self, topic: str, *, value: bytes, key: bytes, headers: list[tuple[str, bytes]]) -> Any:
        if self._open is None or self._open.append(timestamp=None, key=key, value=value, headers=headers) is None:
            if self._open is not None:
                self._open._build()
            self._open = self.create_batch()
            self._open.append(timestamp=None, key=key, value=value, headers=headers)
        return self._acked()

    def create_batch(self) -> BatchBuilder:
        return _Records(self._counter)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        batch._build()  # what the producer's sender does with it: close, encode, compress
        return self._acked()

    @staticmethod
    def _acked() -> asyncio.Future[None]:
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ack.set_result(None)
        return ack

    async def stop(self) -> None:
        return None


class _Http:
    """Stands in for ``HttpDispatcher``: builds what a request would carry, answers 200."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        assert isinstance(schedule.callback, HttpCallback)
        body = encode_body(schedule, attempt, fired_at)
        headers = http_headers(schedule, schedule.callback, attempt)
        headers.update(signed_headers(schedule, int(time.time()), body))
        self._counter.arrived(int(schedule.fire_at.timestamp() * 1000))
        return DeliveryResult.delivered(attempt, 200)

    async def close(self) -> None:
        return None


def _callback(channel: str) -> Callback:
    if channel == "kafka":
        return KafkaCallback("bench-fires")
    return HttpCallback("http://127.0.0.1:9/hook", "POST", {"X-Bench": "1"})


async def _seed(store: CassandraStore, count: int, pollers: int, channel: str, spread_s: float) -> datetime:
    since = START - timedelta(days=1)
    client = Client("bench", pollers, True, "hash", since, since, kafka_topics=frozenset({"bench-fires"}))
    await store.create_client(client)
    minute = START + timedelta(minutes=1)
    callback = _callback(channel)
    rows = []
    for i in range(count):
        due = minute + timedelta(seconds=spread_s * i / count)
        loc = Location(i % pollers, due)
        rows.append(Schedule("bench", uuid.uuid4(), loc, due, PAYLOAD, callback, START))
    for i in range(0, count, 1000):
        await store.create_schedules(rows[i : i + 1000], START)
    return minute


async def _run(args: argparse.Namespace, profiler: cProfile.Profile | None) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    clock = vloop.VirtualClock(loop, START)  # type: ignore[arg-type]
    store = memory_store(clock, StoreSettings(page_size=5000), kind=_CountedReads)
    minute = await _seed(store, args.count, args.pollers, args.channel, args.spread_s)
    counter = store.counter = Counter(clock)
    retry = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=10.0, inline_budget_s=0.0)
    kafka = KafkaDispatcher(KafkaSettings(), retry)
    kafka._producer = _Producer(counter)  # the stand-in for the broker
    router, _secrets = stamped_router(store, _Http(counter), kafka, 5.0)  # signed, as a real node's
    settings = PollerSettings(node_id="bench", metrics_port=0, store=StoreSettings(keyspace="bench"), retry=retry)
    node = Node(settings, store, router, Metrics(), clock, rng=random.Random(1))
    stop = asyncio.Event()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    task = asyncio.create_task(node.run(stop))
    deadline = (minute - START).total_seconds() + args.spread_s + 120
    while counter.delivered < args.count and loop.time() < deadline:  # noqa: ASYNC110 - virtual time
        await asyncio.sleep(1.0)
    await asyncio.sleep(settings.minute_close_s + 60)  # outcomes written, minutes closed
    if profiler is not None:
        profiler.disable()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    rows_read = counter.rows_read  # the node's reads, not the check below
    stop.set()
    await task
    succeeded = sum(1 for _ in await _succeeded(store, args.pollers, minute))
    return {
        "delivered": counter.delivered,
        "succeeded": succeeded,
        "rows_read": rows_read,
        "lateness": sorted(counter.lateness_s),
        "cpu_s": cpu,
        "wall_s": wall,
    }


async def _succeeded(store: CassandraStore, pollers: int, minute: datetime) -> list[Schedule]:
    found = []
    for p in range(pollers):
        async for page in store.read_minute(InstanceKey("bench", p), minute, from_due=None):
            found.extend(row for row in page if row.status is Status.SUCCEEDED)
    return found


def _group(filename: str) -> str:
    """A module group for a profile row: tickd's modules by name, libraries by package."""
    path = filename.replace("\\", "/")
    for marker in ("/poller/", "/schema/", "/service/"):
        if marker in path and "site-packages" not in path:
            tail = path.split(marker, 1)[1].removesuffix(".py").replace("/", ".")
            return f"tickd.{marker.strip('/')}.{tail}"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/asyncio/" in path:
        return "asyncio"
    if path.startswith("~") or path.startswith("<"):
        return "builtins"
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def _profile_table(profiler: cProfile.Profile, fires: int, top: int) -> str:
    stats = pstats.Stats(profiler)
    by_group: dict[str, float] = defaultdict(float)
    by_function: list[tuple[float, str]] = []
    for (filename, line, name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "process_time" in name:
            continue  # the bench's own clock (the CPU-charged loop reads it at every loop.time())
        by_group[_group(filename)] += own
        by_function.append((own, f"{_group(filename)}:{line} {name}"))
    total = sum(by_group.values())
    out = io.StringIO()
    out.write(f"{'module (own time, under cProfile)':<48} {'µs/fire':>9} {'share':>7}\n")
    for group, own in sorted(by_group.items(), key=lambda kv: -kv[1])[:top]:
        out.write(f"{group:<48} {own / fires * 1e6:>9.1f} {own / total:>7.1%}\n")
    out.write(f"\n{'function (own time)':<72} {'µs/fire':>9}\n")
    for own, where in sorted(by_function, reverse=True)[:top]:
        out.write(f"{where[:72]:<72} {own / fires * 1e6:>9.1f}\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--pollers", type=int, default=4)
    parser.add_argument("--spread-s", type=float, default=30.0, help="fire times spread over this many seconds")
    parser.add_argument("--channel", choices=("kafka", "http"), default="kafka")
    parser.add_argument("--profile", action="store_true", help="a second run under cProfile: CPU by module")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    # Logs as production writes them (JSON at INFO), into nothing: their CPU counts, their lines do not.
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.WriteLoggerFactory(open("/dev/null", "w")),  # noqa: SIM115
        cache_logger_on_first_use=True,
    )
    plain = _run_on_cpu_time(_run(args, None))
    fires = plain["delivered"]
    print(f"bench-pipeline: {args.count} {args.channel} fires, {args.pollers} pollers, spread {args.spread_s:.0f} s")
    print(f"{'delivered':<28} {fires:>10}")
    print(f"{'outcomes stored (succeeded)':<28} {plain['succeeded']:>10}")
    print(f"{'rows read per fire':<28} {plain['rows_read'] / max(fires, 1):>10.1f}")
    late = plain["lateness"]
    if late:
        p50, p99 = late[len(late) // 2], late[min(len(late) - 1, int(len(late) * 0.99))]
        print(f"{'offered rate':<28} {args.count / args.spread_s:>8.0f} /s")
        print(f"{'lateness p50 / p99 / max':<28} {p50:>8.3f} / {p99:.3f} / {late[-1]:.3f} s  (CPU-charged clock)")
    print(f"{'node CPU per fire':<28} {plain['cpu_s'] / max(fires, 1) * 1e6:>8.1f} µs")
    print(f"{'node CPU, total':<28} {plain['cpu_s']:>8.2f} s  (wall {plain['wall_s']:.2f} s, virtual time)")
    if args.profile:
        profiler = cProfile.Profile()
        _run_on_cpu_time(_run(args, profiler))
        print()
        print(_profile_table(profiler, max(fires, 1), args.top))
    return 0 if fires == args.count == plain["succeeded"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
