"""Calendars on the dashboard (issue 27): the calendars view, the preview with calendars named, a schedule's
rule naming them, and an excluded occurrence on its timeline, against a real tickd-dev. Each test leaves
full-page screenshots in its tmp_path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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
    screenshot,
    sign_in,
)

HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-24", "2026-12-25", "2026-12-26"]}


async def test_tenant_reads_its_calendars_and_previews_what_they_take_away(
    open_page: OpenPage, dev: Dev, tmp_path: Path
) -> None:
    await dev.call("PUT", "/v1/calendars/holidays", dev.api_key, HOLIDAYS)
    await dev.call("PUT", "/v1/calendars/weekends", dev.api_key, {"business_days": True})
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.click("#nav a:has-text('Calendars')")
    holidays = page.locator("tr[data-calendar='holidays']")
    await expect(holidays).to_contain_text("Europe/Berlin")
    await expect(holidays).to_contain_text("2026-12-24, 2026-12-25, 2026-12-26")
    await expect(page.locator("tr[data-calendar='weekends']")).to_contain_text("sat, sun")
    await screenshot(page, tmp_path, "laptop-calendars")

    await page.click("#nav a:has-text('Cron preview')")
    await page.fill("#p-cron", "0 9 * * *")
    await page.fill("#p-timezone", "Europe/Berlin")
    await page.fill("#p-after", "2026-12-23T20:00")  # the browser's zone: UTC here, evening in Berlin
    await page.fill("#p-count", "6")
    await page.fill("#p-calendars", "holidays, weekends")
    await page.click("form.filters button[type=submit]")
    rows = page.locator("table.grid tbody tr")
    await expect(rows).to_have_count(6)
    excluded = page.locator("tr.excluded")
    # From the 24th: 24, 25 and 26 Dec are holidays (the 26th a Saturday too: the first calendar named is
    # shown), the 27th a Sunday; the 28th and 29th fire.
    await expect(excluded).to_have_count(4)
    await expect(excluded.nth(0)).to_contain_text("holidays v1")
    await expect(excluded.nth(3)).to_contain_text("weekends v1")
    await expect(rows.nth(4)).to_contain_text("2026-12-28 09:00:00")
    await screenshot(page, tmp_path, "laptop-preview-calendars")

    await page.fill("#p-calendars", "holidays, nope")
    await page.click("form.filters button[type=submit]")
    await expect(page.locator(".notice-error")).to_contain_text("calendars.1")


async def test_an_occurrence_a_calendar_excludes_shows_skipped_on_the_timeline_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    # A blackout a few seconds from now, on a schedule firing every 2 s: its first fire passes over it.
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    blackout = {
        "from": start.strftime("%Y-%m-%dT%H:%M:%S"),
        "to": (start + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%S"),
    }
    await dev.call("PUT", "/v1/calendars/quiet", dev.api_key, {"ranges": [blackout]})
    created = await dev.call(
        "POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, every="2s", calendars=["quiet"])
    )
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)
    await page.goto(f"{dev.url}/ui#/schedules/{created['schedule_id']}")
    await expect(page.locator(".details")).to_contain_text("except quiet")
    skipped = page.locator("ol.timeline .step-skipped")
    await expect(skipped.first).to_contain_text("calendar quiet v1 until", timeout=30_000)
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-timeline-skipped-by-calendar")
    await dev.call("DELETE", f"/v1/schedules/{created['schedule_id']}", dev.api_key)

    await page.goto(f"{dev.url}/ui#/calendars")
    await expect(page.locator("tr[data-calendar='quiet']")).to_have_count(1)
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-calendars")
