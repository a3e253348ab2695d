"""The cluster-test harness: the 3-node Cassandra cluster of deploy/local/cluster.py (driven through its
command line, so a test does exactly what a person would by hand) and a real ``tickd-api`` process on it.

Every step has a deadline; a step that misses it fails the test with the tail of the log that explains it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.acceptance.harness import Delivery, PollerProcess
from tests.cluster.sink import READY

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = REPO / "deploy" / "local" / "cluster.py"
HOSTS_PY = REPO / "deploy" / "local" / "hosts.py"
API_BIN = Path(sys.executable).parent / "tickd-api"
LOG_ROOT = REPO / ".cache" / "cluster-tests"
ADMIN_TOKEN = "cluster-test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# cluster.py's own deadlines are 180 s per start (TICKD_INFRA_TIMEOUT_S); these bound the command around it.
UP_TIMEOUT_S = 400.0
NODE_TIMEOUT_S = 240.0
QUICK_TIMEOUT_S = 60.0

REPORT: list[str] = []


def report(scenario: str, **numbers: object) -> str:
    line = f"{scenario}: " + ", ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in numbers.items()
    )
    REPORT.append(line)
    print(line, flush=True)
    return line


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ClusterError(AssertionError):
    """A cluster.py command failed or missed its deadline (carries its output)."""


@dataclass
class Cluster:
    """``deploy/local/cluster.py`` as a test sees it: commands with deadlines, and the env that points at it."""

    env: dict[str, str] = field(default_factory=dict)

    async def run(
        self, *args: str, timeout_s: float = QUICK_TIMEOUT_S, check: bool = True, script: Path = CLUSTER_PY
    ) -> tuple[int, str]:
        """Run ``cluster.py <args>`` (or ``hosts.py``); its output is echoed (pytest shows it on failure)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            *args,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise ClusterError(f"{script.name} {' '.join(args)} did not finish within {timeout_s:.0f} s") from None
        text = out.decode(errors="replace")
        print(f"$ {script.name} {' '.join(args)}\n{text}", flush=True)
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise ClusterError(f"{script.name} {' '.join(args)} exited {code}:\n{text[-3000:]}")
        return code, text

    async def up(self) -> None:
        """Start (or reuse) every node and heal every host; then read the TICKD_* exports."""
        await self.run("up", timeout_s=UP_TIMEOUT_S)
        _, text = await self.run("env")
        self.env = dict(
            line.removeprefix("export ").split("=", 1) for line in text.splitlines() if line.startswith("export ")
        )

    async def running(self) -> bool:
        code, _ = await self.run("status", check=False)
        return code == 0

    async def kill(self, node: int) -> None:
        await self.run("kill", str(node))

    async def stop(self, node: int) -> None:
        """SIGTERM: Cassandra drains and announces its shutdown to its peers (a clean stop)."""
        await self.run("stop", str(node), timeout_s=NODE_TIMEOUT_S)

    def log_size(self, node: int) -> int:
        try:
            return server_log(node).stat().st_size
        except OSError:
            return 0

    def saw_down(self, node: int, peer: int, since: int) -> bool:
        """Whether ``node``'s log, from byte ``since`` on, says ``peer`` is now DOWN (gossip convicted it)."""
        try:
            with server_log(node).open("rb") as log:
                log.seek(since)
                return f"/{host_address(peer)}:7000 is now DOWN".encode() in log.read()
        except OSError:
            return False

    async def start(self, node: int) -> float:
        """Start one node and wait until it answers and gossips; return how long that took."""
        began = time.monotonic()
        await self.run("start", str(node), timeout_s=NODE_TIMEOUT_S)
        return time.monotonic() - began

    async def cut(self, node: int) -> None:
        """Every packet to or from the node's host dropped silently; the node keeps running."""
        await self.run("cut", str(node))

    async def heal(self, node: int) -> float:
        """Undo cut; returns 0.0 (the node never stopped: there is no start to wait for)."""
        await self.run("heal", str(node))
        return 0.0

    async def down(self) -> None:
        await self.run("down", timeout_s=QUICK_TIMEOUT_S + 30)

    async def hosts(self, count: int) -> None:
        """Test hosts 1..count exist and are healed and joined (the Cassandra nodes use 1..3)."""
        await self.run("up", str(count), script=HOSTS_PY)

    async def partition(self, index: int, others: Sequence[int]) -> None:
        """Drop every packet between host ``index`` and each of ``others``; both still reach the rest."""
        await self.run("partition", str(index), *map(str, others), script=HOSTS_PY)

    async def join(self, index: int) -> None:
        await self.run("join", str(index), script=HOSTS_PY)


def server_log(node: int) -> Path:
    """Cassandra node ``node``'s log (deploy/local/cluster.py keeps it under the infra dir)."""
    infra_dir = os.environ.get("TICKD_INFRA_DIR", "").strip() or str(REPO / ".cache" / "infra")
    return Path(infra_dir) / "cluster" / f"node{node}" / "server.log"


def host_address(index: int) -> str:
    """The address hosts.py gives host ``index`` (10.213.0.(10+index))."""
    return f"10.213.0.{10 + index}"


def netns_prefix(index: int) -> list[str]:
    return ["ip", "netns", "exec", f"tk-h{index}"]


def poller_on(index: int, node_id: str, env: Mapping[str, str], log_dir: Path, **more: str) -> PollerProcess:
    """A real ``tickd-poller`` in host ``index``'s namespace, its /status and /metrics on the host's address.
    ``env`` is the scenario's (the cluster's TICKD_* and its keyspace). Not started."""
    settings = {**env, "TICKD_METRICS_HOST": host_address(index), **more}
    return PollerProcess(node_id, settings["TICKD_KEYSPACE"], log_dir, settings, prefix=netns_prefix(index))


class SinkProcess:
    """``tests/cluster/sink.py`` in host ``index``'s namespace: every delivery it gets, read back from its
    stdout as ``Delivery`` objects (``remote`` is the sending poller's host address)."""

    def __init__(self, index: int, log_dir: Path, port: int = 8080) -> None:
        self.url = f"http://{host_address(index)}:{port}/hook"
        self.argv = [*netns_prefix(index), sys.executable, "-m", "tests.cluster.sink", host_address(index), str(port)]
        self.log_path = log_dir / "sink.log"
        self.deliveries: list[Delivery] = []
        self.ready = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> SinkProcess:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="sink", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("ab") as out:
            for raw in self.proc.stdout:
                out.write(raw)
                try:
                    fields = json.loads(raw)
                except ValueError:
                    continue
                if fields.get("event") == READY:
                    self.ready.set()
                elif isinstance(fields, dict) and "fire_id" in fields:
                    self.deliveries.append(Delivery(**fields, body={}))

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        if not await asyncio.to_thread(self.ready.wait, timeout_s):
            raise AssertionError(f"sink not ready in {timeout_s:.0f} s: {self.log_path.read_text(errors='replace')}")

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(10)
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()


class ApiProcess:
    """A real ``tickd-api`` on 127.0.0.1:<free port>, its stderr (JSON lines) copied to ``log_path``."""

    def __init__(self, env: Mapping[str, str], log_dir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / "api.log"
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "TICKD_LOG_FORMAT": "json",
            "TICKD_API_HOST": "127.0.0.1",
            "TICKD_API_PORT": str(self.port),
            "TICKD_ADMIN_TOKEN": ADMIN_TOKEN,
            "TICKD_CALLBACK_ALLOW_PRIVATE": "true",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(API_BIN)],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    async def wait_ready(self, session: aiohttp.ClientSession, timeout_s: float = 90.0) -> None:
        """Until /readyz answers 200 (the API is up and Cassandra answers it)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, f"tickd-api exited:\n{self.tail()}"
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(f"{self.base}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.5)
        raise AssertionError(f"tickd-api not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; never leaves the process behind."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


@dataclass(frozen=True)
class Answer:
    """One HTTP exchange: status (0 when no answer came within the client's deadline), seconds taken."""

    status: int
    elapsed_s: float
    body: dict[str, Any]
    retry_after: str | None


async def request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    json: Any = None,
    deadline_s: float,
) -> Answer:
    """One request bounded by ``deadline_s``; a hang comes back as status 0, never as a stuck test."""
    began = time.monotonic()
    try:
        async with session.request(
            method, url, headers=dict(headers), json=json, timeout=aiohttp.ClientTimeout(total=deadline_s)
        ) as resp:
            try:
                body = await resp.json(content_type=None)
            except ValueError:
                body = {"raw": (await resp.text())[:500]}
            return Answer(resp.status, time.monotonic() - began, body, resp.headers.get("Retry-After"))
    except (TimeoutError, aiohttp.ClientError) as exc:
        return Answer(0, time.monotonic() - began, {"client_error": repr(exc)}, None)
