"""The cluster-test harness: the 3-node Cassandra cluster of deploy/local/cluster.py (driven through its
command line, so a test does exactly what a person would by hand) and a real ``tickd-api`` process on it.

Every step has a deadline; a step that misses it fails the test with the tail of the log that explains it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = REPO / "deploy" / "local" / "cluster.py"
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

    async def run(self, *args: str, timeout_s: float = QUICK_TIMEOUT_S, check: bool = True) -> tuple[int, str]:
        """Run ``cluster.py <args>``; its output is echoed (pytest shows it on failure)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CLUSTER_PY),
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
            raise ClusterError(f"cluster.py {' '.join(args)} did not finish within {timeout_s:.0f} s") from None
        text = out.decode(errors="replace")
        print(f"$ cluster.py {' '.join(args)}\n{text}", flush=True)
        code = proc.returncode if proc.returncode is not None else -1
        if check and code != 0:
            raise ClusterError(f"cluster.py {' '.join(args)} exited {code}:\n{text[-3000:]}")
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
