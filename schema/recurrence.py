"""Recurring schedules: parsing, validation and next-fire math. Pure: callers pass ``after`` and ``now``.

A recurring schedule fires one occurrence at a time, each like a one-time schedule whose fire id is
``timing.fire_id(schedule_id, nominal)``. The next occurrence is computed from the *nominal* time of the
current one, never from when it actually fired, so a late fire neither shifts nor lags the timeline.

Two kinds of rule:

- ``every`` ("20s", "15m", "2h", "1d"): elapsed time, not wall-clock time. Occurrences are
  ``start_at + k * interval`` for k = 0, 1, 2, ...; "1d" is exactly 86,400 s, so it keeps its UTC
  time of day and moves by an hour in local time across DST. Without ``start_at`` the anchor is one
  interval after creation (``now``).
- ``cron``: five fields (minute hour day-of-month month day-of-week, or ``@hourly``, ``@daily``,
  ``@weekly``, ``@monthly``) matched against the wall clock of an IANA ``timezone`` (default UTC).
  When both day fields are restricted, a day matching either fires (standard cron).

Bounds: ``start_at`` and ``end_at`` are inclusive; ``max_fires`` counts occurrences already fired,
which the caller passes as ``fired``.

DST policy for cron (the README copies this):

- **Gap** (spring forward: a wall time that does not exist, e.g. 02:30 in New York on 2026-03-08, or
  02:00-02:29 on Lord Howe Island on 2026-10-04). ``on_gap="shift"`` (default) fires at the first
  valid instant after the gap, the instant the clocks jump (03:00 EDT in New York, 02:30 LHDT on Lord
  Howe); ``on_gap="skip"`` drops the occurrence. Occurrences that land on the same instant this way
  fire once.
- **Overlap** (fall back: a wall time that occurs twice, e.g. 01:00-01:59 in New York on 2026-11-01,
  01:30-01:59 on Lord Howe on 2026-04-05). ``on_overlap="first"`` (default) fires once, at the first
  occurrence (still summer time); ``"last"`` fires once, at the second; ``"both"`` fires at both.
- So, in New York, hourly ``0 * * * *`` fires on spring-forward day at 01:00 EST then 03:00 EDT
  (02:00 does not exist; shifted onto 03:00, which fires once; "skip" gives the same). On fall-back
  day with "first" it fires at 01:00 EDT then 02:00 EST, two real hours apart (01:00 EST does not
  fire); with "last" at 00:00 EDT then 01:00 EST; with "both" at 01:00 EDT and 01:00 EST.
  Every-minute ``* * * * *`` goes from 01:59 EST to 03:00 EDT in spring; in autumn "first" fires each
  minute of the repeated hour once, during its first pass, then nothing until 02:00 EST; "last" fires
  nothing from 01:00 EDT and resumes at 01:00 EST; "both" fires every real minute.
- Zones without DST (Asia/Kolkata, UTC) have neither. Each next fire is strictly later than the time
  it is computed from, so a chain of fires never goes backwards nor repeats an instant.

Bounded work: a search for the next fire looks at no more than ``MAX_SCAN_STEPS`` wall times that
match the cron (a rule such as ``30 2 * 3 0#2`` in New York with ``on_gap="skip"`` matches only
wall times inside the spring-forward gap, so it never fires). ``parse_recurrence`` refuses a rule whose
search runs out; ``next_fire`` answers None (the timeline ends) and ``preview`` returns what it found.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, TypeAlias, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from tickd.schema.errors import InvalidInput
from tickd.schema.timing import truncate_ms

GapPolicy: TypeAlias = Literal["shift", "skip"]
OverlapPolicy: TypeAlias = Literal["first", "last", "both"]
GAP_POLICIES: Final[tuple[GapPolicy, ...]] = ("shift", "skip")
OVERLAP_POLICIES: Final[tuple[OverlapPolicy, ...]] = ("first", "last", "both")

ALIASES: Final = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *"}
UNIT_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_INTERVAL_S: Final = 366 * 86400
# Keys zoneinfo resolves that name no IANA zone: the host's own setting and tzdata internals.
_NOT_ZONES: Final = frozenset({"localtime", "posixrules", "Factory"})
_EVERY_RE: Final = re.compile(r"([1-9][0-9]{0,8})([smhd])")
# croniter's hashed (H) and random (R) fields: R differs per parse, so nodes would disagree on the timeline.
_HASHED_RE: Final = re.compile(r"[hr](?:\(|/|$)", re.IGNORECASE)
_TICK: Final = timedelta(microseconds=1)
_SECOND: Final = timedelta(seconds=1)
# Where croniter starts when checking that an expression ever matches: a leap year, so 29 Feb counts.
_REFERENCE: Final = datetime(2000, 1, 1)  # noqa: DTZ001 - croniter works on naive wall-clock times here
# Matching wall times one search (one next_fire, or a whole preview) may skip in DST gaps without
# finding a fire: each costs 40-200 us. Legitimate rules pass over at most one gap (<= 60 matches) per year, so
# 1,000 only refuses rules that (nearly) never fire.
MAX_SCAN_STEPS: Final = 1000


@dataclass(slots=True, eq=False)
class ScanBudget:
    """The gap-skipped wall times a search may still pass over; shared by the scans of one search (or,
    passed in by a caller, by every search of one API request: ``service.recurring.RuleWork``)."""

    left: int = MAX_SCAN_STEPS


@dataclass(frozen=True, slots=True)
class CronRule:
    """Fire when the wall clock of ``timezone`` matches ``expr`` (5 fields or an alias, as written)."""

    expr: str
    timezone: str = "UTC"
    on_gap: GapPolicy = "shift"
    on_overlap: OverlapPolicy = "first"


@dataclass(frozen=True, slots=True)
class EveryRule:
    """Fire every ``interval_s`` seconds of elapsed time from the recurrence's ``start_at``."""

    interval_s: int


Rule: TypeAlias = CronRule | EveryRule


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A rule with its bounds; datetimes are aware UTC. An ``every`` rule is anchored at ``start_at``."""

    rule: Rule
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_fires: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rule, EveryRule) and self.start_at is None:
            raise ValueError("an every rule needs start_at: it is the anchor of its timeline")


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One nominal fire time, in UTC and on the rule's wall clock (the preview endpoint shows both)."""

    utc: datetime
    local: datetime
    timezone: str

    def as_json(self) -> dict[str, str]:
        return {"utc": self.utc.isoformat(), "local": self.local.isoformat(), "timezone": self.timezone}


# --- parsing -------------------------------------------------------------------------------------------


def parse_recurrence(
    *,
    now: datetime,
    cron: str | None = None,
    timezone: str | None = None,
    every: str | None = None,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    max_fires: int | None = None,
    on_gap: str | None = None,
    on_overlap: str | None = None,
    min_interval_s: int = 1,
    budget: ScanBudget | None = None,
) -> Recurrence:
    """A validated recurrence, or ``InvalidInput`` naming the offending field.

    Datetimes are truncated to milliseconds (the store's precision) so a stored recurrence computes
    the same timeline after reload. It must have an occurrence after ``now``.
    """
    rule = parse_rule(cron, timezone, every, on_gap, on_overlap, min_interval_s=min_interval_s)
    start = _bound(start_at, "start_at")
    end = _bound(end_at, "end_at")
    if isinstance(rule, EveryRule) and start is None:
        start = truncate_ms(now.astimezone(UTC) + timedelta(seconds=rule.interval_s))
    if end is not None and start is not None and end <= start:
        raise InvalidInput("end_at must be later than start_at", field="end_at")
    recurrence = Recurrence(rule, start, end, _max_fires(max_fires))
    first = _next_from_start(recurrence, now.astimezone(UTC), budget or ScanBudget())
    if first is None:
        raise InvalidInput(
            f"the rule has no occurrence it can fire among the next {MAX_SCAN_STEPS} wall times it matches"
            " (with on_gap 'skip', each falls in a DST gap)",
            field="cron",
        )
    if end is not None and first > end:
        raise InvalidInput("no occurrence falls between now and end_at", field="end_at")
    return recurrence


def parse_rule(
    cron: str | None,
    timezone: str | None,
    every: str | None,
    on_gap: str | None = None,
    on_overlap: str | None = None,
    *,
    min_interval_s: int = 1,
) -> Rule:
    """Exactly one of ``cron`` and ``every``; the zone and DST policies apply to cron only."""
    if cron is not None and every is not None:
        raise InvalidInput("give either cron or every, not both", field="every")
    if every is not None:
        for name, value in (("timezone", timezone), ("on_gap", on_gap), ("on_overlap", on_overlap)):
            if value is not None:
                raise InvalidInput(f"{name} applies to cron only: every counts elapsed time", field=name)
        return EveryRule(parse_every(every, min_interval_s=min_interval_s))
    if cron is None:
        raise InvalidInput("a recurring schedule needs cron or every", field="cron")
    gap = cast(GapPolicy, _choice(on_gap, GAP_POLICIES, "on_gap"))
    overlap = cast(OverlapPolicy, _choice(on_overlap, OVERLAP_POLICIES, "on_overlap"))
    return CronRule(parse_cron(cron), parse_timezone(timezone), gap, overlap)


def parse_cron(text: str) -> str:
    """The expression with whitespace normalised; 5 fields or one of ``ALIASES``, and it must match.

    croniter's extensions L, W, # and ? are accepted; H and R are not (a timeline must be deterministic).
    """
    expr = " ".join(text.split())
    if expr.startswith("@"):
        if expr.lower() not in ALIASES:
            raise InvalidInput(f"unknown cron alias {expr!r}; use one of {', '.join(ALIASES)}", field="cron")
        return expr.lower()
    fields = expr.split(" ")
    if len(fields) != 5:
        raise InvalidInput(
            "cron needs exactly 5 fields (minute hour day-of-month month day-of-week); no seconds or years",
            field="cron",
        )
    if any(_HASHED_RE.match(f) for f in fields):
        raise InvalidInput("hashed (H) and random (R) cron fields are not supported", field="cron")
    try:
        copy.copy(_compiled(expr)).get_next(datetime, start_time=_REFERENCE)
    except (ValueError, TypeError, KeyError) as exc:  # croniter's errors subclass these
        raise InvalidInput(f"invalid cron expression {expr!r}: {exc}", field="cron") from None
    return expr


def parse_timezone(key: str | None) -> str:
    """An IANA zone name (default ``UTC``) that zoneinfo knows."""
    if key is None:
        return "UTC"
    if key not in _NOT_ZONES:
        try:
            ZoneInfo(key)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return key
    raise InvalidInput(f"unknown time zone {key!r}; use an IANA name such as 'Europe/London'", field="timezone")


def parse_every(text: str, *, min_interval_s: int = 1) -> int:
    """Seconds in ``<int><unit>``, unit one of s, m, h, d: "20s", "15m", "2h", "1d"."""
    return parse_duration(text, "every", min_interval_s, MAX_INTERVAL_S)


def parse_duration(text: str, field: str, low_s: int, high_s: int) -> int:
    """Seconds in ``<int><unit>`` (s, m, h, d) within ``[low_s, high_s]``; ``InvalidInput`` names ``field``."""
    match = _EVERY_RE.fullmatch(text)
    if match is None:
        raise InvalidInput(f"{field} must look like 20s, 15m, 2h or 1d, got {text!r}", field=field)
    seconds = int(match[1]) * UNIT_S[match[2]]
    if not low_s <= seconds <= high_s:
        raise InvalidInput(f"{field} must be between {low_s}s and {format_duration(high_s)}, got {text!r}", field=field)
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest ``<int><unit>`` for ``seconds`` ("1d", "90m", "20s"): how the API shows ``every``."""
    for unit in ("d", "h", "m"):
        if seconds % UNIT_S[unit] == 0:
            return f"{seconds // UNIT_S[unit]}{unit}"
    return f"{seconds}s"


def _choice(value: str | None, allowed: tuple[str, ...], field: str) -> str:
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise InvalidInput(f"{field} must be one of {', '.join(allowed)}, got {value!r}", field=field)
    return value


def _bound(moment: datetime | None, field: str) -> datetime | None:
    if moment is None:
        return None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput(f"{field} needs a UTC offset, such as 2026-01-01T09:00:00Z", field=field)
    try:
        return truncate_ms(moment.astimezone(UTC))
    except OverflowError:  # year 1 or 9999 with an offset
        raise InvalidInput(f"{field} is outside years 1-9999 in UTC", field=field) from None


def _max_fires(value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidInput(f"max_fires must be a whole number >= 1, got {value!r}", field="max_fires")
    return value


# --- next fire -----------------------------------------------------------------------------------------


def next_fire(
    recurrence: Recurrence, after: datetime, *, fired: int = 0, budget: ScanBudget | None = None
) -> datetime | None:
    """The first nominal fire strictly after ``after`` (aware), in UTC; None once the bounds are spent,
    or when no fire is found within the search budget (``MAX_SCAN_STEPS`` matching wall times).

    Pass the *nominal* time of the current occurrence as ``after`` to keep the timeline, and the number
    of occurrences fired so far as ``fired`` (for ``max_fires``).
    """
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("naive datetime: tickd only handles aware times")
    if recurrence.max_fires is not None and fired >= recurrence.max_fires:
        return None
    found = _next_from_start(recurrence, after.astimezone(UTC), budget or ScanBudget())
    if found is None:
        return None
    return None if recurrence.end_at is not None and found > recurrence.end_at else found


def preview(
    recurrence: Recurrence, after: datetime, n: int, *, fired: int = 0, budget: ScanBudget | None = None
) -> list[datetime]:
    """The next ``n`` nominal fires after ``after`` (fewer if the bounds or the one search budget that
    all ``n`` share run out first)."""
    found: list[datetime] = []
    budget = budget or ScanBudget()
    moment: datetime | None = after
    while len(found) < n and moment is not None:
        moment = next_fire(recurrence, moment, fired=fired + len(found), budget=budget)
        if moment is not None:
            found.append(moment)
    return found


def occurrence(rule: Rule, nominal: datetime) -> Occurrence:
    """``nominal`` in UTC and on the rule's wall clock (UTC for ``every``)."""
    zone = rule.timezone if isinstance(rule, CronRule) else "UTC"
    return Occurrence(nominal.astimezone(UTC), nominal.astimezone(ZoneInfo(zone)), zone)


def _next_from_start(recurrence: Recurrence, after: datetime, budget: ScanBudget) -> datetime | None:
    """The rule's next time after ``after`` that is not before ``start_at`` (inclusive); None when the
    search runs out of budget or past the calendar's end (year 9999)."""
    start, rule = recurrence.start_at, recurrence.rule
    try:
        if start is not None and start > after:
            after = start - _TICK
        if isinstance(rule, EveryRule):
            assert start is not None  # Recurrence.__post_init__ guarantees it
            return _every_next(rule.interval_s, start, after)
        return _cron_next(rule, after, budget)
    except (OverflowError, ValueError):  # datetime's range ends: year 1 or 10000
        return None


def _every_next(interval_s: int, anchor: datetime, after: datetime) -> datetime:
    if after < anchor:
        return anchor
    step = timedelta(seconds=interval_s)
    return anchor + ((after - anchor) // step + 1) * step


def _cron_next(rule: CronRule, after: datetime, budget: ScanBudget) -> datetime | None:
    """Reading every overlap with one fold makes wall time -> instant monotonic, so one forward scan
    per fold finds the answer; "both" takes the earlier of the two scans."""
    zone = ZoneInfo(rule.timezone)
    local = after.astimezone(zone)
    folds = {"first": (0,), "last": (1,), "both": (0, 1)}[rule.on_overlap]
    found = [t for t in (_scan(rule, zone, local, fold, budget) for fold in folds) if t is not None]
    return min(found, default=None)


def _scan(rule: CronRule, zone: ZoneInfo, local: datetime, fold: int, budget: ScanBudget) -> datetime | None:
    """The first instant after ``local`` that a wall time matching the rule maps to, overlaps read with
    ``fold``; None once ``budget`` matching wall times were looked at without one."""
    after = local.astimezone(UTC)
    wall = local.replace(tzinfo=None, fold=0)
    if fold == 1:
        # If ``after`` is the first pass of an overlap, the second pass of earlier wall times is still ahead.
        wall -= _overlap_length(local)
    it = copy.copy(_compiled(rule.expr))  # the cached parse is shared; its cursor is per call
    it.set_current(wall, force=True)
    while budget.left > 0:
        candidate: datetime = it.get_next(datetime)
        instant = _to_instant(candidate, zone, fold, rule.on_gap)
        if instant is None:
            budget.left -= 1  # skipped in a gap; matches before ``after`` are bounded by the overlap
        elif instant > after:
            return instant
    return None


def _overlap_length(local: datetime) -> timedelta:
    """How far ``local`` is from its second pass, if it is the first pass of a repeated wall time."""
    if local.fold == 1:
        return timedelta(0)
    first, second = local.utcoffset(), local.replace(fold=1).utcoffset()
    assert first is not None and second is not None
    return max(first - second, timedelta(0))


def _to_instant(wall: datetime, zone: ZoneInfo, fold: int, on_gap: GapPolicy) -> datetime | None:
    """The UTC instant of a naive wall time; a gap is shifted to its end or skipped per ``on_gap``."""
    instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    return None if on_gap == "skip" else _gap_end(wall, zone)


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clocks jump, for a wall time inside a spring-forward gap (bisection in seconds)."""
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # read with the new offset: before the jump
    after = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # read with the old offset: at or after it
    old_offset = before.astimezone(zone).utcoffset()
    while after - before > _SECOND:
        middle = before + (after - before) // _SECOND // 2 * _SECOND
        if middle.astimezone(zone).utcoffset() == old_offset:
            before = middle
        else:
            after = middle
    return after


@functools.lru_cache(maxsize=4096)
def _compiled(expr: str) -> croniter:
    """One parse per expression; callers copy it before moving its cursor. Aliases map to 5 fields."""
    return croniter(ALIASES.get(expr, expr), _REFERENCE, ret_type=datetime)
