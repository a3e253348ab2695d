"""Recurrence parsing, bounds, ``every`` anchoring, and properties of the cron math over many zones.

The DST tables are in ``test_recurrence_dst.py``; here hypothesis checks the same rules in general,
including against a brute-force oracle that works from the UTC side, minute by minute.
"""

import functools
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from tickd.schema import recurrence as rec
from tickd.schema.errors import InvalidInput
from tickd.schema.recurrence import CronRule, EveryRule, Recurrence, next_fire, parse_recurrence, preview

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(f"{text}+00:00")


# --- parsing -----------------------------------------------------------------------------------------------

BAD_INPUTS = [
    pytest.param({}, "cron", id="neither-cron-nor-every"),
    pytest.param({"cron": "* * * * *", "every": "1m"}, "every", id="both-cron-and-every"),
    pytest.param({"cron": ""}, "cron", id="cron-empty"),
    pytest.param({"cron": "* * * *"}, "cron", id="cron-4-fields"),
    pytest.param({"cron": "0 * * * * *"}, "cron", id="cron-6-fields-seconds"),
    pytest.param({"cron": "0 0 * * * * 2027"}, "cron", id="cron-7-fields-year"),
    pytest.param({"cron": "61 * * * *"}, "cron", id="cron-minute-out-of-range"),
    pytest.param({"cron": "* 24 * * *"}, "cron", id="cron-hour-out-of-range"),
    pytest.param({"cron": "* * * * 8"}, "cron", id="cron-weekday-out-of-range"),
    pytest.param({"cron": "* * * foo *"}, "cron", id="cron-bad-month-name"),
    pytest.param({"cron": "H * * * *"}, "cron", id="cron-hashed"),
    pytest.param({"cron": "R * * * *"}, "cron", id="cron-random"),
    pytest.param({"cron": "0 r(0-5) * * *"}, "cron", id="cron-random-range"),
    pytest.param({"cron": "0 0 * * 5L"}, "cron", id="cron-unsupported-syntax"),
    pytest.param({"cron": "0 0 30 2 *"}, "cron", id="cron-never-matches"),
    pytest.param({"cron": "@yearly"}, "cron", id="cron-alias-not-offered"),
    pytest.param({"cron": "@reboot"}, "cron", id="cron-alias-unknown"),
    pytest.param({"cron": "@every 5m"}, "cron", id="cron-alias-every"),
    pytest.param({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "timezone", id="tz-unknown"),
    pytest.param({"cron": "0 * * * *", "timezone": "utc"}, "timezone", id="tz-wrong-case"),
    pytest.param({"cron": "0 * * * *", "timezone": "../etc/passwd"}, "timezone", id="tz-path"),
    pytest.param({"cron": "0 * * * *", "timezone": "/etc/localtime"}, "timezone", id="tz-absolute-path"),
    pytest.param({"cron": "0 * * * *", "timezone": "America"}, "timezone", id="tz-directory"),
    pytest.param({"cron": "0 * * * *", "timezone": "localtime"}, "timezone", id="tz-host-localtime"),
    pytest.param({"cron": "0 * * * *", "timezone": ""}, "timezone", id="tz-empty"),
    pytest.param({"cron": "0 * * * *", "on_gap": "later"}, "on_gap", id="on-gap-unknown"),
    pytest.param({"cron": "0 * * * *", "on_overlap": "twice"}, "on_overlap", id="on-overlap-unknown"),
    pytest.param({"every": "15m", "timezone": "UTC"}, "timezone", id="every-with-timezone"),
    pytest.param({"every": "15m", "on_gap": "skip"}, "on_gap", id="every-with-on-gap"),
    pytest.param({"every": "15m", "on_overlap": "both"}, "on_overlap", id="every-with-on-overlap"),
    pytest.param({"every": ""}, "every", id="every-empty"),
    pytest.param({"every": "15"}, "every", id="every-no-unit"),
    pytest.param({"every": "m"}, "every", id="every-no-number"),
    pytest.param({"every": "15 m"}, "every", id="every-space"),
    pytest.param({"every": "1.5h"}, "every", id="every-fraction"),
    pytest.param({"every": "0s"}, "every", id="every-zero"),
    pytest.param({"every": "-5m"}, "every", id="every-negative"),
    pytest.param({"every": "015m"}, "every", id="every-leading-zero"),
    pytest.param({"every": "2w"}, "every", id="every-weeks"),
    pytest.param({"every": "1H"}, "every", id="every-upper-case"),
    pytest.param({"every": "367d"}, "every", id="every-above-max"),
    pytest.param({"every": "9999999999s"}, "every", id="every-huge"),
    pytest.param({"every": "1h", "start_at": datetime(2026, 6, 1)}, "start_at", id="start-naive"),  # noqa: DTZ001
    pytest.param({"every": "1h", "end_at": datetime(2026, 6, 1)}, "end_at", id="end-naive"),  # noqa: DTZ001
    pytest.param(
        {"every": "1h", "start_at": utc("2026-06-01 00:00"), "end_at": utc("2026-06-01 00:00")},
        "end_at",
        id="end-equals-start",
    ),
    pytest.param(
        {"cron": "* * * * *", "start_at": utc("2026-06-02 00:00"), "end_at": utc("2026-06-01 00:00")},
        "end_at",
        id="end-before-start",
    ),
    pytest.param({"cron": "* * * * *", "end_at": utc("2026-04-01 00:00")}, "end_at", id="end-in-the-past"),
    pytest.param(
        {"cron": "0 9 * * *", "start_at": utc("2026-06-01 10:00"), "end_at": utc("2026-06-01 11:00")},
        "end_at",
        id="no-occurrence-in-window",
    ),
    pytest.param({"cron": "* * * * *", "max_fires": 0}, "max_fires", id="max-fires-zero"),
    pytest.param({"cron": "* * * * *", "max_fires": -3}, "max_fires", id="max-fires-negative"),
    pytest.param({"cron": "* * * * *", "max_fires": True}, "max_fires", id="max-fires-bool"),
    pytest.param({"cron": "* * * * *", "max_fires": 2.5}, "max_fires", id="max-fires-float"),
]


@pytest.mark.parametrize(("fields", "bad_field"), BAD_INPUTS)
def test_bad_input_names_the_field(fields: dict[str, Any], bad_field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_recurrence(now=NOW, **fields)
    assert caught.value.field == bad_field
    assert caught.value.message


def test_min_interval_is_configurable() -> None:
    assert parse_recurrence(now=NOW, every="20s").rule == EveryRule(20)
    with pytest.raises(InvalidInput) as caught:
        parse_recurrence(now=NOW, every="20s", min_interval_s=60)
    assert caught.value.field == "every" and "60s" in caught.value.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1), ("20s", 20), ("15m", 900), ("2h", 7200), ("1d", 86400), ("366d", 366 * 86400), ("90m", 5400)],
)
def test_every_units(text: str, seconds: int) -> None:
    assert rec.parse_every(text) == seconds


@pytest.mark.parametrize(
    ("alias", "expr"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0"), ("@monthly", "0 0 1 * *")],
)
def test_aliases_fire_like_their_expansion(alias: str, expr: str) -> None:
    aliased = parse_recurrence(now=NOW, cron=alias.upper(), timezone="Europe/Berlin")
    assert aliased.rule == CronRule(alias, "Europe/Berlin")
    plain = Recurrence(CronRule(expr, "Europe/Berlin"))
    assert preview(aliased, NOW, 5) == preview(plain, NOW, 5)


@pytest.mark.parametrize("expr", ["0 0 L * *", "0 0 15W * *", "0 0 * * 1#2", "0 0 ? * mon-fri", "0 0 * jan,jul sun"])
def test_croniter_extensions_are_accepted(expr: str) -> None:
    assert parse_recurrence(now=NOW, cron=expr).rule == CronRule(expr)


def test_cron_defaults_and_normalisation() -> None:
    parsed = parse_recurrence(now=NOW, cron="  30  2 * *   mon-fri ")
    assert parsed == Recurrence(CronRule("30 2 * * mon-fri", "UTC", "shift", "first"))


def test_parsed_bounds_are_utc_milliseconds() -> None:
    start = datetime(2026, 6, 1, 9, 0, 0, 123456, tzinfo=ZoneInfo("Europe/Berlin"))
    parsed = parse_recurrence(now=NOW, cron="0 * * * *", start_at=start, max_fires=3)
    assert parsed.start_at == utc("2026-06-01 07:00:00.123000") and parsed.start_at.tzinfo is UTC
    assert parsed.max_fires == 3


def test_every_without_start_is_anchored_one_interval_after_now() -> None:
    now = utc("2026-05-01 12:00:00.987654")
    parsed = parse_recurrence(now=now, every="15m")
    assert parsed.start_at == utc("2026-05-01 12:15:00.987000")
    assert preview(parsed, now, 3) == [
        utc("2026-05-01 12:15:00.987"),
        utc("2026-05-01 12:30:00.987"),
        utc("2026-05-01 12:45:00.987"),
    ]


def test_every_needs_an_anchor() -> None:
    with pytest.raises(ValueError, match="start_at"):
        Recurrence(EveryRule(60))


def test_next_fire_refuses_naive() -> None:
    with pytest.raises(ValueError, match="naive"):
        next_fire(Recurrence(CronRule("* * * * *")), datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test


# --- every: anchoring ----------------------------------------------------------------------------------------


def test_a_late_after_never_shifts_the_every_timeline() -> None:
    recurrence = Recurrence(EveryRule(900), start_at=utc("2026-05-01 10:00"))
    # The poller fired the 10:15 occurrence at 10:22:41; the next is still 10:30, then 10:45.
    assert next_fire(recurrence, utc("2026-05-01 10:15")) == utc("2026-05-01 10:30")
    assert next_fire(recurrence, utc("2026-05-01 10:22:41")) == utc("2026-05-01 10:30")
    assert next_fire(recurrence, utc("2026-05-01 10:30")) == utc("2026-05-01 10:45")
    # Before the anchor, the anchor itself is first.
    assert next_fire(recurrence, utc("2026-04-01 00:00")) == utc("2026-05-01 10:00")
    assert next_fire(recurrence, utc("2026-05-01 09:59:59.999999")) == utc("2026-05-01 10:00")


def test_every_counts_elapsed_time_across_dst() -> None:
    # "1d" from 09:00 New York time before spring forward lands at 10:00 EDT after it: same UTC time.
    start = datetime(2026, 3, 7, 9, 0, tzinfo=ZoneInfo("America/New_York"))
    recurrence = parse_recurrence(now=start - timedelta(hours=1), every="1d", start_at=start)
    fires = preview(recurrence, start - timedelta(hours=1), 3)
    assert fires == [utc("2026-03-07 14:00"), utc("2026-03-08 14:00"), utc("2026-03-09 14:00")]
    assert fires[2].astimezone(ZoneInfo("America/New_York")).isoformat() == "2026-03-09T10:00:00-04:00"


@settings(deadline=None)
@given(
    st.integers(min_value=1, max_value=366 * 86400),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),  # noqa: DTZ001
    st.integers(min_value=-(10**12), max_value=10**13),
)
def test_every_fires_on_the_anchor_grid(interval_s: int, anchor: datetime, after_us: int) -> None:
    recurrence = Recurrence(EveryRule(interval_s), start_at=anchor)
    after = anchor + timedelta(microseconds=after_us)
    fire = next_fire(recurrence, after)
    assert fire is not None and fire > after and fire >= anchor
    steps, rest = divmod(fire - anchor, timedelta(seconds=interval_s))
    assert rest == timedelta(0) and steps >= 0
    # No grid point is skipped: the one before the fire is not after ``after`` (or there is none).
    assert fire - timedelta(seconds=interval_s) <= after or (steps == 0 and after < anchor)


# --- bounds --------------------------------------------------------------------------------------------------


def test_start_at_is_inclusive_and_end_at_is_inclusive() -> None:
    recurrence = Recurrence(CronRule("0 * * * *"), start_at=utc("2026-06-01 10:00"), end_at=utc("2026-06-01 13:00"))
    assert preview(recurrence, NOW, 10) == [utc(f"2026-06-01 {h}:00") for h in (10, 11, 12, 13)]
    assert next_fire(recurrence, utc("2026-06-01 13:00")) is None


def test_start_at_between_matches_waits_for_the_next_match() -> None:
    recurrence = Recurrence(CronRule("0 * * * *"), start_at=utc("2026-06-01 10:00:01"))
    assert next_fire(recurrence, NOW) == utc("2026-06-01 11:00")


def test_max_fires_counts_what_was_fired() -> None:
    recurrence = Recurrence(CronRule("*/15 * * * *"), max_fires=3)
    assert preview(recurrence, NOW, 10) == [utc("2026-05-01 12:15"), utc("2026-05-01 12:30"), utc("2026-05-01 12:45")]
    assert next_fire(recurrence, NOW, fired=2) == utc("2026-05-01 12:15")
    assert next_fire(recurrence, NOW, fired=3) is None
    assert preview(recurrence, NOW, 10, fired=2) == [utc("2026-05-01 12:15")]


def test_every_with_all_bounds() -> None:
    recurrence = parse_recurrence(
        now=NOW, every="2h", start_at=utc("2026-05-02 00:00"), end_at=utc("2026-05-02 05:00"), max_fires=10
    )
    assert preview(recurrence, NOW, 10) == [utc("2026-05-02 00:00"), utc("2026-05-02 02:00"), utc("2026-05-02 04:00")]


def test_preview_renders_utc_and_local() -> None:
    recurrence = parse_recurrence(now=NOW, cron="30 2 * * *", timezone="Asia/Kolkata")
    [first] = preview(recurrence, NOW, 1)
    assert rec.occurrence(recurrence.rule, first).as_json() == {
        "utc": "2026-05-01T21:00:00+00:00",
        "local": "2026-05-02T02:30:00+05:30",
        "timezone": "Asia/Kolkata",
    }
    assert rec.occurrence(EveryRule(60), first).local.tzinfo == ZoneInfo("UTC")


def test_croniter_parses_once_per_expression() -> None:
    rec._compiled.cache_clear()
    recurrence = Recurrence(CronRule("7,37 * * * *", "America/New_York", on_overlap="both"))
    assert len(preview(recurrence, NOW, 200)) == 200
    info = rec._compiled.cache_info()
    assert info.misses == 1 and info.hits >= 200


# --- properties over zones and crons ------------------------------------------------------------------------

ZONES = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Europe/Berlin",
    "America/Sao_Paulo",  # DST until 2019, its gap at midnight
    "Pacific/Chatham",  # +12:45 / +13:45, changes at 02:45
    "UTC",
]
_YEARS = (2016, 2034)

# Day fields are mostly "*" so that most crons match on transition days.
crons = st.one_of(
    st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "* * * * *", "30 2 * * *", "0 0 * * *"]),
    st.tuples(
        st.sampled_from(["*", "0", "30", "45", "*/15", "5,35", "0-10", "59"]),
        st.sampled_from(["*", "0", "1", "2", "3", "*/2", "1-3", "23"]),
        st.sampled_from(["*"] * 6 + ["1", "15", "1-7"]),
        st.sampled_from(["*"] * 6 + ["3", "10", "4,9"]),
        st.sampled_from(["*"] * 6 + ["0", "1-5", "6"]),
    ).map(" ".join),
)
rules = st.builds(
    CronRule,
    expr=crons,
    timezone=st.sampled_from(ZONES),
    on_gap=st.sampled_from(rec.GAP_POLICIES),
    on_overlap=st.sampled_from(rec.OVERLAP_POLICIES),
)


@functools.cache
def _transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """The instants the zone changes offset in ``year``, to the minute."""
    tz = ZoneInfo(zone)
    found: list[datetime] = []
    hour = datetime(year, 1, 1, tzinfo=UTC)
    while hour.year == year:
        later = hour + timedelta(hours=1)
        if _offset(hour, tz) != _offset(later, tz):
            minutes = (hour + timedelta(minutes=i) for i in range(61))
            found.append(next(m for m in minutes if _offset(m, tz) == _offset(later, tz)))
        hour = later
    return tuple(found)


def _offset(moment: datetime, zone: ZoneInfo) -> timedelta | None:
    return moment.astimezone(zone).utcoffset()


@st.composite
def rule_and_after(draw: st.DrawFn) -> tuple[CronRule, datetime]:
    """A rule and a moment, mostly up to six hours before one of its zone's transitions."""
    rule = draw(rules)
    year = draw(st.integers(*_YEARS))
    near = _transitions(rule.timezone, year)
    if near and draw(st.sampled_from((True, True, True, False))):
        after = draw(st.sampled_from(near)) - timedelta(seconds=draw(st.integers(0, 6 * 3600)))
    else:
        after = datetime(year, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 365 * 86400)))
    return rule, after


def _is_jump(moment: datetime, zone: ZoneInfo) -> bool:
    """Whether the clocks jump forward at exactly ``moment`` (so a gap-shifted fire may land on it)."""
    before, at = _offset(moment - timedelta(seconds=1), zone), _offset(moment, zone)
    return before is not None and at is not None and at > before


def _allowed_pass(local: datetime, on_overlap: str) -> bool:
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() == local.utcoffset():
        return True
    return on_overlap == "both" or on_overlap == ("first", "last")[local.fold]


@settings(deadline=None, max_examples=150)
@given(rule_and_after())
def test_chained_fires_strictly_increase_in_utc_and_match_the_cron(drawn: tuple[CronRule, datetime]) -> None:
    rule, after = drawn
    zone, expr = ZoneInfo(rule.timezone), rec.ALIASES.get(rule.expr, rule.expr)
    fires = preview(Recurrence(rule), after, 50)
    assert len(fires) == 50 and len(set(fires)) == 50
    for previous, fire in zip([after, *fires[:-1]], fires, strict=True):
        assert fire > previous and fire.tzinfo is UTC
        local = fire.astimezone(zone)
        if croniter.match(expr, local.replace(tzinfo=None)):
            assert _allowed_pass(local, rule.on_overlap)
        else:
            assert rule.on_gap == "shift" and _is_jump(fire, zone), f"{fire} matches neither the cron nor a gap"


def _oracle(rule: CronRule, start: datetime, end: datetime) -> list[datetime]:
    """Every fire in (start, end], found minute by minute from the UTC side, independently of the module."""
    zone, fields = ZoneInfo(rule.timezone), croniter(rec.ALIASES.get(rule.expr, rule.expr)).expanded
    fires: list[datetime] = []
    moment = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while moment <= end:
        local = moment.astimezone(zone)
        if _matches(fields, local) and _allowed_pass(local, rule.on_overlap):
            fires.append(moment)
            if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
                _event(f"fires in an overlap, pass {local.fold + 1}")
        elif rule.on_gap == "shift" and _is_jump(moment, zone) and any(_matches(fields, w) for w in _gap(moment, zone)):
            fires.append(moment)
            _event("fires shifted out of a gap")
        moment += timedelta(minutes=1)
    return fires


def _event(name: str) -> None:
    """Count interesting cases in hypothesis statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(name)


def _matches(fields: list[list[Any]], wall: datetime) -> bool:
    """Cron matching for the generator's expressions: lists of values or ``["*"]``; either day field if both set."""
    minute, hour, dom, month, dow = (None if f == ["*"] else set(f) for f in fields)
    day_ok, weekday_ok = dom is None or wall.day in dom, dow is None or wall.isoweekday() % 7 in dow
    days = (day_ok or weekday_ok) if dom is not None and dow is not None else (day_ok and weekday_ok)
    return days and all(a is None or v in a for a, v in ((minute, wall.minute), (hour, wall.hour), (month, wall.month)))


def _gap(jump: datetime, zone: ZoneInfo) -> list[datetime]:
    """The wall-clock minutes that do not exist because the clocks jump forward at ``jump``."""
    wall = (jump - timedelta(seconds=1)).astimezone(zone).replace(tzinfo=None) + timedelta(seconds=1)
    end = jump.astimezone(zone).replace(tzinfo=None)
    return [wall + timedelta(minutes=i) for i in range((end - wall) // timedelta(minutes=1))]


@settings(deadline=None, max_examples=300)
@given(rule_and_after())
def test_fires_equal_a_brute_force_oracle(drawn: tuple[CronRule, datetime]) -> None:
    rule, after = drawn
    end = after + timedelta(hours=6)
    fires: list[datetime] = []
    while (fire := next_fire(Recurrence(rule), fires[-1] if fires else after)) is not None and fire <= end:
        fires.append(fire)
    assert fires == _oracle(rule, after, end)


@settings(deadline=None, max_examples=100)
@given(rule_and_after(), st.integers(min_value=0, max_value=10**6 - 1))
def test_any_moment_before_a_fire_leads_to_it(drawn: tuple[CronRule, datetime], millionths: int) -> None:
    rule, after = drawn
    recurrence = Recurrence(rule)
    fire = next_fire(recurrence, after)
    assert fire is not None
    between = after + (fire - after) * millionths // 10**6  # floor: strictly before the fire
    assert next_fire(recurrence, between) == fire


SWEEP_ZONES = [(zone, 2026) for zone in ZONES if zone not in ("Asia/Kolkata", "UTC", "America/Sao_Paulo")]
SWEEP_CRONS = ["* * * * *", "0 * * * *", "*/15 * * * *", "30 2 * * *", "45 1 * * *", "15 2 * * *", "0 0 * * *"]
SWEEP_POLICIES = [("shift", "first"), ("skip", "last"), ("shift", "both"), ("skip", "both")]


@pytest.mark.parametrize("expr", SWEEP_CRONS)
@pytest.mark.parametrize(("zone", "year"), [*SWEEP_ZONES, ("America/Sao_Paulo", 2018)])
def test_every_transition_matches_the_oracle(zone: str, year: int, expr: str) -> None:
    """Deterministic sweep: four hours around each transition, for each policy pair, against the oracle."""
    transitions = _transitions(zone, year)
    assert len(transitions) == 2
    for jump, (gap, overlap) in itertools.product(transitions, SWEEP_POLICIES):
        rule = CronRule(expr, zone, gap, overlap)  # type: ignore[arg-type]
        start, end = jump - timedelta(hours=2), jump + timedelta(hours=2)
        fires = preview(Recurrence(rule, end_at=end), start, 1000)
        assert fires == _oracle(rule, start, end), (jump, gap, overlap)
