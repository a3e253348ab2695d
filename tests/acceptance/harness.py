"""The acceptance harness: real ``tickd-poller`` processes, a fake HTTP receiver, a Kafka counter, and the
arithmetic the scenarios assert on (lateness percentiles, duplicates, ownership intervals).

Nothing here knows how the poller works inside: it only sees what an operator sees (processes, JSON log
lines on stderr, ``/status``) and what a subscriber sees (deliveries).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import Schedule

REPO = Path(__file__).resolve().parents[2]
POLLER_BIN = Path(sys.executable).parent / "tickd-poller"
API_BIN = Path(sys.executable).parent / "tickd-api"
KAFKA_BOOTSTRAP = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")

# Fast timing knobs: a dead node is noticed in seconds, not minutes.
FAST_KNOBS: dict[str, str] = {
    "TICKD_CALLBACK_ALLOW_PRIVATE": "true",
    "TICKD_LOG_FORMAT": "json",
    "TICKD_HEARTBEAT_INTERVAL_S": "1",
    "TICKD_RING_REFRESH_S": "1",
    "TICKD_PRELOAD_S": "5",
    "TICKD_MARK_POLL_S": "0.5",
    "TICKD_SHUTDOWN_DEADLINE_S": "10",
}

# Lines the summary prints at the end of the run (see conftest.pytest_terminal_summary).
REPORT: list[str] = []


def report(scenario: str, **numbers: object) -> str:
    line = f"{scenario}: " + ", ".join(f"{k}={_fmt(v)}" for k, v in numbers.items())
    REPORT.append(line)
    print(line, flush=True)
    return line


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def now_utc() -> datetime:
    return datetime.now(UTC)


def ms(moment: datetime) -> datetime:
    """``moment`` truncated to the millisecond: what Cassandra keeps, so fire ids match exactly."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def parse_ts(raw: str) -> float:
    """A log line's ISO UTC timestamp as Unix seconds."""
    moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def wait_until(cond: Callable[[], bool], timeout_s: float, what: Callable[[], str] | str) -> None:
    """Poll ``cond`` every 0.2 s; fail with ``what`` (a message or a function making one) on timeout."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            message = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:.0f} s: {message}")
        await asyncio.sleep(0.2)


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()))


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Lateness:
    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Lateness:
        data = sorted(values)
        if not data:
            return cls(0, float("nan"), float("nan"), float("nan"))
        return cls(len(data), _rank(data, 0.50), _rank(data, 0.99), data[-1])

    def fields(self, prefix: str = "late") -> dict[str, object]:
        return {f"{prefix}_p50_s": self.p50, f"{prefix}_p99_s": self.p99, f"{prefix}_max_s": self.max}


def _rank(data: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    index = max(0, min(len(data) - 1, round(q * len(data) + 0.5) - 1))
    return data[index]


# --------------------------------------------------------------------------- poller processes


class PollerProcess:
    """One ``tickd-poller`` node. stderr JSON lines are copied to ``log_path`` and parsed into ``events``."""

    def __init__(
        self,
        node_id: str,
        keyspace: str,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        log_name: str | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """``prefix`` runs the node through another command (``ip netns exec <ns>``: tests/cluster)."""
        self.node_id = node_id
        self.prefix = list(prefix)
        self.command = [str(POLLER_BIN)]  # another tickd process in its place: ``api_process``
        self.name = log_name or node_id
        self.metrics_port = free_port()
        self.log_path = log_dir / f"{self.name}.log"
        self.env = {
            **os.environ,
            **FAST_KNOBS,
            "PYTHONUNBUFFERED": "1",
            "TICKD_NODE_ID": node_id,
            "TICKD_METRICS_PORT": str(self.metrics_port),
            "TICKD_KEYSPACE": keyspace,
            "TICKD_KAFKA_BOOTSTRAP": KAFKA_BOOTSTRAP,
            **(env or {}),
        }
        self.metrics_host = self.env.get("TICKD_METRICS_HOST", "127.0.0.1")
        self.events: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ended_at: float | None = None  # Unix time we saw it exit or killed it
        self.killed = False
        self._reader: threading.Thread | None = None

    def start(self) -> PollerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            [*self.prefix, *self.command],
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"stderr-{self.node_id}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        with self.log_path.open("ab") as out:
            for raw in self.proc.stderr:
                out.write(raw)
                out.flush()
                self.events.append(_parse_line(raw))

    # -- observing ----------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def find(self, event: str, predicate: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("event") == event and (predicate is None or predicate(e))]

    async def wait_for(
        self, event: str, predicate: Callable[[dict[str, Any]], bool] | None = None, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.find(event, predicate)
            if found:
                return found[0]
            if not self.alive:
                raise AssertionError(f"{self.node_id} exited ({self.returncode()}) before {event}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.node_id}: no {event} within {timeout_s:.0f} s:\n{self.tail()}")
            await asyncio.sleep(0.1)

    def tail(self, lines: int = 25) -> str:
        return "\n".join(e.get("_raw", json.dumps(e)) for e in list(self.events)[-lines:])

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("level") in ("error", "critical", "exception")]

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    async def status(self, timeout_s: float = 3.0) -> dict[str, Any]:
        url = f"http://{self.metrics_host}:{self.metrics_port}/status"
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            resp.raise_for_status()
            body: dict[str, Any] = await resp.json(content_type=None)
            return body

    async def metrics(self, timeout_s: float = 3.0) -> str:
        url = f"http://{self.metrics_host}:{self.metrics_port}/metrics"
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
            return await resp.text()

    def rss_mb(self) -> float:
        """Resident set size of the process, from /proc (Linux)."""
        if self.proc is None:
            return float("nan")
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    # -- stopping -----------------------------------------------------------------------------------

    def kill9(self) -> float:
        """SIGKILL the node; returns the Unix time of the kill."""
        assert self.proc is not None
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.killed = True
        self.ended_at = killed_at
        self._join()
        return killed_at

    async def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for the exit code (a graceful shutdown must exit by itself)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(self.proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.node_id} did not exit within {timeout_s:.0f} s of SIGTERM:\n{self.tail()}"
            ) from None
        self.ended_at = time.time()
        await asyncio.to_thread(self._join)
        return code

    def close(self) -> None:
        """Teardown: whatever state it is in, leave no process and no open pipe behind."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.kill9()
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self.proc is not None and self.proc.stderr is not None and not self.proc.stderr.closed:
            self.proc.stderr.close()
        if self.ended_at is None:
            self.ended_at = time.time()


def _parse_line(raw: bytes) -> dict[str, Any]:
    text = raw.decode(errors="replace").rstrip("\n")
    try:
        event = json.loads(text)
    except ValueError:
        return {"_raw": text, "_t": time.time(), "_plain": True}
    if not isinstance(event, dict):
        return {"_raw": text, "_t": time.time(), "_plain": True}
    event["_raw"] = text
    event["_t"] = parse_ts(event["timestamp"]) if isinstance(event.get("timestamp"), str) else time.time()
    return event


# --------------------------------------------------------------------------- ownership intervals


@dataclass(frozen=True)
class Interval:
    instance: str
    node: str
    epoch: int
    start: float
    end: float


def ownership_intervals(nodes: Sequence[PollerProcess]) -> dict[str, list[Interval]]:
    """Per instance, when each node ran it: [instance_started, instance_stopped], or until the node ended."""
    result: dict[str, list[Interval]] = defaultdict(list)
    for node in nodes:
        open_: dict[str, tuple[int, float]] = {}
        for e in list(node.events):
            name, inst = e.get("event"), e.get("instance")
            if name == "instance_started" and isinstance(inst, str):
                open_[inst] = (int(e.get("epoch", -1)), e["_t"])
            elif name == "instance_stopped" and isinstance(inst, str) and inst in open_:
                epoch, start = open_.pop(inst)
                result[inst].append(Interval(inst, node.node_id, epoch, start, e["_t"]))
        end = node.ended_at if node.ended_at is not None else float("inf")
        for inst, (epoch, start) in open_.items():
            result[inst].append(Interval(inst, node.node_id, epoch, start, end))
    for intervals in result.values():
        intervals.sort(key=lambda i: i.start)
    return result


def exclusivity_violations(intervals: Mapping[str, list[Interval]]) -> list[str]:
    """Two nodes running one instance at once, or an owner whose epoch is not above its predecessor's."""
    problems: list[str] = []
    for inst, spans in intervals.items():
        for i, a in enumerate(spans):
            for b in spans[i + 1 :]:
                if a.node != b.node and b.start < a.end:
                    problems.append(f"{inst}: {a} overlaps {b}")
        for a, b in itertools.pairwise(spans):
            if b.epoch <= a.epoch:
                problems.append(f"{inst}: epoch did not increase from {a} to {b}")
    return problems


# --------------------------------------------------------------------------- HTTP receiver


@dataclass(frozen=True)
class Behaviour:
    """How an endpoint answers. Attempts are counted per fire id."""

    fail_first: int = 0  # 500 for the first N attempts of each fire id, then 200
    always_fail: bool = False
    hang: bool = False  # never answers (until the receiver closes)
    delay_s: float = 0.0


OK = Behaviour()


@dataclass
class Delivery:
    endpoint: str
    fire_id: str
    schedule_id: str
    client_id: str
    attempt: int
    arrival: float
    answered: int
    header_fire_id: str | None
    header_attempt: str | None
    body: dict[str, Any] = field(repr=False)
    remote: str = field(default="", kw_only=True)  # the sender's address (keyword-only: subclasses add fields)


class Receiver:
    """A fake subscriber: records every request it gets, answers per endpoint ``Behaviour``."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, on_delivery: Callable[[Delivery], None] | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.on_delivery = on_delivery
        self.deliveries: list[Delivery] = []
        self.bad_requests: list[str] = []
        self._behaviours: dict[str, Behaviour] = {}
        self._attempts: Counter[str] = Counter()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{endpoint}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = self.port or free_port()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        return self

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def endpoint(self, name: str, behaviour: Behaviour = OK) -> str:
        self._behaviours[name] = behaviour
        return f"http://{self.host}:{self.port}/{name}"

    async def _handle(self, request: web.Request) -> web.Response:
        arrival = time.time()
        name = request.match_info["endpoint"]
        behaviour = self._behaviours.get(name, OK)
        try:
            body = json.loads(await request.read())
            fire_id = str(body["fire_id"])
        except (ValueError, KeyError, TypeError) as exc:
            self.bad_requests.append(f"{name}: {exc!r}")
            return web.Response(status=400)
        self._attempts[fire_id] += 1
        status = self._status(behaviour, self._attempts[fire_id])
        delivery = Delivery(
            name,
            fire_id,
            str(body.get("schedule_id")),
            str(body.get("client_id")),
            _int(body.get("attempt")),
            arrival,
            status,
            request.headers.get("X-Tickd-Fire-Id"),
            request.headers.get("X-Tickd-Attempt"),
            body,
            remote=request.remote or "",
        )
        self.deliveries.append(delivery)
        if self.on_delivery is not None:
            self.on_delivery(delivery)
        if behaviour.hang:
            await self._closing.wait()
        elif behaviour.delay_s:
            await asyncio.sleep(behaviour.delay_s)
        return web.Response(status=status)

    @staticmethod
    def _status(behaviour: Behaviour, attempt: int) -> int:
        if behaviour.always_fail or behaviour.hang or attempt <= behaviour.fail_first:
            return 500 if not behaviour.hang else 503
        return 200

    def of(self, endpoint: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.endpoint == endpoint]


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return -1


# --------------------------------------------------------------------------- Kafka counter


class KafkaCounter:
    """Consumes one topic from the earliest offset and counts records by fire id (a record read twice by
    the counter itself, after a reconnect, is counted once: records are keyed by partition and offset)."""

    def __init__(self, topic: str, bootstrap: str = KAFKA_BOOTSTRAP, partitions: int = 4) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.records: dict[tuple[int, int], tuple[str, float]] = {}
        self.by_fire: Counter[str] = Counter()
        self.first_arrival: dict[str, float] = {}
        self.problems: list[str] = []
        self.reconnects = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def create_topic(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(self.topic, self.partitions, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            await admin.close()

    async def start(self) -> KafkaCounter:
        await self.create_topic()
        self._task = asyncio.create_task(self._run(), name=f"kafka-counter-{self.topic}")
        return self

    async def _run(self) -> None:
        while not self._stop.is_set():
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
            )
            try:
                await consumer.start()
                consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
                await consumer.seek_to_beginning()
                while not self._stop.is_set():
                    batches = await consumer.getmany(timeout_ms=300, max_records=5000)
                    for records in batches.values():
                        for record in records:
                            self._count(record)
            except KafkaError as exc:
                self.reconnects += 1
                self.problems.append(f"consumer restarted after {type(exc).__name__}: {exc}")
                await asyncio.sleep(1)
            finally:
                await consumer.stop()

    def _count(self, record: Any) -> None:
        where = (record.partition, record.offset)
        if where in self.records:
            return
        arrival = time.time()
        try:
            fire_id = str(json.loads(record.value)["fire_id"])
        except (ValueError, KeyError, TypeError) as exc:
            self.problems.append(f"undecodable record at {where}: {exc!r}")
            return
        headers = {k: v.decode(errors="replace") for k, v in (record.headers or ())}
        if headers.get("X-Tickd-Fire-Id") != fire_id:
            self.problems.append(f"{where}: header fire id {headers.get('X-Tickd-Fire-Id')!r} != {fire_id!r}")
        key = record.key.decode(errors="replace") if record.key else None
        if key is None or not fire_id.startswith(key + ":"):
            self.problems.append(f"{where}: key {key!r} is not the schedule id of {fire_id!r}")
        self.records[where] = (fire_id, arrival)
        self.by_fire[fire_id] += 1
        self.first_arrival.setdefault(fire_id, arrival)

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout=15)


# --------------------------------------------------------------------------- test data


@dataclass(frozen=True)
class Made:
    """A schedule the test created through the API: its row as read back from the store, and the fire id
    a subscriber must see for it (``api_client.create_schedule`` / ``create_many``)."""

    schedule: Schedule
    fire_id: str

    @property
    def fire_ts(self) -> float:
        return self.schedule.fire_at.timestamp()


def spread(count: int, start: datetime, end: datetime, seed: int = 4) -> list[datetime]:
    """``count`` fire times uniformly at random in [start, end] (seeded, so runs are comparable)."""
    rng = random.Random(seed)
    span = (end - start).total_seconds()
    return [start + timedelta(seconds=rng.uniform(0, span)) for _ in range(count)]


# --------------------------------------------------------------------------- checking deliveries


@dataclass
class Tally:
    """What a subscriber saw, against what was created."""

    expected: int
    delivered: int
    missing: list[str]
    duplicated: dict[str, int]
    unknown: list[str]
    lateness: Lateness
    early: list[str]  # fire ids that arrived before their fire time (one host, one clock: a defect, never load)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.duplicated.values())

    def fields(self) -> dict[str, object]:
        return {
            "expected": self.expected,
            "delivered": self.delivered,
            "missing": len(self.missing),
            "dup_fire_ids": len(self.duplicated),
            "dup_deliveries": self.duplicates,
            "unknown": len(self.unknown),
            **self.lateness.fields(),
        }


def tally(made: Sequence[Made], arrivals: Iterable[tuple[str, float]]) -> Tally:
    """``arrivals`` are (fire id, arrival time); lateness is first arrival minus nominal fire time."""
    want = {m.fire_id: m.fire_ts for m in made}
    counts: Counter[str] = Counter()
    first: dict[str, float] = {}
    for fire_id, at in arrivals:
        counts[fire_id] += 1
        first[fire_id] = min(at, first.get(fire_id, at))
    return Tally(
        expected=len(want),
        delivered=len(set(counts) & set(want)),
        missing=sorted(set(want) - set(counts)),
        duplicated={f: n for f, n in counts.items() if n > 1},
        unknown=sorted(set(counts) - set(want)),
        lateness=Lateness.of(first[f] - want[f] for f in want if f in first),
        early=sorted(f for f in want if f in first and first[f] < want[f]),
    )


def http_arrivals(deliveries: Iterable[Delivery]) -> list[tuple[str, float]]:
    return [(d.fire_id, d.arrival) for d in deliveries]


def header_problems(deliveries: Iterable[Delivery]) -> list[str]:
    """Every delivery must carry its fire id and attempt in the headers too, and a fire id of its schedule."""
    problems = []
    for d in deliveries:
        if d.header_fire_id != d.fire_id:
            problems.append(f"{d.fire_id}: X-Tickd-Fire-Id {d.header_fire_id!r}")
        if d.header_attempt != str(d.attempt):
            problems.append(f"{d.fire_id}: X-Tickd-Attempt {d.header_attempt!r} vs body attempt {d.attempt}")
        if not d.fire_id.startswith(d.schedule_id + ":"):
            problems.append(f"{d.fire_id}: body schedule_id {d.schedule_id}")
    return problems


async def delivered_all(made: Sequence[Made], seen: Callable[[], set[str]], timeout_s: float) -> bool:
    """Wait until every fire arrived; False on timeout (the caller's tally then names what is missing, and
    the measurements are still reported before the assertion fails)."""
    want = {m.fire_id for m in made}
    try:
        await wait_until(lambda: want <= seen(), timeout_s, "")
    except AssertionError:
        print(f"{len(want - seen())} of {len(want)} fires still missing after {timeout_s:.0f} s", flush=True)
        return False
    return True


async def gather_status(nodes: Sequence[PollerProcess], prefix: str) -> dict[str, list[str]]:
    """instance -> the live nodes whose /status lists it (only instances starting with ``prefix``)."""
    owners: dict[str, list[str]] = defaultdict(list)
    live = [n for n in nodes if n.alive]
    answers: list[Any] = await asyncio.gather(*(n.status() for n in live), return_exceptions=True)
    for node, answer in zip(live, answers, strict=True):
        if isinstance(answer, dict):
            for inst in answer.get("instances", {}):
                if inst.startswith(prefix):
                    owners[inst].append(node.node_id)
    return dict(owners)


async def wait_placement(
    nodes: Sequence[PollerProcess],
    prefix: str,
    instances: set[str],
    timeout_s: float,
    accept: Callable[[dict[str, str]], bool] | None = None,
    stable_s: float = 0.0,
) -> dict[str, str]:
    """Wait until every one of ``instances`` runs on exactly one live node, ``accept`` agrees, and the
    placement has not changed for ``stable_s``; returns instance -> node."""
    deadline = time.monotonic() + timeout_s
    owners: dict[str, list[str]] = {}
    last: dict[str, str] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        owners = await gather_status(nodes, prefix)
        placed = set(owners) == instances and all(len(v) == 1 for v in owners.values())
        current = {inst: v[0] for inst, v in owners.items()} if placed else None
        if current != last:
            last, since = current, time.monotonic()
        if current is not None and (accept is None or accept(current)) and time.monotonic() - since >= stable_s:
            return current
        await asyncio.sleep(0.5)
    tails = "\n".join(f"--- {n.node_id}\n{n.tail(10)}" for n in nodes)
    raise AssertionError(f"placement not reached in {timeout_s:.0f} s; /status says {owners}\n{tails}")


async def run_concurrently(*steps: Awaitable[Any]) -> list[Any]:
    return list(await asyncio.gather(*steps))


# --------------------------------------------------------------------------- one scenario's world


class Scenario:
    """A scenario's own keyspace, store, receiver, nodes and Kafka counters; ``close`` tears all down."""

    def __init__(self, name: str, keyspace: str, store: CassandraStore, log_dir: Path, receiver: Receiver) -> None:
        self.name = name
        self.keyspace = keyspace
        self.store = store
        self.log_dir = log_dir
        self.receiver = receiver
        self.nodes: list[PollerProcess] = []
        self.counters: list[KafkaCounter] = []
        self.t0 = time.time()

    def node(self, node_id: str, log_name: str | None = None, **env: str) -> PollerProcess:
        proc = PollerProcess(node_id, self.keyspace, self.log_dir, env, log_name)
        self.nodes.append(proc)
        return proc.start()

    async def start_nodes(self, node_ids: Sequence[str], **env: str) -> list[PollerProcess]:
        procs = [self.node(n, **env) for n in node_ids]
        await asyncio.gather(*(p.wait_for("node_started", timeout_s=60) for p in procs))
        return procs

    async def kafka_counter(self, topic: str) -> KafkaCounter:
        counter = await KafkaCounter(topic).start()
        self.counters.append(counter)
        return counter

    @property
    def live(self) -> list[PollerProcess]:
        return [n for n in self.nodes if n.alive]

    def events(self, event: str) -> list[dict[str, Any]]:
        found = [dict(e, _node=n.node_id) for n in self.nodes for e in n.find(event)]
        return sorted(found, key=lambda e: e["_t"])

    def elapsed(self) -> float:
        return time.time() - self.t0

    async def close(self) -> None:
        for proc in self.nodes:
            proc.close()
        for counter in self.counters:
            await counter.close()
        await self.receiver.close()
        await self.store.close()


class Placed(Protocol):
    """A client as far as its instances go (a ``Client`` row, or an ``api_client.Tenant``)."""

    @property
    def client_id(self) -> str: ...

    @property
    def poller_count(self) -> int: ...


def instances_of(client: Placed, count: int | None = None) -> set[str]:
    return {f"{client.client_id}/{p}" for p in range(client.poller_count if count is None else count)}
