"""``schema.backfills``: which occurrences a range holds, the row that fires one, and what its subscriber and its
run see of it (a fire id of its own, the occurrence's nominal time, the backfill mark)."""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, datetime, timedelta

import msgspec

from tickd.poller import delivery
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import outcome_of
from tickd.schema import backfills, redrives, timing
from tickd.schema.model import Client, DeadLetter, HttpCallback, Location, Options, Repeat, Run, Schedule, Status

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
CLIENT = Client("c1", 4, True, "h", T0, T0)
HOOK = HttpCallback("https://example.com/hook")


def parent(repeat: Repeat) -> Schedule:
    """A recurring schedule at its fifth occurrence."""
    options = Options(repeat=repeat)
    return Schedule("c1", uuid.UUID(int=7), Location(3, T0), T0, b'{"x":1}', HOOK, T0, seq=5, options=options)


def test_a_cron_range_holds_its_occurrences_oldest_first_end_excluded() -> None:
    hourly = Repeat(cron="0 * * * *", timezone="UTC")
    found = backfills.occurrences(hourly, T0, T0 + timedelta(hours=4), 100)
    assert found == [T0 + timedelta(hours=h) for h in range(4)]
    # from in the middle of an hour: that hour's occurrence is before the range.
    assert backfills.occurrences(hourly, T0 + timedelta(minutes=1), T0 + timedelta(hours=2), 100) == [
        T0 + timedelta(hours=1)
    ]


def test_a_range_holding_more_than_the_limit_says_so_with_one_more() -> None:
    minutely = Repeat(cron="* * * * *", timezone="UTC")
    assert len(backfills.occurrences(minutely, T0, T0 + timedelta(hours=1), 10)) == 11
    assert len(backfills.occurrences(minutely, T0, T0 + timedelta(minutes=10), 10)) == 10


def test_the_rule_s_bounds_hold_but_max_fires_does_not() -> None:
    bounded = Repeat(cron="0 * * * *", timezone="UTC", start_at=T0 + timedelta(hours=2), max_fires=1)
    found = backfills.occurrences(bounded, T0, T0 + timedelta(hours=5), 100)
    assert found == [T0 + timedelta(hours=h) for h in (2, 3, 4)]


def test_an_every_rule_tickd_anchored_reaches_back_before_its_anchor_on_its_own_grid() -> None:
    anchor = T0 + timedelta(seconds=30)
    implicit = Repeat(every_s=600, start_at=anchor, implicit_start=True)
    found = backfills.occurrences(implicit, T0 - timedelta(hours=1), T0 + timedelta(minutes=21), 100)
    assert found[0] == anchor - timedelta(minutes=60) and found[-1] == anchor + timedelta(minutes=20)
    assert all((b - a) == timedelta(minutes=10) for a, b in itertools.pairwise(found))
    # A start the client gave is a bound.
    explicit = Repeat(every_s=600, start_at=anchor)
    assert backfills.occurrences(explicit, T0 - timedelta(hours=1), T0 + timedelta(minutes=1), 100) == [anchor]


def test_a_backfill_row_is_the_occurrence_s_own_fire() -> None:
    p = parent(Repeat(cron="0 * * * *", timezone="UTC"))
    nominal, due = T0 - timedelta(hours=3), T0 + timedelta(seconds=1, microseconds=1500)
    row = backfills.backfill_row(CLIENT, p, nominal, due)
    assert row.schedule_id == backfills.backfill_id(p.schedule_id, nominal) != p.schedule_id
    assert row.schedule_id == backfills.backfill_row(CLIENT, p, nominal, due + timedelta(hours=1)).schedule_id
    assert row.schedule_id != backfills.backfill_id(p.schedule_id, nominal + timedelta(hours=1))
    assert row.fire_at == nominal and row.location.due_at == timing.truncate_ms(due)
    assert row.location.poller_id == timing.poller_id_for(p.schedule_id, CLIENT.poller_count)
    assert row.public_id == p.schedule_id and row.repeat is None and row.payload == p.payload
    live = timing.fire_id(p.schedule_id, nominal)
    assert row.fire_id == f"{live}:backfill" != live
    assert (
        backfills.reservation_key(p.schedule_id, nominal) == f"backfill:{p.schedule_id}:{timing.to_epoch_ms(nominal)}"
    )


def test_its_subscriber_sees_the_schedule_the_occurrence_and_the_mark() -> None:
    p = parent(Repeat(cron="0 * * * *", timezone="UTC"))
    nominal = T0 - timedelta(hours=3)
    row = backfills.backfill_row(CLIENT, p, nominal, T0)
    body = json.loads(delivery.encode_body(row, 1, T0))
    assert body["schedule_id"] == str(p.schedule_id) and body["fire_id"] == row.fire_id
    assert body["fire_at"] == "2026-03-01T06:00:00.000Z" and body["backfill"] is True
    headers = delivery.http_headers(row, HOOK, 1)
    assert headers[delivery.BACKFILL_HEADER] == "true" and headers[delivery.FIRE_ID_HEADER] == row.fire_id
    record = delivery.kafka_record(row, 1, T0)
    assert (delivery.BACKFILL_HEADER, b"true") in record.headers
    assert msgspec.json.decode(record.value)["backfill"] is True
    assert (delivery.BACKFILL_HEADER, b"true") in delivery.kafka_headers(row, 1)
    # A live fire carries neither.
    live = json.loads(delivery.encode_body(p, 1, T0))
    assert "backfill" not in live and delivery.BACKFILL_HEADER not in delivery.http_headers(p, HOOK, 1)


def test_its_outcome_is_the_occurrence_s_run_marked_as_a_backfill_s() -> None:
    p = parent(Repeat(cron="0 * * * *", timezone="UTC"))
    nominal = T0 - timedelta(hours=3)
    row = backfills.backfill_row(CLIENT, p, nominal, T0)
    outcome = outcome_of(row, Status.SUCCEEDED, DeliveryResult.delivered(1, 200), T0)
    assert (outcome.nominal_at, outcome.run_id, outcome.backfill) == (nominal, p.schedule_id, True)


def test_a_run_stops_a_backfill_of_its_occurrence_only_if_it_was_sent() -> None:
    assert not backfills.sent(None)
    for status in (Status.SCHEDULED, Status.SUCCEEDED, Status.FAILED, Status.MOVED):  # superseded: maybe sent
        assert backfills.sent(Run(T0, status, 1, T0))
    for status in (Status.SKIPPED, Status.CANCELLED, Status.PAUSED):
        assert not backfills.sent(Run(T0, status, 0, None))


def test_after_the_schedule_was_created_only_an_occurrence_its_runs_show_passed_over_is_wanted() -> None:
    created = T0
    before, after = T0 - timedelta(hours=1), T0 + timedelta(hours=1)
    assert backfills.wanted(None, before, created)  # the timeline never ran then
    assert not backfills.wanted(None, after, created)  # no run yet: it may be on its way
    skipped = Run(after, Status.SKIPPED, 0, None, "skipped: paused")
    assert backfills.wanted(skipped, after, created) and backfills.wanted(skipped, before, created)
    for status in (Status.SCHEDULED, Status.SUCCEEDED, Status.FAILED, Status.MOVED):
        assert not backfills.wanted(Run(after, status, 1, after), after, created)
        assert not backfills.wanted(Run(before, status, 1, before), before, created)


def test_a_backfill_s_dead_letter_names_its_occurrence() -> None:
    sid = uuid.UUID(int=7)
    nominal = T0 - timedelta(hours=3)

    def letter(fire_id: str) -> DeadLetter:
        return DeadLetter("c1", sid, fire_id, T0, 3, "HTTP 500", HOOK, b"{}")

    ms = timing.to_epoch_ms(nominal)
    assert redrives.nominal_at(letter(f"{sid}:{ms}:backfill")) == nominal
    assert redrives.nominal_at(letter(f"{sid}:{ms}")) == nominal
    assert redrives.nominal_at(letter(f"{sid}:{ms}:3")) is None  # an event's
    assert redrives.nominal_at(letter(f"{sid}:{ms}:backfilled")) is None
