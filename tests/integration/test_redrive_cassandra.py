"""A dead letter redriven over the API on the real Cassandra is a row a poller fires: its instance's
minute read (``read_minute``, what a poller loads) returns it scheduled, with the original fire id, and
a second redrive writes no second row. The delivery by a real poller is the acceptance tier's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api_helpers import Api, Register, schedule_body
from tickd.schema import moves, timing
from tickd.schema.model import DeadLetter, FireOutcome, Schedule, Status
from tickd.schema.store import Store

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]


async def dead_letter(store: Store, s: Schedule) -> DeadLetter:
    failed_at = timing.truncate_ms(datetime.now(UTC) - timedelta(seconds=30))
    await store.record_outcomes([FireOutcome(s.client_id, s.schedule_id, s.location, Status.FAILED, 3, failed_at)])
    letter = DeadLetter(s.client_id, s.public_id, s.fire_id, failed_at, 3, "HTTP 500", s.callback, s.payload)
    await store.add_dead_letter(letter)
    return letter


async def minute_rows(store: Store, s: Schedule) -> list[Schedule]:
    return [r async for page in store.read_minute(s.instance, s.location.minute) for r in page]


async def test_a_redriven_one_time_fire_is_read_by_its_poller(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=3600), headers=key)
    assert resp.status == 201, await resp.text()
    original = await store.get_schedule(client_id, uuid.UUID((await resp.json())["schedule_id"]))
    assert original is not None
    letter = await dead_letter(store, original)
    path = f"/v1/dead-letters/{timing.to_epoch_ms(letter.failed_at)}-{letter.schedule_id}/redrive"
    first = await api.post(path, headers=key)
    assert first.status == 200, await first.text()
    redriven = await store.get_schedule(client_id, original.schedule_id)
    assert redriven is not None and redriven.location != original.location
    rows = [r for r in await minute_rows(store, redriven) if r.schedule_id == original.schedule_id]
    assert [(r.fire_id, r.status, r.location) for r in rows] == [
        (original.fire_id, Status.SCHEDULED, redriven.location)
    ]
    before = await minute_rows(store, redriven)
    again = await api.post(path, headers=key)
    assert again.status == 200 and await again.json() == await first.json()
    # The second redrive wrote nothing: the minute is as it was, and the schedule still points at that row
    # (a second fire due "now" could land in a later minute: the schedule's reference would move to it).
    assert await minute_rows(store, redriven) == before
    assert await store.get_schedule(client_id, original.schedule_id) == redriven


async def test_a_redriven_recurring_fire_is_read_by_its_poller(api: Api, store: Store, register: Register) -> None:
    client_id, key = await register()
    resp = await api.post("/v1/schedules", json=schedule_body(delay_s=None, cron="0 3 * * *"), headers=key)
    assert resp.status == 201, await resp.text()
    occurrence = await store.get_schedule(client_id, uuid.UUID((await resp.json())["schedule_id"]))
    assert occurrence is not None
    letter = await dead_letter(store, occurrence)
    path = f"/v1/dead-letters/{timing.to_epoch_ms(letter.failed_at)}-{letter.schedule_id}/redrive"
    done = await api.post(path, headers=key)
    assert done.status == 200, await done.text()
    due = datetime.fromisoformat((await done.json())["redriven_due_at"])
    row = moves.retry_row(occurrence, due, 1, "HTTP 500")
    found = [r for r in await minute_rows(store, row) if r.schedule_id == row.schedule_id]
    assert [(r.fire_id, r.status, r.location.due_at) for r in found] == [(occurrence.fire_id, Status.SCHEDULED, due)]
