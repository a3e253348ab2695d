"""The SDK's tests run against the real API: ``tickd-dev`` (the API and a poller over the in-memory
store) in a subprocess, one for the session; each test that lists gets a client (tenant) of its own."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tickd_client import DeadLetter, HttpCallback, Tickd

_URL = re.compile(r"API on (http://\S+), ")
_KEY = re.compile(r"API key\s+: (\S+)")
ADMIN_TOKEN = "sdk-test-admin-token"


@dataclass(frozen=True)
class Dev:
    url: str
    admin_token: str
    api_key: str

    def healthz(self) -> HttpCallback:
        """A callback the dev API itself answers 200: fires succeed without a subscriber."""
        return HttpCallback(f"{self.url}/healthz", method="GET")

    def refusing(self) -> HttpCallback:
        """A callback the dev API answers 404: a permanent refusal, so the first attempt leaves a dead letter."""
        return HttpCallback(f"{self.url}/no-such-hook")


def _banner(log: Path, proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        url, key = _URL.search(text), _KEY.search(text)
        if url and key:
            return url.group(1), key.group(1)
        assert proc.poll() is None, f"tickd-dev exited: {text}"
        time.sleep(0.05)
    raise AssertionError("tickd-dev printed no banner in 20 s")


@contextlib.contextmanager
def running_dev(workdir: Path) -> Iterator[Dev]:
    """A tickd-dev process on a free port, stopped on exit."""
    log = workdir / "tickd-dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tickd.service.dev", "--port", "0", "--admin-token", ADMIN_TOKEN],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        url, key = _banner(log, proc)
        yield Dev(url, ADMIN_TOKEN, key)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with running_dev(tmp_path_factory.mktemp("dev")) as started:
        yield started


@pytest.fixture
def tenant(dev: Dev) -> Iterator[Tickd]:
    """A sync client with a fresh client id of its own (and the admin token)."""
    with Tickd(dev.url, admin_token=dev.admin_token) as admin:
        created = admin.create_client(f"sdk-{uuid.uuid4().hex[:12]}", 2)
    assert created.api_key is not None
    with Tickd(dev.url, api_key=created.api_key, admin_token=dev.admin_token) as client:
        yield client


@pytest.fixture(scope="session")
def recurring(dev: Dev) -> Iterator[str]:
    """A schedule firing every second from the session's start, so that it has runs to page over."""
    with Tickd(dev.url, api_key=dev.api_key) as client:
        schedule = client.create_schedule(every="1s", callback=dev.healthz(), payload={"runs": True})
        yield schedule.schedule_id
        client.cancel_schedule(schedule.schedule_id)


def wait_for_runs(client: Tickd, schedule_id: str, at_least: int) -> None:
    deadline = time.monotonic() + 30
    while len(list(client.runs(schedule_id))) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} runs after 30 s"
        time.sleep(0.2)


def wait_for_dead_letters(client: Tickd, schedule_id: str, at_least: int = 1) -> list[DeadLetter]:
    """The schedule's dead letters, once there are ``at_least`` (tickd-dev's poller really fires)."""
    deadline = time.monotonic() + 30
    while len(found := list(client.list_dead_letters(schedule_id=schedule_id))) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} dead letters after 30 s"
        time.sleep(0.1)
    return found
