"""Calendars (``schema.calendars``): which occurrences a calendar excludes, read on its own wall clock; the
next occurrence no calendar excludes, jumping over each exclusion without passing an allowed one (DST
gaps and repeated hours included); the preview; and refusals naming the field."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest

from tickd.schema import calendars as cal
from tickd.schema import recurrence as rec
from tickd.schema.errors import InvalidInput

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def cron(expr: str, zone: str = "UTC") -> rec.Recurrence:
    return rec.Recurrence(rec.CronRule(expr, zone))


def every(seconds: int, start: datetime) -> rec.Recurrence:
    return rec.Recurrence(rec.EveryRule(seconds), start_at=start)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_holidays_are_skipped_one_stretch_each_and_the_timeline_keeps_its_times() -> None:
    holidays = cal.parse_calendar("holidays", timezone="Europe/Berlin", dates=["2026-12-26", "2026-12-25"])
    daily = cron("0 9 * * *", "Europe/Berlin")
    after = datetime(2026, 12, 24, 9, tzinfo=BERLIN)
    found, passed = cal.next_allowed(daily, after, [holidays])
    assert found == datetime(2026, 12, 27, 9, tzinfo=BERLIN)
    assert [(p.first, p.until) for p in passed] == [
        (datetime(2026, 12, 25, 9, tzinfo=BERLIN), datetime(2026, 12, 26, tzinfo=BERLIN)),
        (datetime(2026, 12, 26, 9, tzinfo=BERLIN), datetime(2026, 12, 27, tzinfo=BERLIN)),
    ]
    assert {p.reason() for p in passed} == {"skipped: calendar holidays v1"}
    assert cal.next_allowed(daily, after, []) == (datetime(2026, 12, 25, 9, tzinfo=BERLIN), [])


def test_a_calendar_reads_the_occurrence_on_its_own_wall_clock() -> None:
    christmas = cal.parse_calendar("xmas", timezone="Europe/Berlin", dates=["2026-12-25"])
    nightly = cron("30 23 * * *")  # 23:30 UTC is 00:30 the next day in Berlin
    found, passed = cal.next_allowed(nightly, utc(2026, 12, 23, 23, 30), [christmas])
    assert [p.first for p in passed] == [utc(2026, 12, 24, 23, 30)]  # 25 December in Berlin
    assert found == utc(2026, 12, 25, 23, 30)  # 26 December in Berlin


def test_business_days_jump_a_weekend_in_two_steps_and_a_long_blackout_in_one() -> None:
    weekdays = cal.parse_calendar("work", business_days=True)
    quarter_hours = every(900, utc(2026, 1, 2, 23))  # Friday 2 January 2026, 23:00
    found, passed = cal.next_allowed(quarter_hours, utc(2026, 1, 2, 23, 50), [weekdays])
    assert found == utc(2026, 1, 5)  # Monday
    assert [p.until for p in passed] == [utc(2026, 1, 4), utc(2026, 1, 5)]
    blackout = cal.parse_calendar("freeze", ranges=[("2026-06-01T00:00", "2026-06-08T00:00")])
    minutely = every(60, utc(2026, 1, 1))
    found, passed = cal.next_allowed(minutely, utc(2026, 5, 31, 23, 59), [blackout])
    assert found == utc(2026, 6, 8) and len(passed) == 1  # 10,080 occurrences excluded, one step


def test_a_range_is_half_open() -> None:
    meeting = cal.parse_calendar("standup", ranges=[("2026-03-02T10:00", "2026-03-02T11:00")])
    half_hours = every(1800, utc(2026, 3, 2))
    shown = cal.preview(half_hours, utc(2026, 3, 2, 9, 59), 4, [meeting])
    assert [(t.hour, t.minute, by is not None) for t, by in shown] == [
        (10, 0, True),
        (10, 30, True),
        (11, 0, False),
        (11, 30, False),
    ]


def test_a_range_ending_inside_a_spring_gap_passes_over_no_allowed_occurrence() -> None:
    """02:30 does not exist in New York on 8 March 2026 (02:00 EST jumps to 03:00 EDT): the first instant
    at or after it on the wall clock is 03:00 EDT, 07:00 UTC. Reading 02:30 with the offset before the
    gap would jump to 07:30 UTC and pass over 07:00 and 07:15, which no calendar excludes."""
    night = cal.parse_calendar("night", timezone="America/New_York", ranges=[("2026-03-08T00:00", "2026-03-08T02:30")])
    quarter_hours = every(900, utc(2026, 3, 8))
    found, passed = cal.next_allowed(quarter_hours, utc(2026, 3, 8, 5), [night])  # 00:00 EST
    assert found == utc(2026, 3, 8, 7) and found.astimezone(NEW_YORK).hour == 3
    assert passed and passed[0].first == utc(2026, 3, 8, 5, 15)


def test_a_repeated_hour_is_excluded_in_both_passes() -> None:
    """1 November 2026, New York: 01:00-01:59 happens twice (EDT, then EST). A range [01:00, 01:30)
    excludes both passes' first halves."""
    repeated = cal.parse_calendar("dst", timezone="America/New_York", ranges=[("2026-11-01T01:00", "2026-11-01T01:30")])
    quarter_hours = every(900, utc(2026, 11, 1))
    shown = cal.preview(quarter_hours, utc(2026, 11, 1, 4, 50), 8, [repeated])
    wall = [(t.astimezone(NEW_YORK).strftime("%H:%M %Z"), by is not None) for t, by in shown]
    assert wall == [
        ("01:00 EDT", True),
        ("01:15 EDT", True),
        ("01:30 EDT", False),
        ("01:45 EDT", False),
        ("01:00 EST", True),
        ("01:15 EST", True),
        ("01:30 EST", False),
        ("01:45 EST", False),
    ]
    found, _ = cal.next_allowed(quarter_hours, utc(2026, 11, 1, 5, 50), [repeated])
    assert found == utc(2026, 11, 1, 6, 30)  # 01:30 EST


def test_excluded_occurrences_do_not_count_as_fires() -> None:
    bounded = rec.Recurrence(rec.EveryRule(3600), start_at=utc(2026, 1, 1), max_fires=2)
    gap = cal.parse_calendar("gap", ranges=[("2026-01-01T01:00", "2026-01-01T03:00")])
    found, passed = cal.next_allowed(bounded, utc(2026, 1, 1), [gap], fired=1)
    assert found == utc(2026, 1, 1, 3) and len(passed) == 1
    assert cal.next_allowed(bounded, found, [gap], fired=2) == (None, [])


def test_the_first_calendar_named_is_the_one_recorded() -> None:
    a = cal.parse_calendar("a", dates=["2026-05-01"], version=3)
    b = cal.parse_calendar("b", weekdays=["fri"])  # 1 May 2026 is a Friday
    _, passed = cal.next_allowed(cron("0 12 * * *"), utc(2026, 4, 30, 12), [a, b])
    assert [(p.calendar, p.version) for p in passed] == [("a", 3)]
    assert cal.preview(cron("0 12 * * *"), utc(2026, 4, 30, 12), 1, [b, a])[0][1] == b


def test_ranges_are_merged_and_a_calendar_survives_storage() -> None:
    c = cal.parse_calendar(
        "m",
        timezone="Asia/Kolkata",
        dates=["2026-01-26", "2026-01-26"],
        ranges=[
            ("2026-01-01T11:00", "2026-01-01T13:00"),
            ("2026-01-01T10:00", "2026-01-01T12:00"),
            ("2026-01-01T13:00", "2026-01-01T14:00"),
        ],
        weekdays=["Sunday", "sun"],
    )
    assert c.dates == (date(2026, 1, 26),) and c.weekdays == (6,)
    wall = datetime.fromisoformat  # naive local wall times, as a calendar keeps them
    assert c.ranges == ((wall("2026-01-01T10:00"), wall("2026-01-01T14:00")),)
    assert msgspec.json.decode(msgspec.json.encode(c), type=cal.Calendar) == c


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "Holidays"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"dates": ["2026-12-25", "2026-02-30"]}, "dates.1"),
        ({"dates": ["20261225"]}, "dates.0"),
        ({"dates": ["2026-01-01"] * (cal.MAX_DATES + 1)}, "dates"),
        ({"ranges": [("2026-01-01T10:00", "2026-01-01T09:00")]}, "ranges.0.to"),
        ({"ranges": [("2026-01-01T10:00", "2026-01-01T10:00")]}, "ranges.0.to"),
        ({"ranges": [("2026-01-01T00:00", "2027-01-03T00:00")]}, "ranges.0.to"),
        ({"ranges": [("2026-01-01T10:00+01:00", "2026-01-01T11:00")]}, "ranges.0.from"),
        ({"ranges": [("2026-01-01", "2026-01-02")]}, "ranges.0.from"),
        ({"ranges": [("2026-01-01T10:00", "2026-01-01T11:00")] * (cal.MAX_RANGES + 1)}, "ranges"),
        ({"weekdays": ["funday"]}, "weekdays.0"),
        ({"weekdays": ["mon", "tuesdayx"]}, "weekdays.1"),
        ({"weekdays": ["mon", "tue", "wed", "thu", "fri"], "business_days": True}, "weekdays"),
    ],
)
def test_bad_input_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    name = kwargs.pop("name", "ok")
    with pytest.raises(InvalidInput) as refused:
        cal.parse_calendar(name, **kwargs)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_a_schedule_names_a_few_calendars_each_once() -> None:
    assert cal.parse_names(["b", "a", "b"]) == ("b", "a")
    with pytest.raises(InvalidInput) as refused:
        cal.parse_names(["ok", "Not OK"])
    assert refused.value.field == "calendars.1"
    with pytest.raises(InvalidInput) as refused:
        cal.parse_names([f"c{i}" for i in range(cal.MAX_PER_SCHEDULE + 1)])
    assert refused.value.field == "calendars"


def test_a_search_through_exclusions_is_bounded() -> None:
    """A calendar that leaves one weekday free, for a rule that only fires on excluded days, ends the
    timeline after a bounded search instead of spinning."""
    only_weekends = cal.parse_calendar("no", business_days=True)
    saturdays = cron("0 9 * * 6")
    found, passed = cal.next_allowed(saturdays, utc(2026, 1, 1), [only_weekends])
    assert found is None and len(passed) == min(cal.MAX_EXCLUSIONS_IN_A_ROW + 1, rec.MAX_SCAN_STEPS)
    assert passed[-1].first - passed[0].first == timedelta(weeks=len(passed) - 1)


def test_each_exclusion_passed_over_spends_a_step_of_the_search_budget() -> None:
    """A request's searches share one budget (``RuleWork``): exclusions count in it, so a batch of rules
    each passing over many exclusions cannot multiply the work."""
    only_weekends = cal.parse_calendar("no", business_days=True)
    budget = rec.ScanBudget(50)
    found, passed = cal.next_allowed(cron("0 9 * * 6"), utc(2026, 1, 1), [only_weekends], budget=budget)
    assert (found, len(passed), budget.left) == (None, 50, 0)
    budget = rec.ScanBudget(50)
    found, passed = cal.next_allowed(cron("0 9 * * *"), utc(2026, 1, 2, 12), [only_weekends], budget=budget)
    assert found == utc(2026, 1, 5, 9) and len(passed) == 2 and budget.left == 48  # Saturday, Sunday


def test_the_end_of_the_calendar_ends_the_timeline_without_an_error() -> None:
    last = cal.parse_calendar("end", dates=["9999-12-31"])
    daily = cron("0 12 * * *")
    assert cal.next_allowed(daily, utc(9999, 12, 30, 12), [last]) == (
        None,
        [cal.Excluded(utc(9999, 12, 31, 12), "end", 1, datetime.max.replace(tzinfo=UTC))],
    )
    far_east = cal.parse_calendar("east", timezone="Pacific/Kiritimati", weekdays=["fri"])  # UTC+14
    assert cal.next_allowed(daily, utc(9999, 12, 30, 12), [far_east]) == (utc(9999, 12, 31, 12), [])
