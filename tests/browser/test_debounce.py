"""Debounce on the dashboard: a by-key schedule PUT in a burst with a debounce shows, on its page, the rule
(window, cap, edge) and the burst its pending fire carries (first and latest PUT), against a real
tickd-dev. Full-page screenshots in tmp_path."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import expect

from tests.browser.conftest import LAPTOP, Dev, OpenPage, Subscriber, http_schedule, screenshot, sign_in


async def test_a_debounced_schedule_shows_its_rule_and_burst(
    open_page: OpenPage, dev: Dev, subscriber: Subscriber, tmp_path: Path
) -> None:
    debounce = {"window_s": 600, "max_wait_s": 3600, "edge": "leading"}
    path = "/v1/schedules/by-key/draft-7"
    first = await dev.call("PUT", path, dev.api_key, http_schedule(subscriber, payload=1, debounce=debounce))
    # Leading: the first PUT fires at once; wait for it, so the next PUT is the burst's trailing fire.
    page = await open_page(LAPTOP)
    await sign_in(page, dev.api_key)
    await page.goto(f"{dev.url}/ui#/schedules/{first['schedule_id']}")
    await expect(page.locator("#s-status")).to_have_text("succeeded", timeout=15_000)
    later = await dev.call("PUT", path, dev.api_key, http_schedule(subscriber, payload=2, debounce=debounce))
    assert later["schedule_id"] != first["schedule_id"] and later["debounce"]["edge"] == "leading", later

    await page.goto(f"{dev.url}/ui#/schedules/{later['schedule_id']}")
    await expect(page.locator("#s-status")).to_have_text("scheduled")
    await expect(page.locator("#s-debounce")).to_have_text(
        "600 s after the latest PUT, at most 3600 s after the first; the first PUT of a burst fires at once"
    )
    await expect(page.locator("#s-debounce-burst")).to_contain_text(" to ")
    await screenshot(page, tmp_path, "laptop-debounce")
