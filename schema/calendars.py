"""Calendars: a tenant's named sets of excluded days and stretches of time, which exclude the occurrences of
the recurring schedules that name them (issue 27, item 4). Pure: the API validates with it, and the chain
step asks it for the next occurrence no calendar excludes.

A calendar reads each occurrence's nominal time on its own wall clock (its ``timezone``, not the
schedule's) and excludes it when it falls
- on one of its ``dates`` (a whole local day: a holiday),
- on one of its excluded ``weekdays`` (``business_days`` excludes Saturday and Sunday), or
- inside one of its ``ranges``, ``[start, end)`` in local wall time (a blackout).
Local wall times are compared without their fold: both passes of a repeated hour in autumn count as
that hour.

An excluded occurrence keeps its place on the timeline (the rule and the fire ids of the others do not
move); it is not fired, and does not count towards ``max_fires``. The run history records each exclusion
a chain step passes over (``Excluded``: its first occurrence, which calendar at which version, until
when; the first ``RECORDED_PER_STEP`` of a step). The search jumps to the end of each exclusion rather than
stepping through it, so a week's blackout of a minutely schedule is one step, and it gives up after
``MAX_EXCLUSIONS_IN_A_ROW`` exclusions with no occurrence between them (the timeline then ends, as a
rule that never matches does; the API refuses such a schedule at create). Each exclusion passed over also
spends a step of the search's ``ScanBudget``, so a batch request's searches together pass over at most
its budget (``service.recurring.RuleWork``), exclusions included. "Last day of the month" is a
cron rule (``0 9 L * *``), not a calendar.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final
from zoneinfo import ZoneInfo

import msgspec

from tickd.schema import recurrence as rec
from tickd.schema.errors import InvalidInput

WEEKDAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
BUSINESS_DAYS_OFF: Final = (5, 6)
NAME_RE: Final = re.compile(r"[a-z0-9_-]{1,64}")  # as a throttle policy's
MAX_DATES: Final = 1000
MAX_RANGES: Final = 200
MAX_RANGE: Final = timedelta(days=366)
MAX_PER_SCHEDULE: Final = 8
# Exclusions one search passes over with no occurrence between them before it gives up: a daily rule
# with a weekday excluded meets one a week, a year-long blackout one.
MAX_EXCLUSIONS_IN_A_ROW: Final = 1000
# Exclusions a chain step passes over that it records as skipped runs (the first ones): a minutely rule
# through a week's holidays would otherwise write thousands in one step.
RECORDED_PER_STEP: Final = 20
_DATE_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_WALL_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?")
_TICK: Final = timedelta(microseconds=1)
_LAST_WALL: Final = datetime.combine(date.max, time.max)


class Calendar(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One calendar as stored: ``dates`` sorted and distinct, ``ranges`` sorted and merged (naive local
    wall times), ``weekdays`` 0 (Monday) to 6, sorted. ``version`` counts its changes from 1."""

    name: str
    version: int = 1
    timezone: str = "UTC"
    dates: tuple[date, ...] = ()
    ranges: tuple[tuple[datetime, datetime], ...] = ()
    weekdays: tuple[int, ...] = ()

    def exclusion_end(self, instant: datetime) -> datetime | None:
        """If this calendar excludes ``instant`` (aware), when that exclusion ends (aware UTC; the latest
        end of the rules that match); None if it does not."""
        zone = ZoneInfo(self.timezone)
        try:
            local = instant.astimezone(zone).replace(tzinfo=None)
        except OverflowError:  # past year 9999 on this clock: beyond every date and range it can hold
            return None
        ends: list[datetime] = []
        day = local.date()
        if local.weekday() in self.weekdays or _holds(self.dates, day):
            # The next local midnight (naive wall time; at the calendar's last day, its last moment).
            ends.append(datetime.combine(day, time()) + timedelta(days=1) if day < date.max else _LAST_WALL)
        at = bisect_right(self.ranges, local, key=lambda r: r[0]) - 1
        if at >= 0 and local < self.ranges[at][1]:
            ends.append(self.ranges[at][1])
        if not ends:
            return None
        try:
            return _first_instant(max(ends), zone)
        except OverflowError:  # the calendar's end (year 9999): nothing after it
            return datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class StoredCalendar:
    """A calendar as its client's store holds it: when it was made and last changed."""

    calendar: Calendar
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Excluded:
    """A stretch of a timeline a calendar excluded: its first occurrence (nominal, UTC), the calendar and
    its version, and when the exclusion ends (the timeline's next occurrence is at or after it)."""

    first: datetime
    calendar: str
    version: int
    until: datetime

    def reason(self) -> str:
        return f"skipped: calendar {self.calendar} v{self.version}"


def excluded_by(calendars: Sequence[Calendar], instant: datetime) -> tuple[Calendar, datetime] | None:
    """The first of ``calendars`` that excludes ``instant``, with when its exclusion ends."""
    for calendar in calendars:
        end = calendar.exclusion_end(instant)
        if end is not None:
            return calendar, end
    return None


def next_allowed(
    recurrence: rec.Recurrence,
    after: datetime,
    calendars: Sequence[Calendar],
    *,
    fired: int = 0,
    budget: rec.ScanBudget | None = None,
) -> tuple[datetime | None, list[Excluded]]:
    """The first nominal fire after ``after`` that no calendar excludes (None: the timeline ends), and
    the excluded stretches passed over on the way, in order. Excluded occurrences do not count as fired
    (``max_fires`` counts fires)."""
    budget = budget or rec.ScanBudget()
    passed: list[Excluded] = []
    moment = after
    for _ in range(MAX_EXCLUSIONS_IN_A_ROW + 1):
        found = rec.next_fire(recurrence, moment, fired=fired, budget=budget)
        if found is None:
            return None, passed
        hit = excluded_by(calendars, found)
        if hit is None:
            return found, passed
        calendar, until = hit
        passed.append(Excluded(found, calendar.name, calendar.version, until))
        moment = max(found, until - _TICK)  # the next fire is at or after the exclusion's end
        budget.left -= 1  # each exclusion passed over is a step of the search (a request's budget counts it)
        if budget.left <= 0:
            break
    return None, passed


def preview(
    recurrence: rec.Recurrence,
    after: datetime,
    n: int,
    calendars: Sequence[Calendar],
    *,
    fired: int = 0,
    budget: rec.ScanBudget | None = None,
) -> list[tuple[datetime, Calendar | None]]:
    """The next ``n`` nominal times after ``after``, each with the calendar that excludes it (None: it
    fires); excluded ones count towards ``n``, so a preview shows what a calendar takes away. One search
    budget for all ``n``, as ``recurrence.preview``."""
    budget = budget or rec.ScanBudget()
    shown: list[tuple[datetime, Calendar | None]] = []
    moment: datetime | None = after
    while len(shown) < n and moment is not None:
        fires = fired + sum(1 for _, by in shown if by is None)
        moment = rec.next_fire(recurrence, moment, fired=fires, budget=budget)
        if moment is not None:
            hit = excluded_by(calendars, moment)
            shown.append((moment, hit[0] if hit else None))
    return shown


# --- parsing -------------------------------------------------------------------------------------------


def parse_calendar(
    name: str,
    *,
    timezone: str | None = None,
    dates: Sequence[str] = (),
    ranges: Sequence[tuple[str, str]] = (),
    weekdays: Sequence[str] = (),
    business_days: bool = False,
    version: int = 1,
) -> Calendar:
    """A calendar from what a client sent; ``InvalidInput`` naming the field for anything wrong."""
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            "a calendar name is 1-64 characters of a-z, 0-9, _ and -",
            field="name",
        )
    zone = rec.parse_timezone(timezone)
    if len(dates) > MAX_DATES:
        raise InvalidInput(f"at most {MAX_DATES} dates", field="dates")
    if len(ranges) > MAX_RANGES:
        raise InvalidInput(f"at most {MAX_RANGES} ranges", field="ranges")
    days = sorted({_date(text, f"dates.{i}") for i, text in enumerate(dates)})
    spans = [_range(start, end, i) for i, (start, end) in enumerate(ranges)]
    off = {_weekday(text, f"weekdays.{i}") for i, text in enumerate(weekdays)}
    if business_days:
        off.update(BUSINESS_DAYS_OFF)
    if len(off) == len(WEEKDAYS):
        raise InvalidInput("a calendar cannot exclude every day of the week", field="weekdays")
    return Calendar(name, version, zone, tuple(days), merged(spans), tuple(sorted(off)))


def parse_names(names: Sequence[str]) -> tuple[str, ...]:
    """The calendars a schedule names, in its order, each once (``calendars.i`` for a bad one)."""
    if len(names) > MAX_PER_SCHEDULE:
        raise InvalidInput(f"a schedule names at most {MAX_PER_SCHEDULE} calendars", field="calendars")
    for i, name in enumerate(names):
        if not NAME_RE.fullmatch(name):
            raise InvalidInput(f"{name!r} is not a calendar name", field=f"calendars.{i}")
    return tuple(dict.fromkeys(names))


def _first_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The earlier of the instants a local wall time may name: the first pass of a repeated hour, and for
    a time inside a spring-forward gap, the one read with the offset after it (before the gap's end). An
    exclusion's end taken early costs a step of the search; taken late, it would pass over an occurrence
    that is not excluded."""
    return min(wall.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1))


def _holds(days: tuple[date, ...], day: date) -> bool:
    at = bisect_right(days, day) - 1
    return at >= 0 and days[at] == day


def _date(text: str, field: str) -> date:
    try:
        if not _DATE_RE.fullmatch(text):
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{text!r} is not a date; give YYYY-MM-DD", field=field) from None


def _wall(text: str, field: str) -> datetime:
    try:
        if not _WALL_RE.fullmatch(text):
            raise ValueError(text)
        return datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"{text!r} is not a local wall time; give YYYY-MM-DDTHH:MM[:SS], no offset (the calendar's zone applies)",
            field=field,
        ) from None


def _range(start: str, end: str, i: int) -> tuple[datetime, datetime]:
    begins, ends = _wall(start, f"ranges.{i}.from"), _wall(end, f"ranges.{i}.to")
    if not timedelta(0) < ends - begins <= MAX_RANGE:
        raise InvalidInput(f"to must be after from, at most {MAX_RANGE.days} days later", field=f"ranges.{i}.to")
    return begins, ends


def _weekday(text: str, field: str) -> int:
    day = _DAY_NAMES.get(text.strip().lower())
    if day is None:
        raise InvalidInput(f"{text!r} is not a day of the week; give one of {', '.join(WEEKDAYS)}", field=field)
    return day


# "mon" or "monday" (any case) -> 0, ... "sun" or "sunday" -> 6.
_DAY_NAMES: Final = {
    name: day
    for day, names in enumerate(
        zip(WEEKDAYS, ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"), strict=True)
    )
    for name in names
}


def merged(spans: list[tuple[datetime, datetime]]) -> tuple[tuple[datetime, datetime], ...]:
    """Overlapping or touching ranges as one: the search bisects on their starts."""
    merged: list[tuple[datetime, datetime]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return tuple(merged)
