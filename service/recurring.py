"""Recurring schedules and jitter at the API: from request fields to a stored ``Options``, and back.

The rules themselves (cron in a zone, every, DST policies, bounds) are the pure ``schema.recurrence``;
this module only maps request fields onto it, merges a patch into a stored rule, and renders views.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from tickd.schema import calendars as cal
from tickd.schema import missed as missed_fires
from tickd.schema import recurrence as rec
from tickd.schema.model import Options, Repeat, Run, Schedule, Status
from tickd.schema.store import Store
from tickd.service.errors import Invalid, Malformed
from tickd.service.settings import ApiSettings
from tickd.service.validation import REPEAT_FIELDS, MissedFields, RepeatFields, parse_time

T = TypeVar("T")

# Threads that search cron rules off the event loop. A search holds the GIL only a switch interval
# (5 ms) at a time, so the loop answers other requests meanwhile. A client searches in one thread at a
# time (``RuleWork``): one client's flood of rules queues behind its own searches, and another client
# always finds a thread; a request's searches together pass over at most its scan budget.
RULE_THREADS = 2
_RULES = ThreadPoolExecutor(max_workers=RULE_THREADS, thread_name_prefix="tickd-rules")
# Each client's turn at the rule threads, while one of its requests holds it.
_TURNS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


def _turn(client_id: str) -> asyncio.Lock:
    turn = _TURNS.get(client_id)
    if turn is None:
        turn = _TURNS[client_id] = asyncio.Lock()
    return turn


class RuleWork:
    """The rule searches of one API request (a create, a whole batch, a preview) of ``client_id``: off
    the event loop, one at a time of that client's, sharing ``steps`` gap-skipped wall times
    (``schema.recurrence.ScanBudget``) between them. Each search still gets at most ``MAX_SCAN_STEPS``;
    once the request's are spent, its further cron rules are refused (422 ``request_budget_spent``)
    instead of costing more."""

    def __init__(self, steps: int, client_id: str) -> None:
        self.left = steps
        self.calendars: dict[str, cal.Calendar] = {}  # the request's calendars read so far, by name
        self._open: list[tuple[rec.ScanBudget, int]] = []
        self._turn = _turn(client_id)

    async def run(self, search: Callable[[RuleWork], T]) -> T:
        """``search(self)`` in a rule thread, after the request's earlier searches are done."""
        async with self._turn:
            try:
                return await asyncio.get_running_loop().run_in_executor(_RULES, search, self)
            finally:
                self._settle()

    def scan(self) -> rec.ScanBudget:
        """A budget for one search (called by the search, in its thread): ``MAX_SCAN_STEPS``, or what is
        left of the request's if less."""
        self._settle()
        if self.left <= 0:
            raise Invalid(
                "this request's searches of cron rules have passed over as many wall times as one request "
                "may; send the remaining rules in another request",
                field="cron",
                code="request_budget_spent",
            )
        budget = rec.ScanBudget(min(rec.MAX_SCAN_STEPS, self.left))
        self._open.append((budget, budget.left))
        return budget

    def _settle(self) -> None:
        for budget, given in self._open:
            self.left -= given - budget.left
        self._open.clear()


def asks_repeat(fields: RepeatFields) -> bool:
    return fields.cron is not UNSET or fields.every is not UNSET


def given(fields: RepeatFields) -> list[str]:
    return [name for name in REPEAT_FIELDS if getattr(fields, name) is not UNSET]


def refuse_repeat_fields(fields: RepeatFields, why: str) -> None:
    """A one-time schedule names no recurrence field: each would be silently meaningless."""
    names = given(fields)
    if names:
        raise Invalid(f"{names[0]} {why}", field=names[0])


def _value(value: T | UnsetType) -> T | None:
    return None if isinstance(value, UnsetType) else value


def parse_repeat(
    fields: RepeatFields, now: datetime, settings: ApiSettings, budget: rec.ScanBudget | None = None
) -> rec.Recurrence:
    """The validated recurrence of a create or preview (``cron`` or ``every`` required)."""
    return rec.parse_recurrence(
        now=now,
        cron=_value(fields.cron),
        timezone=_value(fields.timezone),
        every=_value(fields.every),
        start_at=_value(fields.start_at),
        end_at=_value(fields.end_at),
        max_fires=_value(fields.max_fires),
        on_gap=_value(fields.on_gap),
        on_overlap=_value(fields.on_overlap),
        min_interval_s=settings.min_interval_s,
        budget=budget,
    )


async def timeline(
    fields: RepeatFields,
    now: datetime,
    settings: ApiSettings,
    work: RuleWork,
    calendars: Sequence[cal.Calendar] = (),
) -> tuple[rec.Recurrence, datetime]:
    """A create's recurrence and its first fire that ``calendars`` do not exclude; a cron rule is searched
    off the loop (``work``)."""

    def search(work: RuleWork) -> tuple[rec.Recurrence, datetime]:
        recurrence = parse_repeat(fields, now, settings, work.scan())
        return recurrence, first_fire(recurrence, now, settings, work.scan(), calendars)

    if fields.cron is UNSET and not calendars:  # every: arithmetic, no search
        recurrence = parse_repeat(fields, now, settings)
        return recurrence, first_fire(recurrence, now, settings)
    return await work.run(search)


async def preview(
    fields: RepeatFields,
    now: datetime,
    after: datetime,
    count: int,
    settings: ApiSettings,
    work: RuleWork,
    calendars: Sequence[cal.Calendar] = (),
) -> tuple[rec.Recurrence, list[tuple[datetime, cal.Calendar | None]]]:
    """A rule and its next ``count`` nominal times after ``after``, each with the calendar that excludes it
    (None: it fires), searched off the loop (``work``)."""

    def search(work: RuleWork) -> tuple[rec.Recurrence, list[tuple[datetime, cal.Calendar | None]]]:
        recurrence = parse_repeat(fields, now, settings, work.scan())
        return recurrence, cal.preview(recurrence, after, count, calendars, budget=work.scan())

    if fields.cron is UNSET:
        recurrence = parse_repeat(fields, now, settings)
        return recurrence, cal.preview(recurrence, after, count, calendars)
    return await work.run(search)


def missed_of(given: MissedFields | UnsetType | None, current: Repeat | None = None) -> missed_fires.Missed | None:
    """The missed-fire policy a create or patch gives (null: the client's default), else the current one."""
    if isinstance(given, UnsetType):
        return current.missed if current is not None else None
    if given is None:
        return None
    policy = None if isinstance(given.policy, UnsetType) else given.policy
    deadline = None if isinstance(given.deadline, UnsetType) else given.deadline
    return missed_fires.parse_missed(policy, deadline)


def calendar_names(given: Sequence[str] | UnsetType | None, current: Repeat | None = None) -> tuple[str, ...]:
    """The calendars a create, patch or preview names: given (null: none), else the current rule's."""
    if isinstance(given, UnsetType):
        return current.calendars if current is not None else ()
    return cal.parse_names(given or ())


async def named_calendars(
    store: Store, client_id: str, names: Sequence[str], work: RuleWork | None = None, *, missing_ok: bool = False
) -> list[cal.Calendar]:
    """The client's calendars ``names`` names, in its order; 422 naming ``calendars.i`` for one it lacks
    (``missing_ok``: left out, as a stored schedule's calendar deleted since is). Each is read once per
    request (``work``: a batch's items share it)."""
    known = work.calendars if work is not None else {}
    found = []
    for i, name in enumerate(cal.parse_names(names)):
        if name not in known:
            stored = await store.get_calendar(client_id, name)
            if stored is None and missing_ok:
                continue
            if stored is None:
                raise Invalid(
                    f"no calendar named {name!r}; create it with PUT /v1/calendars/{name}",
                    field=f"calendars.{i}",
                    code="unknown_calendar",
                )
            known[name] = stored.calendar
        found.append(known[name])
    return found


def implicit_start(fields: RepeatFields) -> bool:
    """An every rule without start_at: tickd anchors it one interval after now."""
    return fields.every is not UNSET and fields.start_at is UNSET


def merge_repeat(
    current: Repeat,
    patch: RepeatFields,
    now: datetime,
    settings: ApiSettings,
    calendars: Sequence[str] = (),
    missed: missed_fires.Missed | None = None,
) -> Repeat:
    """A stored rule with a patch's fields laid over it; giving ``cron`` drops ``every`` and the reverse.
    ``calendars``: the names the patched rule names (``calendar_names``)."""
    explicit_start = current.start_at is not None and not current.implicit_start
    merged = RepeatFields(
        cron=current.cron if current.cron is not None else UNSET,
        timezone=current.timezone if current.cron is not None else UNSET,
        every=rec.format_duration(current.every_s) if current.every_s is not None else UNSET,
        start_at=current.start_at if explicit_start and current.start_at is not None else UNSET,
        end_at=current.end_at if current.end_at is not None else UNSET,
        max_fires=current.max_fires if current.max_fires is not None else UNSET,
        on_gap=current.on_gap if current.cron is not None else UNSET,
        on_overlap=current.on_overlap if current.cron is not None else UNSET,
    )
    if patch.cron is not UNSET:
        merged.every = UNSET
    if patch.every is not UNSET:
        merged.cron = merged.timezone = merged.on_gap = merged.on_overlap = UNSET
        if patch.start_at is UNSET:
            merged.start_at = UNSET  # a new interval starts a new timeline: one interval from now
    for name in given(patch):
        setattr(merged, name, getattr(patch, name))
    repeat = Repeat.from_recurrence(parse_repeat(merged, now, settings), implicit_start=implicit_start(merged))
    return msgspec.structs.replace(repeat, calendars=tuple(calendars), missed=missed)


def first_fire(
    recurrence: rec.Recurrence,
    now: datetime,
    settings: ApiSettings,
    budget: rec.ScanBudget | None = None,
    calendars: Sequence[cal.Calendar] = (),
) -> datetime:
    """The first occurrence after ``now`` that ``calendars`` do not exclude, within the horizon."""
    first, excluded = cal.next_allowed(recurrence, now, calendars, budget=budget)
    if first is None and excluded:
        raise Invalid(
            "the rule has no occurrence ahead that its calendars do not exclude",
            field="calendars",
            code="no_occurrence",
        )
    if first is None:  # parse_recurrence already refuses a rule with nothing after now
        raise Invalid("no occurrence falls between now and end_at", field="end_at")
    if (first - now).total_seconds() > settings.max_horizon_s:
        raise Invalid(
            f"the first occurrence is more than {settings.max_horizon_s} s ahead", field="start_at", code="out_of_range"
        )
    return first


def jitter_ms(value: str | UnsetType, settings: ApiSettings) -> int:
    if isinstance(value, UnsetType):
        return 0
    return rec.parse_duration(value, "jitter", 1, settings.max_jitter_s) * 1000


def options_of(
    repeat: Repeat | None, jitter: int, events: int = 1, window_ms: int = 0, throttle: str | None = None
) -> Options | None:
    if repeat is None and not jitter and events == 1 and not window_ms and throttle is None:
        return None
    return Options(repeat=repeat, jitter_ms=jitter, events=events, window_ms=window_ms, throttle=throttle)


def with_extras(options: Options | None, tags: dict[str, str] | None, pause_after: int | None) -> Options | None:
    """``options`` carrying ``tags`` (sorted by key) and ``pause_after_failures``, what a schedule says beyond
    its timing (changing them moves no fire); None when nothing is left to say."""
    pairs = tuple(sorted((tags or {}).items()))
    extended = msgspec.structs.replace(options or Options(), tags=pairs, pause_after_failures=pause_after)
    return None if extended == Options() else extended


def tags_of(options: Options | None) -> dict[str, str]:
    return dict(options.tags) if options is not None else {}


def pause_after(given: int | UnsetType | None, current: Options | None, repeat: Repeat | None) -> int | None:
    """A create's or patch's ``pause_after_failures``: given (null: the client's default), else the current
    one; refused for a one-time schedule (it has one fire)."""
    if isinstance(given, UnsetType):
        return current.pause_after_failures if current is not None and repeat is not None else None
    if given is not None and repeat is None:
        raise Invalid(
            "pause_after_failures applies to recurring schedules only (give cron or every)",
            field="pause_after_failures",
        )
    return given


def batch_shape(
    events: int | UnsetType, window: str | UnsetType, current: Options | None, settings: ApiSettings
) -> tuple[int, int]:
    """(events, window_ms) of a create or patch: given values, else the current ones (else 1 and 0)."""
    count = current.events if current is not None else 1
    window_ms = current.window_ms if current is not None else 0
    if not isinstance(events, UnsetType):
        if isinstance(events, bool) or not 1 <= events <= settings.max_events:
            raise Malformed(f"events must be from 1 to {settings.max_events}", field="events", code="out_of_range")
        count = events
    if not isinstance(window, UnsetType):
        window_ms = rec.parse_duration(window, "window", 1, settings.max_window_s) * 1000
    return count, window_ms


def parse_after(value: datetime | int | UnsetType, now: datetime) -> datetime:
    return now if isinstance(value, UnsetType) else parse_time(value, "after")


# How many of a schedule's newest runs GET reads for its last error.
_ERROR_RUNS = 10


async def with_last_error(store: Store, schedule: Schedule) -> Schedule:
    """The schedule as GET shows it: with the last error of any kind of its fires. A one-time schedule's
    row has its own; a recurring or batch schedule's row is its next occurrence, not tried yet, so its
    last error is the newest one among its latest runs (failed, retrying, or delivered after a retry)."""
    options = schedule.options
    if options is None or not options.in_runs or options.event is not None:
        return schedule
    runs = await store.list_runs(schedule.client_id, schedule.schedule_id, None, _ERROR_RUNS)
    error = next((r.last_error for r in runs if r.last_error), None)
    return schedule if error is None else dataclasses.replace(schedule, last_error=error)


def one_time_runs(schedule: Schedule) -> list[Run]:
    """A one-time schedule's history, read off its row: its one fire, if it was tried."""
    if schedule.status in (Status.SUCCEEDED, Status.FAILED) or (
        schedule.status is Status.SCHEDULED and schedule.attempts > 0
    ):
        s = schedule
        return [Run(s.fire_at, s.status, s.attempts, s.fired_at, s.last_error, tries=s.tries)]
    return []
