"""Notifications and the audit trail on the dashboard, in headless Chromium: a tenant sets its settings in
the form (pause after 2 failed fires, notify its endpoint), a recurring schedule failing every second is
auto-paused, the feed shows the pause and the dead letters, the subscriber received the notification, and
the schedule's Changes name the auto-pause and the tenant's own changes. Full-page screenshots at laptop
and phone sizes in tmp_path (notifications-laptop.png, notifications-phone.png, changes-laptop.png)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from playwright.async_api import expect

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


async def _tenant(dev: Dev) -> str:
    """A client of its own: its settings change no other test's schedules."""
    client_id = f"notices-{uuid.uuid4().hex[:8]}"
    created = await dev.call("POST", "/v1/clients", dev.admin_token, {"client_id": client_id, "poller_count": 1})
    return str(created["api_key"])


def _is_auto_paused(body: dict[str, Any], schedule_id: str) -> bool:
    """A delivery of the notice that ``schedule_id`` was auto-paused (the subscriber is shared with other
    tests, whose payloads are anything)."""
    payload = body.get("payload")
    return (
        isinstance(payload, dict)
        and payload.get("kind") == "schedule.auto_paused"
        and payload.get("schedule_id") == schedule_id
    )


async def _until_paused(dev: Dev, key: str, schedule_id: str) -> None:
    async with asyncio.timeout(60):
        while (await dev.call("GET", f"/v1/schedules/{schedule_id}", key))["status"] != "paused":
            await asyncio.sleep(0.2)


async def test_settings_auto_pause_feed_and_changes(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    key = await _tenant(dev)
    page = await open_page(LAPTOP)
    await sign_in(page, key)
    await page.click("a[href='#/notifications']")
    await expect(page.locator("#notify-target")).to_contain_text("none")
    await page.fill("#pause-after", "2")
    await page.fill("#notify-url", subscriber.url)
    await page.click("#settings button[type=submit]")
    await expect(page.locator(".notice-ok")).to_contain_text("Settings saved")
    await expect(page.locator("#notify-target")).to_contain_text(subscriber.url)
    saved = await dev.call("GET", "/v1/settings", key)
    assert saved["pause_after_failures"] == 2
    assert saved["notify"] == {"type": "http", "url": subscriber.url, "method": "POST", "headers": {}, "timeout_s": 5.0}
    await expect(page.locator("#retention")).to_contain_text("7 days")  # the deployment's default

    # Every second, refused for good (400): the tenant's default of 2 pauses it after two dead letters.
    made = await dev.call("POST", "/v1/schedules", key, http_schedule(subscriber, "/reject", every="1s"))
    await _until_paused(dev, key, made["schedule_id"])
    await page.reload()
    paused = page.locator("li[data-kind='schedule.auto_paused']")
    await expect(paused).to_have_count(1)
    await expect(paused.locator("a")).to_have_text(made["schedule_id"])
    assert await page.locator("li[data-kind='fire.dead_lettered']").count() >= 2
    await screenshot(page, tmp_path, "notifications-laptop")
    async with asyncio.timeout(30):  # the notify target got the same notice, as a delivery of the tenant's
        while not any(_is_auto_paused(d.body, made["schedule_id"]) for d in subscriber.deliveries):
            await asyncio.sleep(0.1)

    await paused.locator("a").click()
    changes = page.locator("ol.changes li")
    await expect(changes.first).to_contain_text("Auto-paused after failed fires")
    await expect(changes.first).to_contain_text("tickd")
    await expect(page.locator("dl.details")).to_contain_text("Pause after failuresyour default")
    await screenshot(page, tmp_path, "changes-laptop")

    phone = await open_page(PHONE)
    await sign_in(phone, key)
    await phone.goto(phone.url.split("#")[0] + "#/notifications")
    await expect(phone.locator("li[data-kind='schedule.auto_paused']")).to_have_count(1)
    await no_horizontal_scroll(phone)
    await screenshot(phone, tmp_path, "notifications-phone")


async def test_a_refused_setting_is_shown_and_changes_nothing(open_page: OpenPage, dev: Dev, tmp_path: Path) -> None:
    key = await _tenant(dev)
    page = await open_page(PHONE)
    await sign_in(page, key)
    await page.goto(page.url.split("#")[0] + "#/notifications")
    await page.fill("#notify-url", "ftp://127.0.0.1/not-http")
    await page.click("#settings button[type=submit]")
    await expect(page.locator(".notice-error")).to_contain_text("Settings refused")
    assert (await dev.call("GET", "/v1/settings", key))["notify"] is None
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "notifications-refused-phone")
