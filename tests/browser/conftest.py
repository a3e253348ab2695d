"""The browser tier: the dashboard (``/ui``) in headless Chromium, driven by Playwright, against a real
``tickd-dev`` process (API and poller node over the in-memory store) and a local HTTP subscriber.

The browser is Debian's ``chromium`` at /usr/bin/chromium (``make test`` installs it with apt-get when it
is missing); Playwright never downloads one. One tickd-dev, one subscriber and one browser serve the whole
tier; each test gets a fresh browser context (its own sessionStorage) at a laptop or a phone size.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

_URL = re.compile(r"API on (http://\S+), ")
_ADMIN = re.compile(r"admin token\s+: (\S+)")
_KEY = re.compile(r"API key\s+: (\S+)")


@dataclass
class Dev:
    """A running tickd-dev: its URL and the credentials its banner printed."""

    url: str
    admin_token: str
    api_key: str
    http: aiohttp.ClientSession

    async def call(self, method: str, path: str, token: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.request(method, f"{self.url}{path}", json=body, headers=headers) as resp:
            answer = await resp.json()
            assert resp.status < 300, answer
            return answer


@dataclass(frozen=True)
class Delivery:
    """One delivery a subscriber route acknowledged: the body and the ids its headers carried."""

    body: dict[str, Any]
    webhook_id: str
    fire_id: str  # X-Tickd-Fire-Id


@dataclass
class Subscriber:
    """A local HTTP endpoint the schedules call back; it keeps what arrived (``received``: the bodies
    ``/hook`` acknowledged; ``deliveries``: every acknowledged delivery with its ids)."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    async def delivered(self, fire_id: str, timeout_s: float = 15) -> list[Delivery]:
        """The acknowledged deliveries whose body carries ``fire_id``, waiting for the first one."""
        async with asyncio.timeout(timeout_s):
            while not (found := [d for d in self.deliveries if d.body.get("fire_id") == fire_id]):
                await asyncio.sleep(0.1)
        return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Fail loudly, never skip: make test installs chromium, so a missing one is a broken setup."""
    here = Path(__file__).parent
    if not CHROMIUM.exists() and any(here in item.path.parents for item in items):
        raise pytest.UsageError(f"{CHROMIUM} is missing: apt-get install -y chromium (make chromium does it)")


async def _banner(proc: asyncio.subprocess.Process) -> tuple[str, str, str]:
    assert proc.stdout is not None
    found: dict[str, str] = {}
    async with asyncio.timeout(15):
        while len(found) < 3:
            line = (await proc.stdout.readline()).decode()
            assert line, "tickd-dev exited before printing its banner"
            for name, pattern in (("url", _URL), ("admin", _ADMIN), ("key", _KEY)):
                if m := pattern.search(line):
                    found[name] = m.group(1)
    return found["url"], found["admin"], found["key"]


async def _drain(stream: asyncio.StreamReader | None) -> None:
    while stream is not None and await stream.readline():
        pass


@pytest.fixture(scope="session")
async def dev(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Dev]:
    log = (tmp_path_factory.mktemp("tickd-dev") / "stderr.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickd.service.dev", "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=log
    )
    drain: asyncio.Task[None] | None = None
    try:
        url, admin, key = await _banner(proc)
        drain = asyncio.create_task(_drain(proc.stdout))  # a full pipe would stall the process
        async with aiohttp.ClientSession() as http:
            yield Dev(url, admin, key, http)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
        if drain is not None:
            await drain
        log.close()


@pytest.fixture(scope="session")
async def subscriber() -> AsyncIterator[Subscriber]:
    found = Subscriber("")

    tried: set[str] = set()

    async def keep(request: web.Request) -> dict[str, Any]:
        body = await request.json()
        headers = request.headers
        found.deliveries.append(Delivery(body, headers["webhook-id"], headers["X-Tickd-Fire-Id"]))
        return body

    async def hook(request: web.Request) -> web.Response:
        found.received.append(await keep(request))
        return web.Response(status=204)

    refused: set[str] = set()

    async def reject_once(request: web.Request) -> web.Response:
        """Refuses a fire id's first delivery for good (400: a dead letter at once), takes the next."""
        fire_id = (await request.json())["fire_id"]
        if fire_id not in refused:
            refused.add(fire_id)
            return web.Response(status=400)
        await keep(request)
        return web.Response(status=204)

    async def reject(request: web.Request) -> web.Response:
        return web.Response(status=400)  # a 4xx other than 408/425/429 fails at once

    async def flaky(request: web.Request) -> web.Response:
        fire_id = (await request.json())["fire_id"]
        if fire_id in tried:
            return web.Response(status=204)
        tried.add(fire_id)
        return web.Response(status=503)  # retried

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/reject", reject)
    app.router.add_post("/flaky", flaky)
    app.router.add_post("/reject-once", reject_once)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


OpenPage = Callable[[dict[str, int]], Awaitable[Page]]


@pytest.fixture
async def open_page(browser: Browser, dev: Dev) -> AsyncIterator[OpenPage]:
    """A fresh context (own sessionStorage) at a viewport; fails the test on any CSP violation or
    uncaught script error the page reports."""
    contexts = []
    problems: list[str] = []

    async def open_page(viewport: dict[str, int]) -> Page:
        context = await browser.new_context(viewport=viewport, timezone_id="UTC", locale="en-GB")
        contexts.append(context)
        page = await context.new_page()
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None,
        )
        page.set_default_timeout(10_000)
        await page.goto(f"{dev.url}/ui")
        return page

    yield open_page
    for context in contexts:
        with contextlib.suppress(Exception):
            await context.close()
    assert not problems, problems


async def sign_in(page: Page, token: str) -> None:
    await page.fill("#token", token)
    await page.click("form.signin button[type=submit]")
    await page.wait_for_selector("#signout")


async def no_horizontal_scroll(page: Page) -> None:
    widths = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"page is {widths[0]} px wide in a {widths[1]} px viewport"


async def screenshot(page: Page, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


def http_schedule(subscriber: Subscriber, route: str = "/hook", **fields: Any) -> dict[str, Any]:
    url = subscriber.url.removesuffix("/hook") + route
    return {"callback": {"type": "http", "url": url}, **fields}
