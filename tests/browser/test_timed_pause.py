"""Timed pause on the dashboard: Pause with a "Resume at" and a note from the schedule's page, what the page
then shows (since when, until when, the note, the timeline's step), a resume time in the past refused with
the API's words, and a timed pause ending by itself while the page watches, against a real tickd-dev.
Full-page screenshots in tmp_path. The browser's zone is UTC (conftest), so its local clock is UTC's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.async_api import Page, expect

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

NOTE = "Waiting for the partner's maintenance window to end"


def _local_input(at: datetime) -> str:
    """``at`` as a ``datetime-local`` input takes it (to the minute), on the browser's clock (UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


async def _schedule(dev: Dev, schedule_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = await dev.call("GET", f"/v1/schedules/{schedule_id}", dev.api_key)
    return answer


async def _open(page: Page, dev: Dev, schedule_id: str) -> None:
    await page.goto(f"{dev.url}/ui#/schedules/{schedule_id}")
    await expect(page.locator("ol.timeline")).to_contain_text("Created")
    await expect(page.locator("#s-status")).to_have_text("scheduled")


async def test_tenant_pauses_a_schedule_until_a_time_with_a_note(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, every="2h"))
    schedule_id = created["schedule_id"]
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await _open(page, dev, schedule_id)

    resume_at = (datetime.now(UTC) + timedelta(hours=1)).replace(second=0, microsecond=0)
    await page.fill("#pause-until", _local_input(resume_at))
    await page.fill("#pause-note", NOTE)
    await page.locator("button[data-action=pause]").click()
    await expect(page.locator(".notice-ok")).to_contain_text(f"Paused: {schedule_id} resumes by itself at")
    await expect(page.locator("#s-status")).to_have_text("paused")

    paused = await _schedule(dev, schedule_id)
    assert paused["status"] == "paused"
    until = datetime.fromisoformat(paused["pause"]["until"])
    assert until == resume_at, (paused["pause"], resume_at)  # the browser's minute, sent as UTC
    assert paused["pause"]["note"] == NOTE
    assert datetime.fromisoformat(paused["due_at"]) == until

    await expect(page.locator("#s-pause-note")).to_have_text(NOTE)
    shown = page.locator("#s-pause-until time")
    await expect(shown).to_have_attribute("datetime", paused["pause"]["until"])
    await expect(shown).to_contain_text(resume_at.strftime("%H:%M:00"))
    await expect(page.locator("#s-paused-since time")).to_have_attribute("datetime", paused["pause"]["paused_at"])
    paused_step = page.locator("ol.timeline .step-pending")
    await expect(paused_step).to_contain_text("resumes by itself at")
    await expect(paused_step.locator("time").last).to_have_attribute("datetime", paused["pause"]["until"])
    last_change = page.locator("ol.changes li").first
    await expect(last_change).to_contain_text("Paused")
    await expect(last_change).to_contain_text(NOTE)
    # The options are for a schedule that can be paused: gone while it is, and emptied after use.
    await expect(page.locator("#pause-until")).to_be_hidden()
    await screenshot(page, tmp_path, "laptop-schedule-timed-pause")

    await page.locator("button[data-action=resume]").click()
    await expect(page.locator("#s-status")).to_have_text("scheduled")
    await expect(page.locator("#pause-until")).to_have_value("")
    await expect(page.locator("#pause-note")).to_have_value("")
    await expect(page.locator("#s-pause-until")).to_have_count(0)  # a resume clears the pause
    assert "pause" not in await _schedule(dev, schedule_id)
    await dev.call("DELETE", f"/v1/schedules/{schedule_id}", dev.api_key)


async def test_a_resume_time_in_the_past_is_refused_with_the_apis_words_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, every="2h"))
    schedule_id = created["schedule_id"]
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)
    await _open(page, dev, schedule_id)

    past = _local_input(datetime.now(UTC) - timedelta(hours=1))
    await page.fill("#pause-until", past)
    await page.fill("#pause-note", "too late")
    await page.locator("button[data-action=pause]").click()
    await expect(page.locator(".notice-error")).to_contain_text("Pause refused: until must be ahead of now")
    await expect(page.locator("#s-status")).to_have_text("scheduled")
    await expect(page.locator("#pause-until")).to_have_value(past)  # kept, to be corrected
    await expect(page.locator("#pause-note")).to_have_value("too late")
    after = await _schedule(dev, schedule_id)
    assert after["status"] == "scheduled"
    assert "pause" not in after
    assert after["due_at"] == created["due_at"]
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-timed-pause-refused")
    await dev.call("DELETE", f"/v1/schedules/{schedule_id}", dev.api_key)


async def test_a_timed_pause_ends_by_itself_while_the_page_watches(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, every="2h"))
    schedule_id = created["schedule_id"]
    until = (datetime.now(UTC) + timedelta(seconds=8)).isoformat()
    await dev.call("POST", f"/v1/schedules/{schedule_id}/pause", dev.api_key, {"until": until})
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.goto(f"{dev.url}/ui#/schedules/{schedule_id}")
    await expect(page.locator("#s-status")).to_have_text("paused")
    await expect(page.locator("#s-pause-note")).to_have_count(0)  # no note given

    # No reload: the page follows a timed pause to its end.
    await expect(page.locator("#s-status")).to_have_text("scheduled", timeout=30_000)
    resumed = page.locator("ol.changes li[data-action='schedule.resume_at_until']")
    await expect(resumed).to_contain_text("Resumed at its pause's end")
    await expect(page.locator("#s-pause-until")).to_have_count(0)
    assert (await _schedule(dev, schedule_id))["status"] == "scheduled"
    await screenshot(page, tmp_path, "laptop-timed-pause-ended")
    await dev.call("DELETE", f"/v1/schedules/{schedule_id}", dev.api_key)
