"""Named DST cases: four zones x {hourly, daily at 02:30, every minute} x {spring forward, fall back}.

Each case lists the exact UTC instants of the next fires after ``after``; the comment gives them on the
local wall clock. A few extra daily cases (01:30, 01:45, 02:15) sit inside a gap or an overlap, where
02:30 does not (London, Lord Howe) or where only one transition is affected.
"""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickd.schema.recurrence import CronRule, GapPolicy, OverlapPolicy, Recurrence, next_fire, occurrence, preview

NY, LONDON, LORD_HOWE, KOLKATA = "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"
HOURLY, DAILY_0230, MINUTELY = "0 * * * *", "30 2 * * *", "* * * * *"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(f"{text}+00:00")


def case(name: str, zone: str, expr: str, policy: str, after: str, expected: str) -> object:
    """One table row. ``policy`` names the gap and/or overlap policy ("shift", "skip", "first", "last", "both",
    "skip+both"); the one not named takes its default.
    ``after`` and ``expected`` are "MM-DD HH:MM" in UTC, 2026; ``expected`` is comma-separated."""
    gap = "skip" if "skip" in policy else "shift"
    overlap = next((p for p in ("last", "both") if p in policy), "first")
    fires = [utc(f"2026-{t.strip()}") for t in expected.split(",")]
    return pytest.param(zone, expr, gap, overlap, utc(f"2026-{after}"), fires, id=name)


# The 2026 transitions the tables rely on; checked against zoneinfo below rather than trusted.
TRANSITIONS = [
    pytest.param(NY, date(2026, 3, 8), timedelta(hours=1), id="ny-spring"),
    pytest.param(NY, date(2026, 11, 1), timedelta(hours=-1), id="ny-fall"),
    pytest.param(LONDON, date(2026, 3, 29), timedelta(hours=1), id="london-spring"),
    pytest.param(LONDON, date(2026, 10, 25), timedelta(hours=-1), id="london-fall"),
    pytest.param(LORD_HOWE, date(2026, 4, 5), timedelta(minutes=-30), id="lord-howe-fall"),
    pytest.param(LORD_HOWE, date(2026, 10, 4), timedelta(minutes=30), id="lord-howe-spring"),
]


@pytest.mark.parametrize(("zone", "day", "shift"), TRANSITIONS)
def test_the_tables_use_real_transition_days(zone: str, day: date, shift: timedelta) -> None:
    def offset(d: date) -> timedelta | None:
        return datetime.combine(d, time(0), tzinfo=ZoneInfo(zone)).utcoffset()

    previous, this, following = (offset(day + timedelta(days=n)) for n in (-1, 0, 1))
    assert previous == this and following is not None and this is not None
    assert following - this == shift


def test_kolkata_has_no_transition_in_2026() -> None:
    zone = ZoneInfo(KOLKATA)
    moments = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(0, 365 * 24, 6)]
    assert {moment.astimezone(zone).utcoffset() for moment in moments} == {timedelta(hours=5, minutes=30)}


NY_CASES = [
    # Spring forward 2026-03-08: 02:00 EST -> 03:00 EDT at 07:00Z; 02:00-02:59 does not exist.
    # 01:00 EST, 03:00 EDT (02:00 shifted onto 03:00, fires once), 04:00 EDT.
    case("ny-spring-hourly-shift", NY, HOURLY, "shift", "03-08 05:30", "03-08 06:00, 03-08 07:00, 03-08 08:00"),
    case("ny-spring-hourly-skip", NY, HOURLY, "skip", "03-08 05:30", "03-08 06:00, 03-08 07:00, 03-08 08:00"),
    # 03:00 EDT (02:30 shifted to the jump), then 02:30 EDT the next day.
    case("ny-spring-daily-0230-shift", NY, DAILY_0230, "shift", "03-07 08:00", "03-08 07:00, 03-09 06:30"),
    case("ny-spring-daily-0230-skip", NY, DAILY_0230, "skip", "03-07 08:00", "03-09 06:30, 03-10 06:30"),
    # 01:59 EST, 03:00 EDT, 03:01 EDT: the 60 missing minutes shift onto one instant, which fires once.
    case("ny-spring-minutely-shift", NY, MINUTELY, "shift", "03-08 06:58", "03-08 06:59, 03-08 07:00, 03-08 07:01"),
    case("ny-spring-minutely-skip", NY, MINUTELY, "skip", "03-08 06:58", "03-08 06:59, 03-08 07:00, 03-08 07:01"),
    # Fall back 2026-11-01: 02:00 EDT -> 01:00 EST at 06:00Z; 01:00-01:59 happens twice.
    # 00:00 EDT, 01:00 EDT, 02:00 EST, 03:00 EST: 01:00 EST does not fire.
    case(
        "ny-fall-hourly-first", NY, HOURLY, "first", "11-01 03:30", "11-01 04:00, 11-01 05:00, 11-01 07:00, 11-01 08:00"
    ),
    # 00:00 EDT, 01:00 EST, 02:00 EST.
    case("ny-fall-hourly-last", NY, HOURLY, "last", "11-01 03:30", "11-01 04:00, 11-01 06:00, 11-01 07:00"),
    # From 01:30 EDT (first pass) the second pass of 01:00 is still ahead.
    case("ny-fall-hourly-last-from-first-pass", NY, HOURLY, "last", "11-01 05:30", "11-01 06:00, 11-01 07:00"),
    # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST: hourly in real time.
    case(
        "ny-fall-hourly-both", NY, HOURLY, "both", "11-01 03:30", "11-01 04:00, 11-01 05:00, 11-01 06:00, 11-01 07:00"
    ),
    # 02:30 is not repeated: 02:30 EST on the day, whatever the policy.
    case("ny-fall-daily-0230-first", NY, DAILY_0230, "first", "10-31 07:00", "11-01 07:30, 11-02 07:30"),
    case("ny-fall-daily-0230-last", NY, DAILY_0230, "last", "10-31 07:00", "11-01 07:30, 11-02 07:30"),
    case("ny-fall-daily-0230-both", NY, DAILY_0230, "both", "10-31 07:00", "11-01 07:30, 11-02 07:30"),
    # 01:30 is repeated: 01:30 EDT (first), 01:30 EST (last), or both.
    case("ny-fall-daily-0130-first", NY, "30 1 * * *", "first", "10-31 12:00", "11-01 05:30, 11-02 06:30"),
    case("ny-fall-daily-0130-last", NY, "30 1 * * *", "last", "10-31 12:00", "11-01 06:30, 11-02 06:30"),
    case("ny-fall-daily-0130-both", NY, "30 1 * * *", "both", "10-31 12:00", "11-01 05:30, 11-01 06:30, 11-02 06:30"),
    # 01:59 EDT, then nothing during the repeated hour, then 02:00 EST.
    case("ny-fall-minutely-first", NY, MINUTELY, "first", "11-01 05:58", "11-01 05:59, 11-01 07:00, 11-01 07:01"),
    case("ny-fall-minutely-first-in-second-pass", NY, MINUTELY, "first", "11-01 06:30", "11-01 07:00"),
    # 00:59 EDT, then nothing during the first pass, then 01:00 EST.
    case("ny-fall-minutely-last", NY, MINUTELY, "last", "11-01 04:58", "11-01 04:59, 11-01 06:00, 11-01 06:01"),
    case("ny-fall-minutely-last-in-first-pass", NY, MINUTELY, "last", "11-01 05:30", "11-01 06:00"),
    # 01:59 EDT, 01:00 EST, 01:01 EST: every real minute.
    case("ny-fall-minutely-both", NY, MINUTELY, "both", "11-01 05:58", "11-01 05:59, 11-01 06:00, 11-01 06:01"),
    case("ny-fall-minutely-both-in-first-pass", NY, MINUTELY, "both", "11-01 05:30", "11-01 05:31, 11-01 05:32"),
]

LONDON_CASES = [
    # Spring forward 2026-03-29: 01:00 GMT -> 02:00 BST at 01:00Z; 01:00-01:59 does not exist.
    # 00:00 GMT, 02:00 BST (01:00 shifted onto it, fires once), 03:00 BST.
    case("london-spring-hourly-shift", LONDON, HOURLY, "shift", "03-28 23:30", "03-29 00:00, 03-29 01:00, 03-29 02:00"),
    case("london-spring-hourly-skip", LONDON, HOURLY, "skip", "03-28 23:30", "03-29 00:00, 03-29 01:00, 03-29 02:00"),
    # 02:30 exists (BST): unaffected.
    case("london-spring-daily-0230-shift", LONDON, DAILY_0230, "shift", "03-28 03:00", "03-29 01:30, 03-30 01:30"),
    case("london-spring-daily-0230-skip", LONDON, DAILY_0230, "skip", "03-28 03:00", "03-29 01:30, 03-30 01:30"),
    # 01:30 does not exist: 02:00 BST (shift) or nothing that day (skip).
    case("london-spring-daily-0130-shift", LONDON, "30 1 * * *", "shift", "03-28 03:00", "03-29 01:00, 03-30 00:30"),
    case("london-spring-daily-0130-skip", LONDON, "30 1 * * *", "skip", "03-28 03:00", "03-30 00:30, 03-31 00:30"),
    # 00:59 GMT, 02:00 BST, 02:01 BST.
    case(
        "london-spring-minutely-shift",
        LONDON,
        MINUTELY,
        "shift",
        "03-29 00:58",
        "03-29 00:59, 03-29 01:00, 03-29 01:01",
    ),
    case(
        "london-spring-minutely-skip", LONDON, MINUTELY, "skip", "03-29 00:58", "03-29 00:59, 03-29 01:00, 03-29 01:01"
    ),
    # Fall back 2026-10-25: 02:00 BST -> 01:00 GMT at 01:00Z; 01:00-01:59 happens twice.
    # 00:00 BST, 01:00 BST, 02:00 GMT.
    case("london-fall-hourly-first", LONDON, HOURLY, "first", "10-24 22:30", "10-24 23:00, 10-25 00:00, 10-25 02:00"),
    # 00:00 BST, 01:00 GMT, 02:00 GMT.
    case("london-fall-hourly-last", LONDON, HOURLY, "last", "10-24 22:30", "10-24 23:00, 10-25 01:00, 10-25 02:00"),
    case(
        "london-fall-hourly-both",
        LONDON,
        HOURLY,
        "both",
        "10-24 22:30",
        "10-24 23:00, 10-25 00:00, 10-25 01:00, 10-25 02:00",
    ),
    # 02:30 GMT: unaffected.
    case("london-fall-daily-0230-first", LONDON, DAILY_0230, "first", "10-24 02:00", "10-25 02:30, 10-26 02:30"),
    case("london-fall-daily-0230-last", LONDON, DAILY_0230, "last", "10-24 02:00", "10-25 02:30, 10-26 02:30"),
    case("london-fall-daily-0230-both", LONDON, DAILY_0230, "both", "10-24 02:00", "10-25 02:30, 10-26 02:30"),
    # 01:59 BST, then 02:00 GMT.
    case("london-fall-minutely-first", LONDON, MINUTELY, "first", "10-25 00:58", "10-25 00:59, 10-25 02:00"),
    # 00:59 BST, then 01:00 GMT.
    case("london-fall-minutely-last", LONDON, MINUTELY, "last", "10-24 23:58", "10-24 23:59, 10-25 01:00, 10-25 01:01"),
    case("london-fall-minutely-both", LONDON, MINUTELY, "both", "10-25 00:58", "10-25 00:59, 10-25 01:00, 10-25 01:01"),
]

LORD_HOWE_CASES = [
    # Spring forward 2026-10-04: 02:00 +10:30 -> 02:30 +11 at 15:30Z on 10-03; 02:00-02:29 does not exist.
    # 01:00 +10:30, 02:30 +11 (02:00 shifted to the jump), 03:00 +11.
    case(
        "lord-howe-spring-hourly-shift",
        LORD_HOWE,
        HOURLY,
        "shift",
        "10-03 14:00",
        "10-03 14:30, 10-03 15:30, 10-03 16:00",
    ),
    # 01:00 +10:30, 03:00 +11, 04:00 +11.
    case(
        "lord-howe-spring-hourly-skip",
        LORD_HOWE,
        HOURLY,
        "skip",
        "10-03 14:00",
        "10-03 14:30, 10-03 16:00, 10-03 17:00",
    ),
    # 02:30 +11 is the first valid wall time after the gap: unaffected.
    case(
        "lord-howe-spring-daily-0230-shift", LORD_HOWE, DAILY_0230, "shift", "10-02 17:00", "10-03 15:30, 10-04 15:30"
    ),
    case("lord-howe-spring-daily-0230-skip", LORD_HOWE, DAILY_0230, "skip", "10-02 17:00", "10-03 15:30, 10-04 15:30"),
    # 02:15 does not exist: 02:30 +11 (shift) or nothing that day (skip).
    case(
        "lord-howe-spring-daily-0215-shift", LORD_HOWE, "15 2 * * *", "shift", "10-02 17:00", "10-03 15:30, 10-04 15:15"
    ),
    case(
        "lord-howe-spring-daily-0215-skip", LORD_HOWE, "15 2 * * *", "skip", "10-02 17:00", "10-04 15:15, 10-05 15:15"
    ),
    # 01:59 +10:30, 02:30 +11, 02:31 +11.
    case(
        "lord-howe-spring-minutely-shift",
        LORD_HOWE,
        MINUTELY,
        "shift",
        "10-03 15:28",
        "10-03 15:29, 10-03 15:30, 10-03 15:31",
    ),
    case(
        "lord-howe-spring-minutely-skip",
        LORD_HOWE,
        MINUTELY,
        "skip",
        "10-03 15:28",
        "10-03 15:29, 10-03 15:30, 10-03 15:31",
    ),
    # Fall back 2026-04-05: 02:00 +11 -> 01:30 +10:30 at 15:00Z on 04-04; 01:30-01:59 happens twice.
    # 01:00 +11, 02:00 +10:30, 03:00 +10:30: no whole hour is repeated, 90 real minutes between the first two.
    case(
        "lord-howe-fall-hourly-first",
        LORD_HOWE,
        HOURLY,
        "first",
        "04-04 13:30",
        "04-04 14:00, 04-04 15:30, 04-04 16:30",
    ),
    case(
        "lord-howe-fall-hourly-last", LORD_HOWE, HOURLY, "last", "04-04 13:30", "04-04 14:00, 04-04 15:30, 04-04 16:30"
    ),
    case(
        "lord-howe-fall-hourly-both", LORD_HOWE, HOURLY, "both", "04-04 13:30", "04-04 14:00, 04-04 15:30, 04-04 16:30"
    ),
    # 02:30 +10:30: unaffected.
    case("lord-howe-fall-daily-0230-first", LORD_HOWE, DAILY_0230, "first", "04-03 17:00", "04-04 16:00, 04-05 16:00"),
    case("lord-howe-fall-daily-0230-last", LORD_HOWE, DAILY_0230, "last", "04-03 17:00", "04-04 16:00, 04-05 16:00"),
    case("lord-howe-fall-daily-0230-both", LORD_HOWE, DAILY_0230, "both", "04-03 17:00", "04-04 16:00, 04-05 16:00"),
    # 01:45 is repeated: 01:45 +11 (first), 01:45 +10:30 (last), or both.
    case(
        "lord-howe-fall-daily-0145-first", LORD_HOWE, "45 1 * * *", "first", "04-03 17:00", "04-04 14:45, 04-05 15:15"
    ),
    case("lord-howe-fall-daily-0145-last", LORD_HOWE, "45 1 * * *", "last", "04-03 17:00", "04-04 15:15, 04-05 15:15"),
    case(
        "lord-howe-fall-daily-0145-both",
        LORD_HOWE,
        "45 1 * * *",
        "both",
        "04-03 17:00",
        "04-04 14:45, 04-04 15:15, 04-05 15:15",
    ),
    # 01:59 +11, then nothing during the repeated half hour, then 02:00 +10:30.
    case(
        "lord-howe-fall-minutely-first",
        LORD_HOWE,
        MINUTELY,
        "first",
        "04-04 14:58",
        "04-04 14:59, 04-04 15:30, 04-04 15:31",
    ),
    # 01:29 +11, then 01:30 +10:30.
    case(
        "lord-howe-fall-minutely-last",
        LORD_HOWE,
        MINUTELY,
        "last",
        "04-04 14:28",
        "04-04 14:29, 04-04 15:00, 04-04 15:01",
    ),
    case(
        "lord-howe-fall-minutely-both",
        LORD_HOWE,
        MINUTELY,
        "both",
        "04-04 14:58",
        "04-04 14:59, 04-04 15:00, 04-04 15:01",
    ),
]

KOLKATA_CASES = [
    # +05:30 all year, on the days other zones change: policies make no difference.
    # 06:00, 07:00, 08:00 IST.
    case("kolkata-hourly", KOLKATA, HOURLY, "shift+first", "03-08 00:10", "03-08 00:30, 03-08 01:30, 03-08 02:30"),
    case(
        "kolkata-hourly-skip-both", KOLKATA, HOURLY, "skip+both", "03-08 00:10", "03-08 00:30, 03-08 01:30, 03-08 02:30"
    ),
    # 02:30 IST is 21:00Z the day before.
    case("kolkata-daily-0230", KOLKATA, DAILY_0230, "shift+first", "03-07 22:00", "03-08 21:00, 03-09 21:00"),
    case("kolkata-daily-0230-skip-both", KOLKATA, DAILY_0230, "skip+both", "10-24 22:00", "10-25 21:00, 10-26 21:00"),
    case("kolkata-minutely", KOLKATA, MINUTELY, "shift+first", "11-01 05:58", "11-01 05:59, 11-01 06:00, 11-01 06:01"),
    case(
        "kolkata-minutely-skip-last",
        KOLKATA,
        MINUTELY,
        "skip+last",
        "04-04 14:58",
        "04-04 14:59, 04-04 15:00, 04-04 15:01",
    ),
]


@pytest.mark.parametrize(
    ("zone", "expr", "gap", "overlap", "after", "expected"), NY_CASES + LONDON_CASES + LORD_HOWE_CASES + KOLKATA_CASES
)
def test_dst_table(
    zone: str, expr: str, gap: GapPolicy, overlap: OverlapPolicy, after: datetime, expected: list[datetime]
) -> None:
    recurrence = Recurrence(CronRule(expr, zone, gap, overlap))
    fires = preview(recurrence, after, len(expected))
    assert fires == expected
    assert all(fire.tzinfo is UTC for fire in fires)
    # From any moment before a fire, that fire is next: nothing in between is skipped.
    for earlier, fire in zip([after, *fires[:-1]], fires, strict=True):
        assert next_fire(recurrence, fire - timedelta(microseconds=1)) == fire
        assert next_fire(recurrence, earlier + (fire - earlier) / 2) == fire


def test_the_local_rendering_tells_the_two_passes_apart() -> None:
    rule = CronRule(HOURLY, NY, on_overlap="both")
    first, second = preview(Recurrence(rule), utc("2026-11-01 04:30"), 2)
    assert occurrence(rule, first).as_json() == {
        "utc": "2026-11-01T05:00:00+00:00",
        "local": "2026-11-01T01:00:00-04:00",
        "timezone": NY,
    }
    assert occurrence(rule, second).local.isoformat() == "2026-11-01T01:00:00-05:00"


def test_a_gap_shift_lands_on_the_exact_instant_of_the_jump() -> None:
    # Lord Howe jumps from 02:00 to 02:30; a fire at 02:00 must land at 02:30 +11, not 02:30 +10:30.
    rule = CronRule("0 2 * * *", LORD_HOWE)
    fire = next_fire(Recurrence(rule), utc("2026-10-03 12:00"))
    assert fire == utc("2026-10-03 15:30")
    assert occurrence(rule, fire).local.isoformat() == "2026-10-04T02:30:00+11:00"
