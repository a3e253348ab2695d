"""The dashboard against hostile addresses: an id taken from the URL hash goes into a request path only
if it matches its grammar, and encoded; anything else is refused in the page, before any request, so
``#/schedules/..%2F..%2Fadmin`` or ``#/schedules/x?y#z`` can neither reach another endpoint nor add a
query. And /docs (Swagger UI) and /docs/plain render under their Content Security Policies with nothing
refused."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Page, Request, expect

from tests.browser.conftest import LAPTOP, Dev, OpenPage, Subscriber, http_schedule, sign_in

HOSTILE_SCHEDULES = [
    "..%2F..%2Fadmin",
    "..%2F..%2Fv1%2Fclients",
    "x?y#z",
    "../../v1/clients",
    "..",
    "%2e%2e",
    "%E0%A4%A",  # a malformed escape
    "6f1c0000-0000-4000-8000-000000000000%2Frelease",
    "6f1c0000-0000-4000-8000-000000000000?limit=1",
    "6f1c0000-0000-4000-8000-000000000000/runs",
    "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E",
]


class Requests:
    """Every request the page sends to the API, as the path and query the server would see."""

    def __init__(self, page: Page) -> None:
        self.seen: list[str] = []
        page.on("request", self._keep)

    def _keep(self, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.path.startswith("/v1/") or parts.path == "/v1":
            self.seen.append(parts.path + (f"?{parts.query}" if parts.query else ""))

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen

    def others(self) -> list[str]:
        """What ``take`` gives, less the next pages of the schedules list shown before (it follows its
        cursors even after the view changed, and a loaded machine can pause between two of them)."""
        return [p for p in self.take() if not (p.startswith("/v1/schedules?from=") and "&cursor=" in p)]

    async def quiet(self, page: Page) -> None:
        """Wait until the page has sent no API request for 0.6 s (a list follows its cursors for a
        while), then forget what it sent."""
        for _ in range(30):
            before = len(self.seen)
            await page.evaluate("new Promise((done) => setTimeout(done, 600))")
            if len(self.seen) == before:
                break
        self.take()


async def _settle(page: Page) -> None:
    await page.evaluate("new Promise((done) => setTimeout(done, 300))")  # any request the view makes is out


async def _visit(page: Page, dev: Dev, hash_: str) -> None:
    await page.goto(f"{dev.url}/ui#{hash_}")
    await _settle(page)  # any request the view would make is out by now


@pytest.mark.parametrize("hostile", HOSTILE_SCHEDULES)
async def test_a_hostile_schedule_id_in_the_hash_sends_no_request(open_page: OpenPage, dev: Dev, hostile: str) -> None:
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    requests = Requests(page)
    await requests.quiet(page)  # the list shown after sign-in
    await _visit(page, dev, f"/schedules/{hostile}")
    assert requests.others() == []
    await expect(page.locator(".notice-error")).to_contain_text("is not a valid schedule id")
    assert await page.locator("img").count() == 0  # the text is shown as text


async def test_hostile_ids_for_dead_letters_and_client_stats_send_no_request(open_page: OpenPage, dev: Dev) -> None:
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    requests = Requests(page)
    await requests.quiet(page)
    await _visit(page, dev, "/dead-letters/..%2F..%2Fv1%2Fclients")
    await expect(page.locator(".notice-error")).to_contain_text("is not a valid dead letter id")
    assert requests.others() == []

    admin = await open_page(LAPTOP)
    await sign_in(admin, dev.admin_token)
    as_admin = Requests(admin)
    await as_admin.quiet(admin)
    await _visit(admin, dev, "/cluster-stats/..%2Fnodes")
    await expect(admin.locator(".notice-error")).to_contain_text("is not a valid client id")
    assert as_admin.others() == []


async def test_a_valid_id_from_the_hash_reaches_exactly_its_own_endpoints(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=3600))
    schedule_id = created["schedule_id"]
    unknown = str(uuid.uuid4())
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    requests = Requests(page)
    await requests.quiet(page)
    await _visit(page, dev, f"/schedules/{schedule_id}")
    await expect(page.locator("h2.mono")).to_have_text(schedule_id)
    paths = {p.split("?", 1)[0] for p in requests.others()}
    own = {"", "/runs", "/audit"}
    assert paths <= {f"/v1/schedules/{schedule_id}{part}" for part in own} | {"/v1/dead-letters"}
    assert f"/v1/schedules/{schedule_id}" in paths
    await _visit(page, dev, f"/schedules/{unknown}")
    await expect(page.locator(".notice-error")).to_contain_text("no such schedule")  # asked, and answered 404
    assert f"/v1/schedules/{unknown}" in {p.split("?", 1)[0] for p in requests.others()}


async def test_a_hostile_business_key_in_the_search_is_never_put_in_a_path(open_page: OpenPage, dev: Dev) -> None:
    """The search tries a text as a business key first (GET /v1/schedules/by-key/<key>): ".." would be
    resolved away by the browser and list the schedules instead, "a/b" would reach another path."""
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    requests = Requests(page)
    for text in ("..", "a/b", "x?y"):
        await requests.quiet(page)
        await page.fill("#f-search", text)
        await page.click("form.filters button[type=submit]")
        await _settle(page)
        seen = requests.take()
        assert not [p for p in seen if "by-key" in p], (text, seen)
        assert all(p.startswith("/v1/schedules?") for p in seen), (text, seen)
    await requests.quiet(page)
    await page.fill("#f-search", "cart-4711")
    await page.click("form.filters button[type=submit]")
    await _settle(page)
    assert "/v1/schedules/by-key/cart-4711" in requests.take()


async def test_swagger_ui_renders_every_operation_and_body_under_its_csp(open_page: OpenPage, dev: Dev) -> None:
    """/docs: Swagger UI from this origin draws every operation of /openapi.json, and a request body as a
    model (fields, types, patterns' descriptions), with no CSP violation and no request leaving the origin."""
    page = await open_page(LAPTOP)
    elsewhere: list[str] = []
    page.on("request", lambda r: elsewhere.append(r.url) if not r.url.startswith(dev.url) else None)
    response = await page.goto(f"{dev.url}/docs")
    assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
    spec = await (await page.request.get(f"{dev.url}/openapi.json")).json()
    operations = sum(len(methods) for methods in spec["paths"].values())
    await expect(page.locator(".opblock")).to_have_count(operations)
    create = page.locator(".opblock-post", has_text="/v1/schedules").first
    await create.locator(".opblock-summary").click()
    await create.get_by_text("Schema", exact=True).first.click()
    await expect(create.locator(".model-box").first).to_contain_text("callback")
    assert elsewhere == [], elsewhere


async def test_the_plain_docs_page_renders_under_its_csp(open_page: OpenPage, dev: Dev) -> None:
    """open_page fails the test on any CSP violation the page reports; the inline stylesheet applies."""
    page = await open_page(LAPTOP)
    response = await page.goto(f"{dev.url}/docs/plain")
    assert response is not None and "default-src 'none'" in response.headers["content-security-policy"]
    await expect(page.locator("h1")).to_contain_text("tickd API")
    assert await page.evaluate("getComputedStyle(document.body).maxWidth") == "960px"
