"""The dashboard's actions on one schedule (pause, resume, trigger now) and on dead letters (find one,
redrive it), in headless Chromium; each checks the outcome through the API or at the subscriber too and
leaves full-page screenshots in its tmp_path."""

from __future__ import annotations

import asyncio
import uuid
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


async def _status(dev: Dev, schedule_id: str) -> str:
    return str((await dev.call("GET", f"/v1/schedules/{schedule_id}", dev.api_key))["status"])


async def _open_schedule(page: Page, dev: Dev, schedule_id: str) -> None:
    await page.goto(f"{dev.url}/ui#/schedules/{schedule_id}")
    await expect(page.locator("ol.timeline")).to_contain_text("Created")


async def test_tenant_pauses_and_resumes_a_recurring_schedule_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, cron="0 * * * *"))
    schedule_id = created["schedule_id"]
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)
    await _open_schedule(page, dev, schedule_id)
    status = page.locator("#s-status")
    pause = page.locator("button[data-action=pause]")
    resume = page.locator("button[data-action=resume]")
    await expect(status).to_have_text("scheduled")
    await expect(pause).to_be_enabled()
    await expect(resume).to_be_disabled()

    await pause.click()
    await expect(page.locator(".notice-ok")).to_contain_text(f"Paused: {schedule_id} fires nothing until resumed")
    await expect(status).to_have_text("paused")
    await expect(pause).to_be_disabled()
    await expect(resume).to_be_enabled()
    await expect(page.locator("ol.timeline .step-pending")).to_contain_text("Paused")
    assert await _status(dev, schedule_id) == "paused"
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-schedule-paused")

    await resume.click()
    await expect(page.locator(".notice-ok")).to_contain_text(f"Resumed: {schedule_id} is scheduled again")
    await expect(status).to_have_text("scheduled")
    await expect(pause).to_be_enabled()
    await expect(resume).to_be_disabled()
    await expect(page.locator("ol.timeline")).to_contain_text("Next fire due")
    resumed = await dev.call("GET", f"/v1/schedules/{schedule_id}", dev.api_key)
    assert resumed["status"] == "scheduled"
    assert resumed["fire_at"] == created["fire_at"]  # the next hour: nothing fell while it was paused
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-schedule-resumed")

    # A stale page (paused, it stops refreshing) resumes what the API resumed meanwhile: the API's 409
    # not_paused is shown, then the page reads the schedule again.
    await pause.click()
    await expect(status).to_have_text("paused")
    await dev.call("POST", f"/v1/schedules/{schedule_id}/resume", dev.api_key)
    await resume.click()
    await expect(page.locator(".notice-error")).to_contain_text(
        "Resume refused: the schedule is not paused (it is scheduled)"
    )
    await expect(status).to_have_text("scheduled")


async def test_tenant_triggers_a_schedule_and_its_fire_is_delivered(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    created = await dev.call(
        "POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, delay_s=3600, payload={"marker": marker})
    )
    schedule_id = created["schedule_id"]
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await _open_schedule(page, dev, schedule_id)

    page.once("dialog", lambda dialog: dialog.accept())
    await page.locator("button[data-action=trigger]").click()
    await expect(page.locator(".notice-ok")).to_contain_text("Triggered: fire id")
    fire_id = await page.locator("#trigger-fire-id").inner_text()
    assert fire_id.startswith(f"{schedule_id}:") and fire_id != created["fire_id"]
    [delivery] = await subscriber.delivered(fire_id)
    assert delivery.body["schedule_id"] == schedule_id
    assert delivery.body["payload"] == {"marker": marker}
    assert delivery.webhook_id == delivery.fire_id == fire_id
    parent = await dev.call("GET", f"/v1/schedules/{schedule_id}", dev.api_key)
    assert (parent["status"], parent["fire_id"]) == ("scheduled", created["fire_id"])  # its timeline did not move
    await screenshot(page, tmp_path, "laptop-triggered")

    await page.click("a:has-text('Follow the trigger')")
    await expect(page.locator("ol.timeline .step-ok")).to_contain_text("Delivered on attempt 1", timeout=15_000)
    details = page.locator(".details")
    await expect(details).to_contain_text(fire_id)
    await expect(details.locator(f"a[href='#/schedules/{schedule_id}']")).to_have_count(1)  # "Trigger of"
    await screenshot(page, tmp_path, "laptop-trigger-delivered")


async def _letter_of(dev: Dev, schedule_id: str) -> dict[str, Any]:
    async with asyncio.timeout(15):
        while True:
            found = await dev.call("GET", f"/v1/dead-letters?schedule_id={schedule_id}", dev.api_key)
            if found["dead_letters"]:
                [letter] = found["dead_letters"]
                return dict(letter)
            await asyncio.sleep(0.2)


async def test_tenant_finds_a_dead_letter_and_redrives_it_with_the_original_fire_id(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    created = await dev.call(
        "POST",
        "/v1/schedules",
        dev.api_key,
        http_schedule(subscriber, "/reject-once", delay_s=1, payload={"marker": marker}),
    )
    schedule_id, fire_id = created["schedule_id"], created["fire_id"]
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)

    # The timeline links the failed fire to its dead letter.
    await _open_schedule(page, dev, schedule_id)
    dead = page.locator("ol.timeline .step-dead")
    await expect(dead.locator("a.letter-link")).to_have_count(1, timeout=15_000)
    letter = await _letter_of(dev, schedule_id)
    assert letter["fire_id"] == fire_id and letter["redriven_at"] is None
    await expect(dead.locator("a.letter-link")).to_have_attribute("href", f"#/dead-letters/{letter['dead_letter_id']}")

    # The list, filtered by the schedule, finds it.
    await page.click("#nav a:has-text('Dead letters')")
    await page.fill("#dl-schedule", schedule_id)
    await page.click("form.filters button[type=submit]")
    row = page.locator(f"tr[data-letter='{letter['dead_letter_id']}']")
    await expect(page.locator("table.grid tbody tr")).to_have_count(1)
    await expect(row).to_contain_text("dead letter")
    await expect(row).to_contain_text("HTTP 400")
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "laptop-dead-letters")

    await row.locator(f"a[href='#/dead-letters/{letter['dead_letter_id']}']").click()
    await expect(page.locator("#dl-fire-id")).to_have_text(fire_id)
    await expect(page.locator(".details")).to_contain_text(marker)
    page.once("dialog", lambda dialog: dialog.accept())
    await page.click("#dl-redrive")
    await expect(page.locator(".notice-ok")).to_contain_text(f"Redriven: fire {fire_id} is due")
    await expect(page.locator(".details")).to_contain_text("redriven")
    await expect(page.locator("#dl-redrive")).to_have_text("Redrive again")

    [delivery] = await subscriber.delivered(fire_id)  # the redriven fire, with the original fire id
    assert delivery.webhook_id == delivery.fire_id == fire_id
    assert delivery.body["schedule_id"] == schedule_id and delivery.body["payload"] == {"marker": marker}
    marked = await dev.call("GET", f"/v1/dead-letters/{letter['dead_letter_id']}", dev.api_key)
    assert marked["redriven_at"] is not None and marked["redriven_due_at"] is not None
    await screenshot(page, tmp_path, "laptop-dead-letter-redriven")

    # Redriving again answers the same marks and writes no second fire.
    page.once("dialog", lambda dialog: dialog.accept())
    await page.click("#dl-redrive")
    await expect(page.locator(".notice-ok")).to_contain_text("Already redriven; no second fire written")
    again = await dev.call("GET", f"/v1/dead-letters/{letter['dead_letter_id']}", dev.api_key)
    assert (again["redriven_at"], again["redriven_due_at"]) == (marked["redriven_at"], marked["redriven_due_at"])
    await page.click("a:has-text('Follow it on its schedule')")
    await expect(page.locator("#s-status")).to_have_text("succeeded", timeout=15_000)
    await expect(page.locator("ol.timeline .step-ok")).to_contain_text("Delivered on attempt 1")
    redriven = page.locator("ol.timeline .step-dead")  # the run says succeeded; the letter is still shown
    await expect(redriven).to_contain_text("Dead letter written, then redriven")
    await expect(redriven.locator("a.letter-link")).to_have_attribute(
        "href", f"#/dead-letters/{letter['dead_letter_id']}"
    )
    await expect(redriven.locator("button")).to_have_count(0)
    # The one fire the redrive wrote has been delivered (succeeded above); the second click wrote none (the
    # dead letter's redrive marks are unchanged), so there is nothing else to wait for.
    assert len(await subscriber.delivered(fire_id)) == 1
    await screenshot(page, tmp_path, "laptop-redriven-schedule")


async def test_tenant_redrives_a_failed_fire_from_its_timeline_on_a_phone(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    created = await dev.call("POST", "/v1/schedules", dev.api_key, http_schedule(subscriber, "/reject-once", delay_s=1))
    schedule_id, fire_id = created["schedule_id"], created["fire_id"]
    page = await open_page(PHONE)
    await sign_in(page, dev.api_key)
    await _open_schedule(page, dev, schedule_id)
    dead = page.locator("ol.timeline .step-dead")
    await expect(dead).to_contain_text("Dead letter written", timeout=15_000)
    await expect(page.locator("#s-status")).to_have_text("failed")
    redrive = dead.locator("button[data-action=redrive]")
    await expect(redrive).to_have_text("Redrive")  # once the poller has written the letter
    await expect(dead.locator("a.letter-link")).to_have_count(1)
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-timeline-dead-letter")

    page.once("dialog", lambda dialog: dialog.accept())
    await redrive.click()
    await expect(page.locator(".notice-ok")).to_contain_text(f"Redriven: fire {fire_id} is due")
    [delivery] = await subscriber.delivered(fire_id)
    assert delivery.webhook_id == fire_id
    await expect(page.locator("#s-status")).to_have_text("succeeded", timeout=15_000)
    await expect(dead).to_contain_text("Dead letter written, then redriven")
    assert await _status(dev, schedule_id) == "succeeded"
    await no_horizontal_scroll(page)
    await screenshot(page, tmp_path, "phone-timeline-redriven")
