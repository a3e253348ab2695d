"""bench-api: how fast does the API create schedules, next to the raw driver rate of the same rows?

Starts ``--api-procs`` real ``tickd-api`` processes on a fresh keyspace (``tickd_bench``, dropped and
migrated on every run), registers a client through the API, then measures in one run:

- raw driver (logged batch): the store's writes of a create (``insert_schedule`` + ``insert_ref``, and a
  horizon raise when the instance's horizon moves), taken from the store itself
  (``schema.cassandra.schedules.create_statements``), in one LOGGED batch per schedule, straight through
  cassandra-driver from this process, 256 in flight;
- single creates: ``POST /v1/schedules`` from ``--concurrency`` keep-alive aiohttp workers;
- batch creates: ``POST /v1/schedules/batch`` of ``--batch-size`` items, ``--batch-concurrency`` at once;
- raw driver (plain inserts): the same writes unbatched, to show what the logged batch costs;
- raw driver (logged batches of ``--write-group``): the grouping the API itself uses.

Every schedule: fire_at spread over the next hour, a ~1 KiB JSON payload, an HTTP callback. Each phase
stops at ``--phase-cap-s``; the API processes are killed at the end, also on error.

    .venv/bin/python -m bench.api [--schedules N] [--concurrency C] [--batch-size B] [--api-procs P]
        [--phases raw,single,wrk,batch]   # wrk: single creates driven by wrk (optional, lighter client)

The load generator is Python on the same machine: the table is followed by the CPU each party used per
schedule (this process, the API processes, Cassandra, everything else), which says who limits the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import math
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from cassandra.cluster import Cluster, Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from tickd.schema import timing
from tickd.schema.cassandra import build_cluster
from tickd.schema.cassandra.bridge import Statements, Values
from tickd.schema.cassandra.coordination import Horizons
from tickd.schema.cassandra.schedules import create_statements
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import HttpCallback, Location, Schedule, encode_callback
from tickd.schema.settings import StoreSettings

REPO = Path(__file__).resolve().parents[1]
API_BIN = Path(sys.executable).parent / "tickd-api"
WRK_SCRIPT = Path(__file__).with_name("api_wrk.lua")
ADMIN_TOKEN = "bench-admin-token"
CLIENT_ID = "bench"
POLLERS = 16
CALLBACK = HttpCallback(url="http://127.0.0.1:9/bench-hook", headers={"X-Bench": "1"})
BLOB = "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=1000))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- what one phase measured ------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    wanted: int
    done: int = 0
    failed: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    # Percentiles measured elsewhere (wrk), when the latencies themselves are not here.
    given_ms: dict[float, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else math.nan

    def percentile_ms(self, q: float) -> float:
        if q in self.given_ms:
            return self.given_ms[q]
        if not self.latencies_s:
            return math.nan
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- CPU accounting: who spent the machine during a phase -------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all threads); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children_cpu_s() -> float:
    """CPU of reaped children: the wrk processes (API processes are reaped only at the end)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle, from the first line of /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


def python_ns_per_loop() -> float:
    """CPU ns per iteration of a plain Python loop: compares this machine with others (a 2020s x86
    core at full speed: ~30 ns on CPython 3.11)."""
    started = time.process_time()
    total = 0
    for i in range(1_000_000):
        total += i
    return (time.process_time() - started) * 1000


def cassandra_pid() -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if b"CassandraDaemon" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
    return None


class CpuMeter:
    """CPU seconds per party between ``start()`` and ``stop()``."""

    def __init__(self, api_pids: Sequence[int], cassandra: int | None) -> None:
        self.api_pids = list(api_pids)
        self.cassandra = cassandra
        self._start: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {
            "bench": time.process_time() + _children_cpu_s(),
            "api": sum(proc_cpu_s(p) for p in self.api_pids),
            "cassandra": proc_cpu_s(self.cassandra) if self.cassandra else 0.0,
            "machine": machine_busy_s(),
        }

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        end = self._read()
        used = {k: end[k] - self._start[k] for k in end}
        used["other"] = max(0.0, used.pop("machine") - used["bench"] - used["api"] - used["cassandra"])
        return used


# -- the API processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ApiProcesses:
    """``count`` tickd-api processes on distinct ports; stderr to ``.cache/bench-api/api-N.log``."""

    def __init__(self, count: int, settings: StoreSettings, extra_env: dict[str, str]) -> None:
        self.settings = settings
        self.ports = [free_port() for _ in range(count)]
        self.env = {
            **os.environ,
            "TICKD_KEYSPACE": settings.keyspace,
            "TICKD_ADMIN_TOKEN": ADMIN_TOKEN,
            "TICKD_CALLBACK_ALLOW_PRIVATE": "true",
            "TICKD_CREATE_RATE_PER_S": "10000000",
            "TICKD_CREATE_BURST": "10000000",
            "TICKD_LOG_LEVEL": "WARNING",
            "TICKD_LOG_FORMAT": "json",
            **extra_env,
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_dir = REPO / ".cache" / "bench-api"

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def __enter__(self) -> ApiProcesses:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i, port in enumerate(self.ports):
            with (self.log_dir / f"api-{i}.log").open("wb") as err:
                self.procs.append(
                    subprocess.Popen(
                        [str(API_BIN)],
                        env={**self.env, "TICKD_API_PORT": str(port)},
                        cwd=REPO,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                        start_new_session=True,
                    )
                )
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    async def wait_ready(self, session: aiohttp.ClientSession, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        for url, proc in zip(self.urls, self.procs, strict=True):
            while not await _answers(session, f"{url}/readyz"):
                if proc.poll() is not None:
                    raise RuntimeError(f"tickd-api exited with {proc.returncode}; see {self.log_dir}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"tickd-api at {url} not ready after {timeout_s:.0f} s")
                await asyncio.sleep(0.2)


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def register_client(session: aiohttp.ClientSession, url: str) -> str:
    body = {"client_id": CLIENT_ID, "poller_count": POLLERS}
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with session.post(f"{url}/v1/clients", json=body, headers=headers) as resp:
        if resp.status != 201:
            raise RuntimeError(f"registering the bench client: {resp.status} {await resp.text()}")
        api_key: str = (await resp.json())["api_key"]
        return api_key


# -- what we send ------------------------------------------------------------------------------------


class Bodies:
    """Request bodies: fire_at uniformly over the next hour (a minute out), a ~1 KiB payload."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._start = int(time.time()) + 60
        self._callback = encode_callback(CALLBACK).encode()

    def fire_at(self) -> int:
        return self._start + self._rng.randrange(3600)

    @staticmethod
    def payload(n: int) -> bytes:
        return b'{"order":%d,"note":"%s"}' % (n, BLOB.encode())

    def item(self, n: int) -> bytes:
        return b'{"fire_at":%d,"payload":%s,"callback":%s}' % (self.fire_at(), self.payload(n), self._callback)

    def batch(self, first: int, size: int) -> bytes:
        return b'{"schedules":[' + b",".join(self.item(first + i) for i in range(size)) + b"]}"


# -- the HTTP phases ---------------------------------------------------------------------------------


async def single_phase(
    session: aiohttp.ClientSession, urls: list[str], api_key: str, count: int, concurrency: int, cap_s: float
) -> Result:
    result, bodies, counter = Result("single creates", count), Bodies(1), itertools.count()
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    deadline = time.perf_counter() + cap_s

    async def worker() -> None:
        while (n := next(counter)) < count and time.perf_counter() < deadline:
            body, url = bodies.item(n), f"{urls[n % len(urls)]}/v1/schedules"
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                ok = resp.status == 201
            result.latencies_s.append(time.perf_counter() - started)
            result.done += ok
            result.failed += not ok

    await _timed(result, [worker() for _ in range(concurrency)])
    return result


async def batch_phase(
    session: aiohttp.ClientSession, urls: list[str], api_key: str, count: int, size: int, concurrency: int, cap_s: float
) -> Result:
    result, bodies, counter = Result("batch creates", count), Bodies(2), itertools.count()
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    batches = math.ceil(count / size)
    deadline = time.perf_counter() + cap_s

    async def worker() -> None:
        while (b := next(counter)) < batches and time.perf_counter() < deadline:
            items = min(size, count - b * size)
            body, url = bodies.batch(b * size, items), f"{urls[b % len(urls)]}/v1/schedules/batch"
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as resp:
                answer = await resp.read()
                errors = answer.count(b'"error":') if resp.status == 200 else items
            result.latencies_s.append(time.perf_counter() - started)
            result.done += items - errors
            result.failed += errors

    await _timed(result, [worker() for _ in range(concurrency)])
    return result


async def wrk_phase(urls: list[str], api_key: str, count: int, concurrency: int, cap_s: float) -> Result:
    """Single creates driven by wrk (C, one thread per API process): a lighter load generator."""
    result = Result("single creates (wrk)", count)
    env = {
        **os.environ,
        "BENCH_START": str(int(time.time()) + 60),
        "BENCH_BLOB": BLOB,
        "BENCH_CALLBACK": encode_callback(CALLBACK),
        "BENCH_KEY": api_key,
    }
    conns = max(1, concurrency // len(urls))
    procs = [
        await asyncio.create_subprocess_exec(
            *("wrk", "-t1", f"-c{conns}", f"-d{math.ceil(cap_s)}s", "--timeout", "10s", "-s", str(WRK_SCRIPT), url),
            env={**env, "BENCH_COUNT": str(math.ceil(count / len(urls)))},
            stdout=asyncio.subprocess.PIPE,
        )
        for url in urls
    ]
    outs = await asyncio.gather(*(_until_done(p) for p in procs))
    lines = [line.split()[1:] for out in outs for line in out.splitlines() if line.startswith("BENCH ")]
    if len(lines) != len(procs):
        raise RuntimeError(f"wrk said: {outs}")
    result.done = sum(int(n) - int(err) for n, err, *_ in lines)
    result.failed = sum(int(err) for _, err, *_ in lines)
    result.seconds = max(int(us) for _, _, us, *_ in lines) / 1e6
    # Per process; with several, the worst one's (latencies are not pooled).
    result.given_ms = {0.5: max(float(x[3]) for x in lines), 0.99: max(float(x[4]) for x in lines)}
    return result


async def _until_done(proc: asyncio.subprocess.Process) -> str:
    """wrk's output; it is stopped (SIGINT: it still prints its summary) once it says it is done."""
    assert proc.stdout is not None
    out = []
    while line := (await proc.stdout.readline()).decode():
        out.append(line)
        if line.startswith("BENCH_DONE") and proc.returncode is None:
            proc.send_signal(signal.SIGINT)
    await proc.wait()
    return "".join(out)


async def _timed(result: Result, workers: list[Any]) -> None:
    started = time.perf_counter()
    await asyncio.gather(*workers)
    result.seconds = time.perf_counter() - started


# -- the raw driver phases ---------------------------------------------------------------------------


class RawRows:
    """Fresh schedules placed as the API places them, and the writes ``CassandraStore`` makes for their
    create (``schema.cassandra.schedules.create_statements``: row, pointer, signals), so the raw phases
    write exactly what the store writes."""

    def __init__(self, session: Session, settings: StoreSettings, seed: int) -> None:
        self.settings = settings
        self.statements = Statements.prepare(session, settings.page_size)
        self.horizons = Horizons()  # per phase, as per API process
        self._bodies = Bodies(seed)

    def make(self, n: int) -> tuple[Schedule, list[tuple[PreparedStatement, Values]]]:
        now = timing.from_epoch_ms(int(time.time() * 1000))
        schedule_id = uuid.uuid4()
        fire_at = datetime.fromtimestamp(self._bodies.fire_at(), UTC)
        location = Location(timing.poller_id_for(schedule_id, POLLERS), timing.due_time(fire_at, now))
        schedule = Schedule(CLIENT_ID, schedule_id, location, fire_at, self._bodies.payload(n), CALLBACK, now)
        return schedule, create_statements(self.statements, schedule, now, self.settings, self.horizons)

    def written(self, schedules: list[Schedule]) -> None:
        for schedule in schedules:
            self.horizons.note(schedule.instance, schedule.location.minute)


class RawPump:
    """Keeps ``in_flight`` requests outstanding; each completion (on the driver's I/O thread) issues
    the next, like ``cassandra.concurrent``: the fastest this driver can be driven from Python.
    ``group`` schedules per logged batch (``group`` 0: each write of a create on its own)."""

    def __init__(self, session: Session, rows: RawRows, group: int, result: Result, cap_s: float) -> None:
        self.session, self.rows, self.group, self.result = session, rows, group, result
        self._issued = 0
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._outstanding = 0
        self._deadline = time.perf_counter() + cap_s

    def run(self, in_flight: int, cap_s: float) -> None:
        started = time.perf_counter()
        for _ in range(in_flight):
            self._issue()
        self._finished.wait(timeout=cap_s + 30)
        self.result.seconds = time.perf_counter() - started

    def _take(self) -> range:
        with self._lock:
            first = self._issued
            if first >= self.result.wanted or time.perf_counter() > self._deadline:
                if self._outstanding == 0:
                    self._finished.set()
                return range(0)
            self._issued = min(self.result.wanted, first + max(1, self.group))
            self._outstanding += 1
            return range(first, self._issued)

    def _issue(self) -> None:
        numbers = self._take()
        if not numbers:
            return
        made = [self.rows.make(n) for n in numbers]
        schedules = [schedule for schedule, _ in made]
        started = time.perf_counter()
        if self.group == 0:
            (_, writes), *_ = made
            futures = [self.session.execute_async(stmt, values) for stmt, values in writes]
            self._watch(futures, schedules, started)
            return
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        for _, writes in made:
            for stmt, values in writes:
                batch.add(stmt, values)
        batch.is_idempotent = True
        self._watch([self.session.execute_async(batch)], schedules, started)

    def _watch(self, futures: list[Any], schedules: list[Schedule], started: float) -> None:
        count = len(schedules)
        state = {"left": len(futures), "ok": True}

        def settle(ok: bool) -> None:
            with self._lock:
                state["left"] -= 1
                state["ok"] = state["ok"] and ok
                if state["left"]:
                    return
                self._outstanding -= 1
                self.result.done += count if state["ok"] else 0
                self.result.failed += 0 if state["ok"] else count
            if state["ok"]:
                self.rows.written(schedules)
            self.result.latencies_s.append(time.perf_counter() - started)
            self._issue()

        for future in futures:
            future.add_callbacks(lambda _rows: settle(True), lambda _exc: settle(False))


RAW_LOGGED = "raw driver (logged batch)"


def raw_name(group: int) -> str:
    if group == 0:
        return "raw driver (plain inserts)"
    return RAW_LOGGED if group == 1 else f"raw driver (logged batches of {group})"


def raw_phase(cluster: Cluster, settings: StoreSettings, group: int, count: int, cap_s: float) -> Result:
    """Runs in a thread: the pump lives on the driver's I/O thread; this one only waits."""
    result = Result(raw_name(group), count)
    session = cluster.connect(settings.keyspace)
    try:
        rows = RawRows(session, settings, seed=3 + group)
        RawPump(session, rows, group, result, cap_s).run(in_flight=256 // max(1, group), cap_s=cap_s)
    finally:
        session.shutdown()
    return result


# -- the run -----------------------------------------------------------------------------------------


@dataclass
class Plan:
    args: argparse.Namespace
    meter: CpuMeter
    results: list[Result] = field(default_factory=list)
    background: dict[str, float] = field(default_factory=dict)
    loop_ns: float = math.nan

    async def measure(self, phase: Awaitable[Result]) -> None:
        self.meter.start()
        result = await phase
        result.cpu_s = self.meter.stop()
        self.results.append(result)
        log(f"{result.name}: {result.done} in {result.seconds:.1f} s = {result.rate:.0f}/s, {result.failed} failed")

    async def measure_background(self, seconds: float) -> None:
        """What the machine does without us: other processes, and Cassandra serving them."""
        self.meter.start()
        await asyncio.sleep(seconds)
        self.background = {k: v / seconds for k, v in self.meter.stop().items()}
        self.loop_ns = python_ns_per_loop()


async def phases(plan: Plan, apis: ApiProcesses, session: aiohttp.ClientSession, cluster: Cluster) -> None:
    args, settings, urls, cap = plan.args, apis.settings, apis.urls, plan.args.phase_cap_s
    api_key = await register_client(session, urls[0])
    await plan.measure_background(3.0)
    if "raw" in args.phases:
        await plan.measure(asyncio.to_thread(raw_phase, cluster, settings, 1, args.raw_schedules, cap))
    if "single" in args.phases:
        await plan.measure(single_phase(session, urls, api_key, args.schedules, args.concurrency, cap))
    if "wrk" in args.phases:
        await plan.measure(wrk_phase(urls, api_key, args.schedules, args.concurrency, cap))
    if "batch" in args.phases:
        size, conc = args.batch_size, args.batch_concurrency
        await plan.measure(batch_phase(session, urls, api_key, args.batch_schedules, size, conc, cap))
    if "raw" in args.phases:
        await plan.measure(asyncio.to_thread(raw_phase, cluster, settings, 0, args.raw_schedules, cap))
        group = args.write_group
        await plan.measure(asyncio.to_thread(raw_phase, cluster, settings, group, args.raw_schedules, cap))


async def run(args: argparse.Namespace) -> Plan:
    settings = dataclasses.replace(StoreSettings.from_env(), keyspace=args.keyspace)
    log(f"fresh keyspace {settings.keyspace}, {args.api_procs} tickd-api process(es)")
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    extra = {"TICKD_WRITE_GROUP": str(args.write_group), **dict(kv.split("=", 1) for kv in args.api_env)}
    connector = aiohttp.TCPConnector(limit=max(args.concurrency, args.batch_concurrency))
    with ApiProcesses(args.api_procs, settings, extra) as apis:
        cluster = build_cluster(settings)
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
                await apis.wait_ready(session)
                log(f"tickd-api ready: pids {apis.pids}")
                plan = Plan(args, CpuMeter(apis.pids, cassandra_pid()))
                await phases(plan, apis, session, cluster)
        finally:
            await asyncio.to_thread(cluster.shutdown)
    return plan


# -- the report --------------------------------------------------------------------------------------


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def print_report(plan: Plan, args: argparse.Namespace) -> None:
    results = plan.results
    raw = next((r.rate for r in results if r.name == RAW_LOGGED), math.nan)
    print(f"\n### bench-api: {os.cpu_count()} cores ({cpu_model()}), {args.api_procs} tickd-api process(es)\n")
    print("| phase | schedules | wall s | schedules/s | p50 ms | p99 ms | % of raw |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        share = f"{100 * r.rate / raw:.0f}%" if not math.isnan(raw) else "-"
        capped = " (capped)" if r.done + r.failed < r.wanted else ""
        failed = f" ({r.failed} failed)" if r.failed else ""
        print(
            f"| {r.name}{capped}{failed} | {r.done} | {r.seconds:.1f} | {r.rate:.0f} | "
            f"{r.percentile_ms(0.5):.1f} | {r.percentile_ms(0.99):.1f} | {share} |"
        )
    print("\nCPU per schedule (µs; ~1,000,000 µs per core-second):\n")
    print("| phase | bench process | tickd-api | cassandra | everything else | machine busy |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        per = {k: 1e6 * v / max(r.done, 1) for k, v in r.cpu_s.items()}
        busy = 100 * sum(r.cpu_s.values()) / (max(r.seconds, 1e-9) * (os.cpu_count() or 1))
        print(
            f"| {r.name} | {per['bench']:.0f} | {per['api']:.0f} | {per['cassandra']:.0f} | "
            f"{per['other']:.0f} | {busy:.0f}% |"
        )
    bg = plan.background
    print(
        f"\nBackground before the phases (not ours): {bg.get('other', 0) + bg.get('cassandra', 0):.2f} cores busy, "
        f"of which Cassandra {bg.get('cassandra', 0):.2f}; it is inside the CPU figures above. A plain Python "
        f"loop iteration cost {plan.loop_ns:.0f} ns of CPU here (~30 ns on a 2020s x86 core at full speed)."
    )
    print(
        f"\nsingle: {args.concurrency} keep-alive workers; batch: {args.batch_size} per request, "
        f"{args.batch_concurrency} in flight; API TICKD_WRITE_GROUP={args.write_group}. Raw: 256 schedules in "
        "flight on one driver session, from this process. % of raw = of the raw logged batch per schedule "
        "(the store's write for one create); the API groups creates (last raw row: the same grouping, raw). "
        "Latency of a batch row is per request. Phases ran in this order on one keyspace. The load generator "
        "(this process) is Python on the same cores as the API and Cassandra: its CPU is in the second table."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench-api", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000, help="single creates")
    parser.add_argument("--batch-schedules", type=int, help="schedules created in batches (default 2 x --schedules)")
    parser.add_argument("--raw-schedules", type=int, help="rows per raw driver phase (default --batch-schedules)")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent single-create workers")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--batch-concurrency", type=int, default=4, help="batch requests in flight")
    parser.add_argument("--api-procs", type=int, default=1)
    parser.add_argument(
        "--write-group", type=int, default=8, help="TICKD_WRITE_GROUP of the API, and of the last raw phase"
    )
    parser.add_argument("--phase-cap-s", type=float, default=60.0, help="each phase stops after this long")
    parser.add_argument(
        "--phases", default="raw,single,batch", help="comma-separated: raw, single, wrk (single creates by wrk), batch"
    )
    parser.add_argument("--keyspace", default="tickd_bench")
    parser.add_argument("--api-env", action="append", default=[], metavar="NAME=VALUE", help="extra API env")
    args = parser.parse_args(argv)
    args.batch_schedules = args.batch_schedules or 2 * args.schedules
    args.raw_schedules = args.raw_schedules or args.batch_schedules
    args.phases = set(args.phases.split(","))
    if "wrk" in args.phases and shutil.which("wrk") is None:
        parser.error("the wrk phase needs wrk on PATH (Debian: apt-get install wrk)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = asyncio.run(run(args))
    print_report(plan, args)
    return 0 if all(r.failed == 0 for r in plan.results) else 1


if __name__ == "__main__":
    sys.exit(main())
