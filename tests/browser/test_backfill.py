"""Backfill on the dashboard: from a recurring schedule's page, backfill a past range; each occurrence is
delivered once to the subscriber and shows in the timeline marked as a backfill's; the job and its range
are listed under Bulk; a range ending in the future is refused with the API's words. Against a real
tickd-dev; full-page screenshots in tmp_path. The browser's zone is UTC (conftest)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.async_api import expect

from tests.browser.conftest import LAPTOP, Dev, OpenPage, Subscriber, http_schedule, screenshot, sign_in


def _local_input(at: datetime) -> str:
    """``at`` as a ``datetime-local`` input takes it (to the minute), on the browser's clock (UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


async def test_a_past_range_is_backfilled_from_the_schedule_s_page(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, cron="* * * * *"))
    schedule_id = created["schedule_id"]
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=4)
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.goto(f"{dev.url}/ui#/schedules/{schedule_id}")
    await expect(page.locator("#s-status")).to_have_text("scheduled")

    # A range ending in the future: refused, in the API's words, naming the field.
    await page.fill("#backfill-from", _local_input(start))
    await page.fill("#backfill-to", _local_input(datetime.now(UTC) + timedelta(hours=2)))
    await page.click("#backfill-run")
    await expect(page.locator(".notice")).to_contain_text("Backfill refused: to:")

    await page.fill("#backfill-to", _local_input(start + timedelta(minutes=2)))
    await page.fill("#backfill-rate", "5")
    await page.click("#backfill-run")
    await expect(page.locator("#backfill-job")).to_have_count(1)
    nominal_ms = [int((start + timedelta(minutes=i)).timestamp() * 1000) for i in range(2)]
    fire_ids = [f"{schedule_id}:{ms}:backfill" for ms in nominal_ms]
    for fire_id in fire_ids:
        [delivery] = await subscriber.delivered(fire_id)
        assert delivery.body["fire_at"].startswith(_local_input(start)[:10])
    # The page follows the schedule: both fires show, each marked as a backfill's.
    timeline = page.locator("ol.timeline")
    for fire_id in fire_ids:
        await expect(timeline).to_contain_text(fire_id, timeout=15_000)
    await expect(timeline.locator(".badge", has_text="backfill")).to_have_count(2)
    await screenshot(page, tmp_path, "laptop-backfill-schedule")

    await page.goto(f"{dev.url}/ui#/bulk")
    row = page.locator("#jobs tr[data-state]").first
    await expect(row).to_contain_text("occurrences of")
    await expect(row).to_have_attribute("data-state", "done", timeout=15_000)
    await expect(row.locator(".matched")).to_have_text("2")
    await screenshot(page, tmp_path, "laptop-backfill-bulk")
    assert len([d for d in subscriber.deliveries if d.body.get("fire_id") in fire_ids]) == 2  # once each
