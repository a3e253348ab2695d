"""Missed fires (issue 27, item 1): what a recurring schedule does with an occurrence that could not start
in time. Pure: the poller's chain step asks it before an occurrence's first attempt, and again right
before the attempt goes out; the API validates with it.

An occurrence is **missed** when its first attempt would start more than ``deadline_s`` after it was meant
to be due (its nominal time plus its jitter; not the due time stored, which a catch-up sets to "now"):
all pollers down, the schedule paused, its instance moving between nodes, a backlog. Its policy says:

- ``fire_all`` (the default, and tickd's behaviour before policies): every occurrence fires, late, one after
  another, in order. No deadline applies.
- ``skip``: a missed occurrence does not fire; the timeline goes on at the first occurrence that can
  still start within its deadline. Each one skipped is a run, with its reason.
- ``fire_once``: of the occurrences missed together, only the latest fires (late, once); the earlier ones
  are runs skipped "for a later one". The timeline then goes on as usual.

The global catch-up window (``TICKD_CATCH_UP_WINDOW_S``) stays the outer bound: minutes older than it are
skipped whole, whatever the policy.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal, TypeAlias
from uuid import UUID

import msgspec

from tickd.schema import calendars as cal
from tickd.schema import recurrence as rec
from tickd.schema import timing
from tickd.schema.errors import InvalidInput

PolicyName: TypeAlias = Literal["fire_all", "skip", "fire_once"]
POLICIES: Final = ("fire_all", "skip", "fire_once")
DEFAULT_DEADLINE_S: Final = 60  # a skip or fire_once policy given without a deadline
MAX_DEADLINE_S: Final = 7 * 86400
# Occurrences one decision passes over and records as skipped runs; past them, its timeline goes on at the
# next one, which the next chain step decides again (so a long outage is recorded in steps).
RECORDED_PER_STEP: Final = 20
_TICK: Final = timedelta(microseconds=1)


class Missed(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A schedule's (or its client's default) missed-fire policy as stored."""

    policy: PolicyName = "fire_all"
    deadline_s: int = 0  # 0 with fire_all: none

    @property
    def applies(self) -> bool:
        return self.policy != "fire_all"


FIRE_ALL: Final = Missed()


class Verdict(enum.Enum):
    FIRE = "fire"  # on time, or the policy fires it late
    SKIP = "skip"  # missed: not fired; the timeline goes on at ``Decision.resume_after``


@dataclass(frozen=True, slots=True)
class Skipped:
    """An occurrence the decision passed over, for its run: nominal time and why."""

    nominal: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with the occurrence in hand. With SKIP: its reason, the nominal time after which its
    timeline goes on (the next occurrence is the first after it), and the occurrences passed over on the
    way (at most ``RECORDED_PER_STEP``, all of them up to ``resume_after``; the one in hand is not among
    them)."""

    verdict: Verdict
    reason: str | None = None
    resume_after: datetime | None = None
    passed: tuple[Skipped, ...] = ()


ON_TIME: Final = Decision(Verdict.FIRE)


def meant_due(schedule_id: UUID, nominal: datetime, jitter_ms: int) -> datetime:
    """When an occurrence was meant to be due: its nominal time plus its jitter."""
    return nominal + timing.jitter(schedule_id, nominal, jitter_ms)


def start_by(missed: Missed, schedule_id: UUID, nominal: datetime, jitter_ms: int) -> datetime:
    """The latest moment the occurrence's first attempt may start under ``missed`` (a skip policy)."""
    return meant_due(schedule_id, nominal, jitter_ms) + timedelta(seconds=missed.deadline_s)


def decide(
    missed: Missed,
    recurrence: rec.Recurrence,
    schedule_id: UUID,
    nominal: datetime,
    jitter_ms: int,
    now: datetime,
    *,
    fired: int,
    calendars: Sequence[cal.Calendar] = (),
) -> Decision:
    """The fate of occurrence ``nominal`` (the ``fired``-th of its timeline) about to start at ``now``."""
    if not missed.applies:
        return ON_TIME
    deadline = timedelta(seconds=missed.deadline_s)
    late = now - meant_due(schedule_id, nominal, jitter_ms)
    if late <= deadline:
        return ON_TIME
    late_text = f"{late.total_seconds():.1f} s late, start deadline {missed.deadline_s} s"
    if missed.policy == "skip":
        # Go on at the first occurrence that can still start within its deadline: meant due at or after
        # now - deadline (jitter only makes one later).
        after = max(nominal, now - deadline - timedelta(microseconds=1))
        passed = _between(recurrence, nominal, after, fired, calendars, f"skipped: missed ({late_text})")
        return Decision(Verdict.SKIP, f"skipped: missed ({late_text})", _recorded_to(passed, after), passed)
    # fire_once: the latest occurrence due by now fires; the one in hand only if it is that one.
    latest = _latest_by(recurrence, nominal, now, fired, calendars)
    if latest == nominal:
        return ON_TIME
    reason = f"skipped: missed ({late_text}); a later missed occurrence fires once instead"
    before_latest = latest - timedelta(microseconds=1)
    passed = _between(recurrence, nominal, before_latest, fired, calendars, reason)
    return Decision(Verdict.SKIP, reason, _recorded_to(passed, before_latest), passed)


def _recorded_to(passed: tuple[Skipped, ...], until: datetime) -> datetime:
    """Where a step's timeline goes on: after ``until``, or, when more occurrences lie before it than a step
    records, after the last one it records. The next occurrence is then decided again as the one in hand,
    so every occurrence passed over gets its run, a bounded number per step (simulation seed 601925: an
    outage of 25 occurrences recorded 20 of them, and the other 5 were neither fired nor recorded)."""
    if len(passed) == RECORDED_PER_STEP and passed[-1].nominal < until:
        return passed[-1].nominal
    return until


def after_window_skip(
    missed: Missed,
    recurrence: rec.Recurrence,
    nominal: datetime,
    now: datetime,
    window_s: int,
    *,
    fired: int,
    calendars: Sequence[cal.Calendar] = (),
) -> datetime:
    """Where a timeline goes on (its next occurrence is the first after the moment returned) once the
    catch-up window skipped its occurrence ``nominal`` with its whole minute. The window is the outer
    bound: nothing older than it fires. fire_all (the default): the first occurrence after now; skip: the
    first that can still start within its deadline; fire_once: the latest occurrence due by now, if it is
    a later one than ``nominal`` and inside the window, fires once."""
    if missed.policy == "skip":
        return max(nominal, now - timedelta(seconds=missed.deadline_s) - _TICK)
    if missed.policy == "fire_once":
        latest = _latest_by(recurrence, nominal, now, fired, calendars)
        if latest > nominal and latest >= now - timedelta(seconds=window_s):
            return latest - _TICK
    return now


def _between(
    recurrence: rec.Recurrence,
    nominal: datetime,
    until: datetime,
    fired: int,
    calendars: Sequence[cal.Calendar],
    reason: str,
) -> tuple[Skipped, ...]:
    """The occurrences after ``nominal`` up to ``until`` (inclusive), the first ``RECORDED_PER_STEP``."""
    found: list[Skipped] = []
    moment = nominal
    while len(found) < RECORDED_PER_STEP:
        following, _ = cal.next_allowed(recurrence, moment, calendars, fired=fired)
        if following is None or following > until:
            break
        found.append(Skipped(following, reason))
        moment = following
    return tuple(found)


def _latest_by(
    recurrence: rec.Recurrence, nominal: datetime, now: datetime, fired: int, calendars: Sequence[cal.Calendar]
) -> datetime:
    """The last occurrence from ``nominal`` on whose nominal time is at or before ``now``: found by
    stepping, at most ``rec.MAX_SCAN_STEPS`` occurrences at a time from the newest known, so a long outage
    of a frequent rule is a bounded search (past it, the latest found so far)."""
    latest = nominal
    budget = rec.ScanBudget()
    for _ in range(rec.MAX_SCAN_STEPS):
        following, _ = cal.next_allowed(recurrence, latest, calendars, fired=fired, budget=budget)
        if following is None or following > now:
            return latest
        latest = following
    return latest


def parse_missed(policy: str | None, deadline: str | None) -> Missed:
    """A policy from what a client sent (``missed.policy``, ``missed.deadline``: ``"90s"``, ``"5m"``);
    ``InvalidInput`` naming the field."""
    name = policy or "fire_all"
    if name not in POLICIES:
        raise InvalidInput(
            f"{name!r} is not a missed-fire policy; give one of {', '.join(POLICIES)}", field="missed.policy"
        )
    if name == "fire_all":
        if deadline is not None:
            raise InvalidInput(
                "fire_all fires every occurrence, however late: it takes no deadline", field="missed.deadline"
            )
        return FIRE_ALL
    seconds = (
        DEFAULT_DEADLINE_S if deadline is None else rec.parse_duration(deadline, "missed.deadline", 1, MAX_DEADLINE_S)
    )
    return Missed(name, seconds)  # type: ignore[arg-type]
