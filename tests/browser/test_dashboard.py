"""The dashboard as a tenant and as the admin would use it, in headless Chromium at laptop and phone sizes.
Each test leaves a full-page screenshot in its tmp_path."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from playwright.async_api import Route, expect

from tests.browser.conftest import (
    LAPTOP,
    PHONE,
    Dev,
    OpenPage,
    Subscriber,
    http_schedule,
    no_horizontal_scroll,
    screenshot,
    sign_in,
)


async def test_tenant_finds_a_schedule_and_cancels_another_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    keep = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=3600))
    drop = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=1800))
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)

    await page.fill("#f-search", keep["schedule_id"])
    await page.click("form.filters button[type=submit]")
    row = page.locator(f"tr[data-id='{keep['schedule_id']}']")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("scheduled")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-search")

    await page.fill("#f-search", "")
    await page.select_option("#f-status", "scheduled")
    await page.click("form.filters button[type=submit]")
    page.once("dialog", lambda dialog: dialog.accept())
    await page.locator(f"tr[data-id='{drop['schedule_id']}'] button", has_text="Cancel").click()
    await expect(page.locator(".notice-ok")).to_contain_text(f"Cancelled {drop['schedule_id']}")
    await expect(page.locator(f"tr[data-id='{drop['schedule_id']}']")).to_have_count(0)  # listed: scheduled only
    await expect(page.locator(f"tr[data-id='{keep['schedule_id']}']")).to_have_count(1)
    cancelled = await dev.call("GET", f"/v1/schedules/{drop['schedule_id']}", dev.api_key)
    assert cancelled["status"] == "cancelled"
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-after-cancel")

    await dev.call("PUT", "/v1/throttle-policies/emails", dev.api_key, {"max_in_flight": 5, "release_timeout_s": 30})
    await page.click("#nav a:has-text('Throttle policies')")
    await expect(page.locator("table.grid tbody tr", has_text="emails")).to_contain_text("0 / 5")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-policies")


async def test_tenant_finds_a_schedule_by_its_business_key(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    cart = await dev.call("PUT", "/v1/schedules/by-key/cart-4711", dev.api_key, http_schedule(subscriber, delay_s=5400))
    other = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=5400))
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)

    await page.fill("#f-search", "cart-4711")
    await page.click("form.filters button[type=submit]")
    await expect(page.locator(f"tr[data-id='{cart['schedule_id']}']")).to_have_count(1)
    await expect(page.locator("table tbody tr")).to_have_count(1)
    await screenshot(page, tmp_path, "laptop-search-business-key")

    # Text that is no business key still searches the listed schedules by the start of their id.
    await page.fill("#f-search", other["schedule_id"][:8])
    await page.click("form.filters button[type=submit]")
    await expect(page.locator(f"tr[data-id='{other['schedule_id']}']")).to_have_count(1)


async def test_a_slow_first_list_does_not_overwrite_a_search(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    """The list the page loads on sign-in answers after the search the user typed meanwhile: the search's
    one row stays (the stale list of every schedule used to replace it)."""
    cart = await dev.call("PUT", "/v1/schedules/by-key/cart-slow", dev.api_key, http_schedule(subscriber, delay_s=5400))
    for _ in range(3):
        await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=5400))
    page = await open_page(LAPTOP)
    held: asyncio.Queue[Route] = asyncio.Queue()

    async def hold_first_list(route: Route) -> None:
        if not holding:
            holding.append(route)
            await held.put(route)
        else:
            await route.continue_()

    holding: list[Route] = []
    await page.route(re.compile(r".*/v1/schedules\?.*"), hold_first_list)
    await sign_in(page, dev.api_key)
    first_list = await asyncio.wait_for(held.get(), 10)

    await page.fill("#f-search", "cart-slow")
    await page.click("form.filters button[type=submit]")
    await expect(page.locator(f"tr[data-id='{cart['schedule_id']}']")).to_have_count(1)
    async with page.expect_response(re.compile(r".*/v1/schedules\?.*")):
        await first_list.continue_()
    await page.evaluate("new Promise((done) => setTimeout(done, 300))")  # the page has handled the answer
    assert await page.locator("table tbody tr").count() == 1
    await screenshot(page, tmp_path, "laptop-search-after-slow-list")


async def test_tenant_watches_a_schedule_fire_on_its_timeline(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    created = await dev.call(
        "POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=2, payload={"marker": marker})
    )
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.locator(f"tr[data-id='{created['schedule_id']}'] a").click()

    timeline = page.locator("ol.timeline")
    await expect(timeline).to_contain_text("Created")
    await expect(timeline.locator(".step-ok")).to_contain_text("Delivered on attempt 1", timeout=15_000)
    await expect(timeline).to_contain_text("Fired")
    await expect(page.locator(".details")).to_contain_text("succeeded")
    assert any(body["payload"] == {"marker": marker} for body in subscriber.received)
    await screenshot(page, tmp_path, "laptop-timeline-delivered")


async def test_timeline_shows_a_retry_with_its_status_code_and_a_dead_letter(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    flaky = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, "/flaky", delay_s=2))
    rejected = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, "/reject", delay_s=2))
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)

    await page.goto(f"{dev.url}/ui#/schedules/{rejected['schedule_id']}")
    timeline = page.locator("ol.timeline")
    await expect(timeline.locator(".step-dead")).to_contain_text("Dead letter written", timeout=15_000)
    await expect(timeline.locator(".step-failed")).to_contain_text("Failed after 1 attempt: HTTP 400")
    await expect(timeline.locator(".step-failed .badge")).to_have_text("400")
    await screenshot(page, tmp_path, "laptop-timeline-dead-letter")

    await page.goto(f"{dev.url}/ui#/schedules/{flaky['schedule_id']}")
    await expect(timeline.locator(".step-ok")).to_contain_text("Delivered on attempt 2", timeout=15_000)
    # Each attempt, late from its own due time; the first one's step says its answer.
    await expect(timeline.locator(".step-attempt")).to_contain_text("Attempt 2 (")
    await expect(timeline.locator(".step-fire").last).to_contain_text("Fired (")
    await screenshot(page, tmp_path, "laptop-timeline-retried")


async def test_preview_marks_the_dst_gap(open_page: OpenPage, dev: Dev, tmp_path: Path) -> None:
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.click("#nav a:has-text('Cron preview')")
    await page.fill("#p-cron", "30 2 * * *")
    await page.fill("#p-timezone", "America/New_York")
    await page.fill("#p-after", "2026-03-07T00:00")
    await page.fill("#p-count", "4")
    await page.click("form.filters button[type=submit]")

    rows = page.locator("table.grid tbody tr")
    await expect(rows).to_have_count(4)
    gap = page.locator("tr.dst-gap")
    await expect(gap).to_have_count(1)
    await expect(gap).to_contain_text("2026-03-08 03:00:00")  # 02:30 does not exist that day: shifted
    await expect(gap).to_contain_text("DST gap: clocks went forward 1 h")
    await expect(page.locator("tr.dst-repeat")).to_have_count(0)
    await screenshot(page, tmp_path, "laptop-preview-dst-gap")


async def test_admin_resizes_a_quota_through_the_dialog(open_page: OpenPage, dev: Dev, tmp_path: Path) -> None:
    client_id = f"shop-{uuid.uuid4().hex[:6]}"
    await dev.call("POST", "/v1/clients", dev.admin_token, {"client_id": client_id, "poller_count": 3})
    page = await open_page(LAPTOP)
    await sign_in(page, dev.admin_token)
    row = page.locator(f"tr[data-client='{client_id}']")
    await row.locator("button", has_text="Resize").click()

    dialog = page.locator("dialog[open]")
    await page.fill("#resize-count", "1")
    await expect(dialog).to_contain_text("pollers 1\N{EN DASH}2 are not moved and not lost: those pollers drain")
    await expect(dialog).to_contain_text("poller_span stays 3")
    await screenshot(page, tmp_path, "laptop-resize-dialog")
    await page.click("#resize-confirm")

    await expect(page.locator("dialog")).to_have_count(0)
    await expect(page.locator(".notice-ok")).to_contain_text(f"{client_id}: poller_count 3 → 1 (poller_span 3)")
    await expect(row.locator(".quota")).to_have_text("1")
    await expect(row).to_contain_text("pollers 1\N{EN DASH}2")
    stored = await dev.call("GET", f"/v1/clients/{client_id}", dev.admin_token)
    assert (stored["poller_count"], stored["poller_span"]) == (1, 3)
    await screenshot(page, tmp_path, "laptop-resized")


async def test_admin_sees_the_dev_node_with_its_instances_and_epochs(
    open_page: OpenPage, dev: Dev, tmp_path: Path
) -> None:
    page = await open_page(PHONE)
    await sign_in(page, dev.admin_token)
    await page.click("#nav a:has-text('Nodes')")

    node = page.locator("section[data-node='dev']")
    await expect(node).to_contain_text("live")
    for poller in (0, 1):
        instance = node.locator(f"tr[data-instance='dev/{poller}']")
        await expect(instance).to_have_count(1, timeout=15_000)
        assert int(await instance.locator(".epoch").inner_text()) >= 1
    await expect(page.locator("#fenced")).to_contain_text("Fenced and departed nodes")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-nodes")


async def test_every_view_fits_a_phone(open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, cron="*/5 * * * *"))
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)
    views = {
        "schedules": "table.grid",
        f"schedules/{created['schedule_id']}": "ol.timeline",
        "policies": "h2",
        "dead-letters": "form.filters",
        "stats": "tr[data-window='300']",
        "preview": "form.filters",  # last: its form is submitted below
    }
    for view, ready in views.items():
        await page.goto(f"{dev.url}/ui#/{view}")
        await page.wait_for_selector(ready)
        await no_horizontal_scroll(page)
    await page.click("form.filters button[type=submit]")  # the preview table, cards on a phone
    await expect(page.locator("table.grid tbody tr")).to_have_count(10)
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-preview")

    await page.click("#signout")
    await sign_in(page, dev.admin_token)
    for view in ("cluster-stats", "cluster-stats/dev"):  # the admin's lateness views, cluster and one client
        await page.goto(f"{dev.url}/ui#/{view}")
        await page.wait_for_selector("#stats tr[data-window='300']")
        await no_horizontal_scroll(page)
    await page.goto(f"{dev.url}/ui#/clients")
    await page.locator("tr[data-client='dev'] button", has_text="Resize").click()
    await page.fill("#resize-count", "3")
    await expect(page.locator("dialog[open]")).to_contain_text("Raising the quota from 2 to 3")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-resize-dialog")
    await page.click("dialog button:has-text('Keep as is')")
    await expect(page.locator("dialog")).to_have_count(0)


async def test_tenant_sees_a_delivered_fire_in_the_lateness_panel_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    client_id = f"stats-{uuid.uuid4().hex[:6]}"
    created = await dev.call("POST", "/v1/clients", dev.admin_token, {"client_id": client_id, "poller_count": 1})
    key = created["api_key"]
    page = await open_page(PHONE)
    await sign_in(page, key)
    await page.click("#nav a:has-text('Lateness')")
    five = page.locator("tr[data-window='300']")
    await expect(five.locator("td[data-label='Fired']")).to_have_text("0")  # a new client: nothing fired yet
    await expect(five.locator("td[data-label='p50 late']")).to_have_text("\N{EM DASH}")
    await expect(page.locator("tr[data-window]")).to_have_count(3)

    fire = await dev.call("POST", "/v1/schedules", key, http_schedule(subscriber, delay_s=0, payload={"s": 1}))
    await subscriber.delivered(fire["fire_id"])
    # No reload: the panel refreshes itself while on screen, and the poller writes its counts every second.
    await expect(five.locator("td[data-label='Fired']")).to_have_text(re.compile(r"^[1-9]\d*$"), timeout=15_000)
    await expect(five.locator("td[data-label='Delivered']")).to_have_text(re.compile(r"^[1-9]\d*$"))
    await expect(five.locator("td[data-label='Failed']")).to_have_text("0")
    await expect(five.locator("td[data-label='Max late']")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    await expect(page.locator("tr[data-window='86400'] td[data-label='Fired']")).not_to_have_text("0")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-lateness")


AT_LEAST_1 = re.compile(r"^[1-9]\d*$")
AT_LEAST_2 = re.compile(r"^([2-9]|[1-9]\d+)$")


async def test_admin_sees_lateness_and_outcomes_across_the_cluster_and_for_one_client(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    client_id = f"late-{uuid.uuid4().hex[:6]}"
    created = await dev.call("POST", "/v1/clients", dev.admin_token, {"client_id": client_id, "poller_count": 1})
    key = created["api_key"]
    ok = await dev.call("POST", "/v1/schedules", key, http_schedule(subscriber, delay_s=0, payload={"ok": 1}))
    await dev.call("POST", "/v1/schedules", key, http_schedule(subscriber, "/reject", delay_s=0))  # 400: dead letter
    await subscriber.delivered(ok["fire_id"])

    page = await open_page(LAPTOP)
    await sign_in(page, dev.admin_token)
    await page.click("#nav a:has-text('Lateness')")
    await expect(page.locator("h2")).to_have_text("Lateness and callback outcomes across the cluster")
    five = page.locator("#stats tr[data-window='300']")
    # No reload: the view refreshes itself, and the poller writes its counts every second.
    await expect(five.locator("td[data-label='Failed']")).to_have_text(AT_LEAST_1, timeout=15_000)
    await expect(five.locator("td[data-label='Fired']")).to_have_text(AT_LEAST_2)
    await expect(five.locator("td[data-label='Delivered']")).to_have_text(AT_LEAST_1)
    await expect(five.locator("td[data-label='Max late']")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    await expect(page.locator("#stats tr[data-window]")).to_have_count(3)
    await expect(page.locator("#stats-at")).to_contain_text("every client together")
    await expect(page.locator("#stats")).to_have_attribute("data-client", "")
    await screenshot(page, tmp_path, "laptop-cluster-lateness")

    # One client's: from the clients list, then back to every client through the picker.
    await page.click("#nav a:has-text('Clients')")
    await page.locator(f"tr[data-client='{client_id}'] a.stats-link").click()
    await expect(page.locator("h2")).to_have_text(f"Lateness and callback outcomes: {client_id}")
    await expect(page.locator("#stats")).to_have_attribute("data-client", client_id)
    await expect(page.locator("#stats-client")).to_have_value(client_id)
    await expect(five.locator("td[data-label='Failed']")).to_have_text("1", timeout=15_000)
    await expect(five.locator("td[data-label='Fired']")).to_have_text("2")
    await expect(five.locator("td[data-label='Delivered']")).to_have_text("1")
    await expect(five.locator("td[data-label='Retried']")).to_have_text("0")
    await expect(page.locator("#stats-at")).to_contain_text(f"client {client_id} only")
    await screenshot(page, tmp_path, "laptop-one-client-lateness")

    await page.select_option("#stats-client", "")
    await expect(page.locator("h2")).to_have_text("Lateness and callback outcomes across the cluster")
    await page.select_option("#stats-client", "dev")
    await expect(page.locator("#stats")).to_have_attribute("data-client", "dev")
    assert page.url.endswith("#/cluster-stats/dev")


async def test_a_schedules_changes_show_who_did_what(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=3600))
    path = f"/v1/schedules/{created['schedule_id']}"
    await dev.call("PATCH", path, dev.api_key, {"payload": {"v": 2}})
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.goto(f"{dev.url}/ui#/schedules/{created['schedule_id']}")
    changes = page.locator("ol.changes")
    await expect(changes.locator("li")).to_have_count(2)
    await page.locator("button[data-action='pause']").click()
    await expect(changes.locator("li")).to_have_count(3)  # the pause made here, newest first
    items = changes.locator("li")
    await expect(items.nth(0)).to_contain_text("Paused")
    await expect(items.nth(1)).to_contain_text("Changed")
    await expect(items.nth(1)).to_contain_text('"bytes": 7')  # the payload as its size, not its content
    await expect(items.nth(2)).to_contain_text("Created")
    await expect(items.nth(0)).to_contain_text("by key:")
    await screenshot(page, tmp_path, "laptop-schedule-changes")
