"""Batch triggers, pure parts: where each event of a fire is due, and what an event delivery carries."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from tickd.poller import delivery
from tickd.schema import timing
from tickd.schema.model import EventOf, HttpCallback, Location, Options, Schedule

PARENT = uuid.UUID("0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10")
FIRE_AT = datetime(2026, 5, 1, 12, tzinfo=UTC)
FIRE_ID = timing.fire_id(PARENT, FIRE_AT)


def offsets(count: int, window_ms: int) -> list[timedelta]:
    return [timing.event_offset(f"{FIRE_ID}:{i}", i, count, window_ms) for i in range(count)]


@given(st.integers(1, 500), st.integers(1, 7 * 86400 * 1000))
def test_each_event_is_inside_its_own_slot_of_the_window(count: int, window_ms: int) -> None:
    found = offsets(count, window_ms)
    slot = window_ms / count
    for i, offset in enumerate(found):
        ms = offset / timedelta(milliseconds=1)
        assert i * slot - 1 <= ms < (i + 1) * slot + 1e-6
        assert 0 <= ms < window_ms


def test_offsets_are_fixed_by_the_event_id() -> None:
    assert offsets(120, 120_000) == offsets(120, 120_000)
    other = [timing.event_offset(f"{PARENT}:1:{i}", i, 120, 120_000) for i in range(120)]
    assert other != offsets(120, 120_000)  # another fire's events sit elsewhere in their slots


def test_a_window_spreads_and_no_window_fires_all_at_once() -> None:
    spread = Counter(int(o.total_seconds() // 10) for o in offsets(120, 120_000))
    assert sorted(spread) == list(range(12)) and max(spread.values()) == 10
    assert set(offsets(50, 0)) == {timedelta(0)}


def event_row(index: int) -> Schedule:
    return Schedule(
        client_id="acme",
        schedule_id=uuid.uuid5(PARENT, f"{FIRE_ID}:{index}"),
        location=Location(1, FIRE_AT),
        fire_at=FIRE_AT,
        payload=b'{"k": 1}',
        callback=HttpCallback(url="https://example.com/cb"),
        created_at=FIRE_AT,
        options=Options(event=EventOf(PARENT, index, 120)),
    )


def test_an_event_delivery_carries_its_schedule_fire_and_event_ids() -> None:
    row = event_row(7)
    assert (row.public_id, row.fire_id, row.event_id) == (PARENT, FIRE_ID, f"{FIRE_ID}:7")
    body = json.loads(delivery.encode_body(row, 1, FIRE_AT))
    assert body["schedule_id"] == str(PARENT) and body["fire_id"] == FIRE_ID
    assert (body["event_id"], body["event_index"], body["events"]) == (f"{FIRE_ID}:7", 7, 120)
    headers = delivery.http_headers(row, HttpCallback(url="https://example.com/cb"), 1)
    assert headers["X-Tickd-Event-Id"] == f"{FIRE_ID}:7" and headers["X-Tickd-Schedule-Id"] == str(PARENT)
    record = delivery.kafka_record(row, 2, FIRE_AT)
    assert record.key == str(PARENT).encode()
    assert ("X-Tickd-Event-Id", f"{FIRE_ID}:7".encode()) in record.headers
    assert json.loads(record.value)["event_id"] == f"{FIRE_ID}:7"


def test_plain_fires_carry_no_event_fields() -> None:
    plain = dataclasses.replace(event_row(0), schedule_id=PARENT, options=None)
    assert plain.event_id is None
    assert "event_id" not in json.loads(delivery.encode_body(plain, 1, FIRE_AT))
    assert "X-Tickd-Event-Id" not in delivery.http_headers(plain, HttpCallback(url="https://e.com/"), 1)


def test_batch_is_what_expands() -> None:
    assert Options(events=5).batch and Options(window_ms=1000).batch and not Options(jitter_ms=5).batch
    assert not Options(events=5, event=EventOf(PARENT, 0, 5)).batch  # an event row fires itself
