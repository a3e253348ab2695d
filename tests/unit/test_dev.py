"""``tickd-dev`` as a user starts it: a real process, no Java on PATH, no Cassandra; its banner's key
creates a schedule and the callback arrives at a local subscriber."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from tickd_client.webhooks import verify

_URL = re.compile(r"API on (http://\S+), ")
_KEY = re.compile(r"API key\s+: (\S+)")
_SECRET = re.compile(r"signing key\s+: (whsec_\S+)")


async def _subscriber() -> tuple[web.AppRunner, int, asyncio.Queue[tuple[dict[str, str], bytes]]]:
    got: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()

    async def hook(request: web.Request) -> web.Response:
        await got.put((dict(request.headers), await request.read()))
        return web.Response(status=204)

    async def reject(request: web.Request) -> web.Response:
        return web.Response(status=400)  # a fire the subscriber refuses: failed for good at once

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/reject", reject)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1], got


def _path_without_java() -> str:
    keep = [
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "java"))
    ]
    return os.pathsep.join(keep)


async def _start_dev(env: dict[str, str], stderr: int) -> asyncio.subprocess.Process:
    """``tickd-dev --port 0`` with ``env``, its banner (and log, if ``stderr`` is STDOUT) on a pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd.service.dev", "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env
    )


@pytest.fixture
async def dev() -> AsyncIterator[tuple[asyncio.subprocess.Process, float]]:
    env = {**os.environ, "PATH": _path_without_java(), "JAVA_HOME": "/nonexistent"}
    started = time.monotonic()
    proc = await _start_dev(env, asyncio.subprocess.DEVNULL)
    try:
        yield proc, started
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)


async def _banner(proc: asyncio.subprocess.Process) -> tuple[str, str, str]:
    assert proc.stdout is not None
    url = key = secret = None
    async with asyncio.timeout(10):
        while url is None or key is None or secret is None:
            line = (await proc.stdout.readline()).decode()
            assert line, "tickd-dev exited before printing its banner"
            if m := _URL.search(line):
                url = m.group(1)
            if m := _KEY.search(line):
                key = m.group(1)
            if m := _SECRET.search(line):
                secret = m.group(1)
    return url, key, secret


async def test_a_first_callback_arrives_with_no_java_on_the_machine(
    dev: tuple[asyncio.subprocess.Process, float],
) -> None:
    proc, started = dev
    runner, port, got = await _subscriber()
    try:
        url, key, secret = await _banner(proc)
        body = {
            "delay_s": 1,
            "payload": {"hello": "dev"},
            "callback": {"type": "http", "url": f"http://127.0.0.1:{port}/hook"},
        }
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
            async with http.post(f"{url}/v1/schedules", json=body) as resp:
                assert resp.status == 201, await resp.text()
                created = await resp.json()
            async with http.post(
                f"{url}/v1/schedules", json={**body, "callback": {"type": "kafka", "topic": "orders"}}
            ) as resp:
                refused = await resp.json()
                assert resp.status == 422, refused
        # Within the wait's deadline, not a speed claim: the time from start is printed, and measured nowhere.
        headers, raw = await asyncio.wait_for(got.get(), 10)
        print(f"first callback {time.monotonic() - started:.1f} s after the process started")
        fire = json.loads(raw)
        assert fire["schedule_id"] == created["schedule_id"] and fire["payload"] == {"hello": "dev"}
        verify(secret, headers, raw)  # signed as in production, with the key the banner showed
        assert refused["error"]["field"] == "callback.type" and "--kafka" in refused["error"]["message"]
    finally:
        await runner.cleanup()
    proc.send_signal(2)  # Ctrl-C: a clean stop
    assert await asyncio.wait_for(proc.wait(), 10) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "70000"],
        ["--port", "-1"],
        ["--pollers", "0"],
        ["--pollers", "65"],
        ["--client-id", "a/b"],
        ["--client-id", ""],
        ["--client-id", "dev\n"],
        ["--client-id", "x" * 65],
        ["--client-id", "Dev"],
    ],
)
def test_bad_options_are_refused_naming_the_option(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from tickd.service.dev import parse

    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


async def test_stats_count_a_delivered_and_a_failed_fire(dev: tuple[asyncio.subprocess.Process, float]) -> None:
    """GET /v1/stats as a tenant sees it: tickd-dev's poller counts each attempt and writes the counts."""
    proc, _ = dev
    runner, port, got = await _subscriber()
    try:
        url, key, _ = await _banner(proc)
        ok = {"delay_s": 1, "callback": {"type": "http", "url": f"http://127.0.0.1:{port}/hook"}}
        dead = {"delay_s": 1, "callback": {"type": "http", "url": f"http://127.0.0.1:{port}/reject"}}
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
            for body in (ok, dead):
                async with http.post(f"{url}/v1/schedules", json=body) as resp:
                    assert resp.status == 201, await resp.text()
            await asyncio.wait_for(got.get(), 10)
            async with asyncio.timeout(15):
                while True:
                    async with http.get(f"{url}/v1/stats") as resp:
                        assert resp.status == 200, await resp.text()
                        seen = await resp.json()
                    if seen["windows"][0]["fired"] == 2 and seen["windows"][0]["failed"] == 1:
                        break
                    await asyncio.sleep(0.3)
            async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{url}/v1/stats") as resp:
                assert resp.status == 401
    finally:
        await runner.cleanup()
    assert [w["window_s"] for w in seen["windows"]] == [300, 3600, 86400]
    for window in seen["windows"]:  # one minute's counts fall in every window
        assert (window["fired"], window["delivered"], window["retried"], window["failed"]) == (2, 1, 0, 1)
        assert 0 <= window["lateness_p50_s"] <= window["lateness_p99_s"] <= window["lateness_max_s"]


async def test_each_failed_event_of_a_batch_fire_leaves_its_own_dead_letter(
    dev: tuple[asyncio.subprocess.Process, float],
) -> None:
    """Events of one fire share the schedule id of the dead letters' key: none may overwrite another, and
    each carries its event id (the id it was sent with), which a redrive refuses (found by the SDK's tests)."""
    proc, _ = dev
    runner, port, _ = await _subscriber()
    try:
        url, key, _ = await _banner(proc)
        body = {
            "delay_s": 0,
            "events": 4,
            "window": "1s",
            "callback": {"type": "http", "url": f"http://127.0.0.1:{port}/reject"},
        }
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as http:
            async with http.post(f"{url}/v1/schedules", json=body) as resp:
                assert resp.status == 201, await resp.text()
                created = await resp.json()
            query = {"schedule_id": created["schedule_id"]}
            async with asyncio.timeout(15):
                while True:
                    async with http.get(f"{url}/v1/dead-letters", params=query) as resp:
                        letters = (await resp.json())["dead_letters"]
                    if len(letters) >= 4:
                        break
                    await asyncio.sleep(0.3)
            async with http.post(f"{url}/v1/dead-letters/{letters[0]['dead_letter_id']}/redrive") as resp:
                refused = await resp.json()
                assert resp.status == 409, refused
    finally:
        await runner.cleanup()
    fire_id = created["fire_id"]
    assert sorted(letter["fire_id"] for letter in letters) == [f"{fire_id}:{i}" for i in range(4)]
    assert len({letter["dead_letter_id"] for letter in letters}) == 4
    assert refused["error"]["code"] == "not_redrivable"


async def test_the_servers_settings_apply_and_the_node_serves_what_it_advertises() -> None:
    """tickd-dev reads the servers' TICKD_* variables (it ignored every one), names those it cannot use,
    and serves the poller node's /metrics and /status on the port /v1/admin/nodes gives for it (it said
    :9108 while nothing listened there)."""
    env = {
        **os.environ,
        "TICKD_MAX_BATCH": "2",
        "TICKD_ADMIN_TOKEN": "dev-admin-token-from-env",
        "TICKD_CASSANDRA_HOSTS": "10.9.9.9",
    }
    env.pop("TICKD_METRICS_PORT", None)
    proc = await _start_dev(env, asyncio.subprocess.STDOUT)  # with the log, where the warning is
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(15):
            while not any("signing key" in line for line in lines):
                line = (await proc.stdout.readline()).decode()
                assert line, f"tickd-dev exited: {lines}"
                lines.append(line)
        text = "".join(lines)
        url = _URL.search(text)
        key = _KEY.search(text)
        poller = re.search(r"Poller node: (http://\S+)/metrics", text)
        assert url and key and poller, text
        assert "dev_settings_not_applied" in text and "TICKD_CASSANDRA_HOSTS" in text, text
        assert "dev-admin-token-from-env" in text  # the admin token it was given, not a random one
        body = {"delay_s": 60, "callback": {"type": "http", "url": "http://127.0.0.1:9/hook"}}
        async with aiohttp.ClientSession() as http:
            tenant = {"Authorization": f"Bearer {key.group(1)}"}
            async with http.post(
                f"{url.group(1)}/v1/schedules/batch", json={"schedules": [body] * 3}, headers=tenant
            ) as r:
                refused = await r.json()
                assert r.status in (400, 413, 422) and "2" in refused["error"]["message"], refused
            admin = {"Authorization": "Bearer dev-admin-token-from-env"}
            async with http.get(f"{url.group(1)}/v1/admin/nodes", headers=admin) as r:
                nodes = await r.json()
                assert r.status == 200, nodes
            async with http.get(f"{poller.group(1)}/status") as r:
                status = await r.json()
                assert r.status == 200 and status["node_id"] == "dev", status
            async with http.get(f"{poller.group(1)}/metrics") as r:
                assert r.status == 200 and "tickd_" in await r.text()
        port = int(poller.group(1).rsplit(":", 1)[1])
        assert port != 9108 and str(port) in json.dumps(nodes), (port, nodes)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
