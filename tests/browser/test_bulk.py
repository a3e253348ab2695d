"""Bulk actions on the dashboard, in headless Chromium: a tenant counts the schedules a tag selects (a dry run:
nothing changes), runs the pause the count enabled, sees the job's progress to done, and every tagged
schedule is paused while another tag's is not; a malformed tag is refused in words before any request.
Full-page screenshots at laptop and phone sizes in tmp_path (bulk-laptop.png, bulk-phone.png)."""

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
    client_id = f"bulk-{uuid.uuid4().hex[:8]}"
    created = await dev.call("POST", "/v1/clients", dev.admin_token, {"client_id": client_id, "poller_count": 2})
    return str(created["api_key"])


async def test_count_then_pause_by_tag(open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path) -> None:
    key = await _tenant(dev)
    tagged = [
        (
            await dev.call(
                "POST", "/v1/schedules", key, http_schedule(subscriber, delay_s=3600 * (i + 1), tags={"team": "pay"})
            )
        )["schedule_id"]
        for i in range(5)
    ]
    other = (
        await dev.call("POST", "/v1/schedules", key, http_schedule(subscriber, delay_s=3600, tags={"team": "ops"}))
    )["schedule_id"]
    page = await open_page(LAPTOP)
    await sign_in(page, key)
    await page.click("a[href='#/bulk']")
    await expect(page.locator("#bulk-run")).to_be_disabled()

    await page.fill("#bulk-tag", "no equals sign")
    await page.click("#bulk-count")
    await expect(page.locator(".notice-error")).to_contain_text("key=value")

    await page.fill("#bulk-tag", "team=pay")
    await page.select_option("#bulk-action", "pause")
    await page.click("#bulk-count")
    await expect(page.locator("#bulk-summary")).to_contain_text("5 schedules match team=pay")
    await expect(page.locator("#bulk-run")).to_have_text("Pause 5 schedules")
    statuses = {(await dev.call("GET", f"/v1/schedules/{s}", key))["status"] for s in tagged}
    assert statuses == {"scheduled"}  # the count changed nothing

    await page.click("#bulk-run")
    await expect(page.locator(".notice-ok")).to_contain_text("Pause started for 5 schedules")
    done = page.locator("#jobs tr[data-state='done']")
    await expect(done).to_have_count(2, timeout=30_000)  # the count, then the pause, both done
    await expect(page.locator("#jobs tbody tr").first.locator(".matched")).to_have_text("5")
    async with asyncio.timeout(30):
        while {(await dev.call("GET", f"/v1/schedules/{s}", key))["status"] for s in tagged} != {"paused"}:
            await asyncio.sleep(0.2)
    assert (await dev.call("GET", f"/v1/schedules/{other}", key))["status"] == "scheduled"
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "bulk-laptop")

    phone = await open_page(PHONE)
    await sign_in(phone, key)
    await phone.click("a[href='#/bulk']")
    await expect(phone.locator("#jobs tr[data-state='done']")).to_have_count(2)
    await no_horizontal_scroll(phone)
    await screenshot(phone, tmp_path, "bulk-phone")


async def _letters(dev: Dev, key: str, count: int) -> list[dict[str, Any]]:
    async with asyncio.timeout(20):
        while len(found := (await dev.call("GET", "/v1/dead-letters", key))["dead_letters"]) < count:
            await asyncio.sleep(0.2)
    return list(found)


async def test_count_then_redrive_by_tag(open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path) -> None:
    """Two tagged schedules whose endpoint refused their fire (dead letters), one of another tag: the count
    finds the tag's two dead letters, the run redrives them, and each fire arrives again with its fire id."""
    key = await _tenant(dev)
    for tag in ("pay", "pay", "ops"):
        body = http_schedule(subscriber, "/reject-once", delay_s=1, tags={"team": tag})
        await dev.call("POST", "/v1/schedules", key, body)
    letters = await _letters(dev, key, 3)
    page = await open_page(LAPTOP)
    await sign_in(page, key)
    await page.click("a[href='#/bulk']")
    await page.fill("#bulk-tag", "team=pay")
    await page.select_option("#bulk-action", "redrive")
    await page.click("#bulk-count")
    await expect(page.locator("#bulk-summary")).to_contain_text("2 dead letters failed in the last 7 days")
    await expect(page.locator("#bulk-run")).to_have_text("Redrive 2 dead letters")
    await page.click("#bulk-run")
    await expect(page.locator(".notice-ok")).to_contain_text("Redrive started for 2 dead letters")
    await expect(page.locator("#jobs tr[data-state='done']")).to_have_count(2, timeout=30_000)
    redriven = {
        d["fire_id"] for d in (await dev.call("GET", "/v1/dead-letters", key))["dead_letters"] if d["redriven_at"]
    }
    assert len(redriven) == 2 and redriven < {d["fire_id"] for d in letters}
    for fire_id in redriven:  # the endpoint takes a fire the second time: each arrives again, same fire id
        assert len(await subscriber.delivered(fire_id)) == 1
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "bulk-redrive-laptop")
