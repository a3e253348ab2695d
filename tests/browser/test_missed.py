"""Missed fires on the dashboard (issue 27, item 1): the client's default set from the settings form and a
schedule's own policy on its rule line, against a real tickd-dev. Screenshots in tmp_path."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import expect

from tests.browser.conftest import (
    LAPTOP,
    PHONE,
    Dev,
    OpenPage,
    Subscriber,
    http_schedule,
    no_horizontal_scroll,
    sign_in,
)


async def test_tenant_sets_its_default_and_reads_a_schedules_own_policy(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.click("#nav a:has-text('Notifications')")
    await expect(page.locator("#missed")).to_contain_text("every late occurrence fires (fire_all)")
    await page.select_option("#missed-policy", "skip")
    await page.fill("#missed-deadline", "45")
    await page.click("#settings form button[type=submit]")
    await expect(page.locator(".notice-ok")).to_contain_text("Settings saved.")
    await expect(page.locator("#missed")).to_contain_text("skip when more than 45 s late")
    stored = await dev.call("GET", "/v1/settings", dev.api_key)
    assert stored["missed"] == {"policy": "skip", "deadline_s": 45}
    await page.screenshot(path=str(tmp_path / "laptop-settings-missed.png"), full_page=True)

    body = http_schedule(subscriber, every="1h", missed={"policy": "fire_once", "deadline": "30s"})
    created = await dev.call("POST", "/v1/schedules", dev.api_key, body)
    phone = await open_page(PHONE)
    await sign_in(phone, dev.api_key)
    await phone.goto(f"{dev.url}/ui#/schedules/{created['schedule_id']}")
    await expect(phone.locator(".details")).to_contain_text("late: fire_once after 30 s")
    await no_horizontal_scroll(phone)
    await phone.screenshot(path=str(tmp_path / "phone-schedule-missed.png"), full_page=True)
    await dev.call("PATCH", "/v1/settings", dev.api_key, {"missed": None})  # the shared dev client as it was
