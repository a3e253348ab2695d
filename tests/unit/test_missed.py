"""Missed fires (``schema.missed``, issue 27 item 1): which occurrences a policy fires when they cannot start
within their deadline, where the timeline goes on, what is recorded as skipped; refusals naming the field."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema import calendars as cal
from tickd.schema import missed
from tickd.schema import recurrence as rec
from tickd.schema.errors import InvalidInput

START = datetime(2030, 5, 1, 9, 0, tzinfo=UTC)
EVERY_10S = rec.Recurrence(rec.EveryRule(10), start_at=START)
SID = uuid.UUID(int=7)


def decide(policy: missed.Missed, nominal: datetime, now: datetime, **kw: object) -> missed.Decision:
    return missed.decide(policy, EVERY_10S, SID, nominal, 0, now, fired=1, **kw)  # type: ignore[arg-type]


def test_fire_all_fires_however_late() -> None:
    assert decide(missed.FIRE_ALL, START, START + timedelta(days=3)) == missed.ON_TIME


def test_skip_fires_within_the_deadline_and_past_it_goes_on_at_the_first_that_can_start_in_time() -> None:
    skip = missed.Missed("skip", 60)
    assert decide(skip, START, START + timedelta(seconds=60)) == missed.ON_TIME
    now = START + timedelta(seconds=95)
    decision = decide(skip, START, now)
    assert (
        decision.verdict is missed.Verdict.SKIP
        and decision.reason == "skipped: missed (95.0 s late, start deadline 60 s)"
    )
    # The timeline goes on after now - 60 s: the occurrence at +40 s is the first that can start in time.
    following = rec.next_fire(EVERY_10S, decision.resume_after, fired=1)  # type: ignore[arg-type]
    assert following == START + timedelta(seconds=40)
    assert [p.nominal for p in decision.passed] == [START + timedelta(seconds=s) for s in (10, 20, 30)]


def test_fire_once_fires_only_the_latest_of_the_missed_ones() -> None:
    once = missed.Missed("fire_once", 30)
    now = START + timedelta(seconds=95)
    decision = decide(once, START, now)
    assert decision.verdict is missed.Verdict.SKIP and "a later missed occurrence fires once instead" in (
        decision.reason or ""
    )
    latest = rec.next_fire(EVERY_10S, decision.resume_after, fired=1)  # type: ignore[arg-type]
    assert latest == START + timedelta(seconds=90)
    assert [p.nominal for p in decision.passed] == [START + timedelta(seconds=s) for s in range(10, 90, 10)]
    assert decide(once, START + timedelta(seconds=90), now) == missed.ON_TIME  # late too, but the latest


def test_lateness_counts_from_the_jittered_due_time() -> None:
    skip = missed.Missed("skip", 5)
    due = missed.meant_due(SID, START, 10_000)
    assert due > START  # this fire id's jitter is not zero
    on_time = missed.decide(skip, EVERY_10S, SID, START, 10_000, due + timedelta(seconds=5), fired=1)
    assert on_time == missed.ON_TIME
    late = missed.decide(skip, EVERY_10S, SID, START, 10_000, due + timedelta(seconds=5.001), fired=1)
    assert late.verdict is missed.Verdict.SKIP


def test_excluded_occurrences_are_neither_fired_nor_recorded_as_missed() -> None:
    walls = (START + timedelta(seconds=15), START + timedelta(seconds=45))  # a calendar's ranges: naive walls
    quiet = cal.Calendar("quiet", 1, "UTC", ranges=(tuple(w.replace(tzinfo=None) for w in walls),))  # type: ignore[arg-type]
    once = missed.Missed("fire_once", 30)
    decision = decide(once, START, START + timedelta(seconds=95), calendars=[quiet])
    # 20, 30 and 40 s are in the blackout: not missed, not recorded here (the chain records them).
    assert [p.nominal for p in decision.passed] == [START + timedelta(seconds=s) for s in (10, 50, 60, 70, 80)]


def test_passed_occurrences_are_recorded_up_to_a_bound_and_the_timeline_goes_on_after_the_last() -> None:
    decision = decide(missed.Missed("skip", 1), START, START + timedelta(hours=1))
    assert len(decision.passed) == missed.RECORDED_PER_STEP
    assert decision.resume_after == decision.passed[-1].nominal  # the next one is decided again


@pytest.mark.parametrize(("policy", "fires"), [("skip", 340), ("fire_once", 350)])
def test_an_outage_longer_than_a_step_records_every_occurrence_once_in_steps(policy: str, fires: int) -> None:
    """Simulation seed 601925: a step passing over more occurrences than it records used to jump past the
    rest, neither fired nor recorded. Chained step by step, as the poller does, each occurrence before the
    one that fires is recorded skipped exactly once, and the timeline goes on where the policy says."""
    rule, now = missed.Missed(policy, 15), START + timedelta(seconds=355)  # 36 occurrences due by now
    recorded: list[datetime] = []
    nominal, steps = START, 0
    while True:
        decision = decide(rule, nominal, now)
        if decision.verdict is missed.Verdict.FIRE:
            break
        steps += 1
        assert len(decision.passed) <= missed.RECORDED_PER_STEP
        recorded += [nominal, *(p.nominal for p in decision.passed)]
        following = rec.next_fire(EVERY_10S, decision.resume_after, fired=1)  # type: ignore[arg-type]
        assert following is not None
        nominal = following
    assert nominal == START + timedelta(seconds=fires) and steps == 2
    assert recorded == [START + timedelta(seconds=10 * i) for i in range(fires // 10)]


@pytest.mark.parametrize(
    ("policy", "deadline", "field"),
    [
        ("later", None, "missed.policy"),
        ("fire_all", "60s", "missed.deadline"),
        ("skip", "0s", "missed.deadline"),
        ("skip", "8d", "missed.deadline"),
        ("fire_once", "soon", "missed.deadline"),
    ],
)
def test_bad_policies_are_refused_naming_the_field(policy: str, deadline: str | None, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        missed.parse_missed(policy, deadline)
    assert caught.value.field == field


def test_a_policy_without_a_deadline_gets_the_default() -> None:
    assert missed.parse_missed("skip", None) == missed.Missed("skip", missed.DEFAULT_DEADLINE_S)
    assert missed.parse_missed(None, None) == missed.FIRE_ALL
    assert missed.parse_missed("fire_once", "5m") == missed.Missed("fire_once", 300)


def test_after_the_catch_up_windows_skip_a_timeline_goes_on_where_its_policy_says() -> None:
    """The window (here an hour) skipped the occurrence at START with its minute; now is 2 h later. The
    next occurrence written is the first after the moment returned."""
    now = START + timedelta(hours=2, seconds=5)
    hour = 3600

    def goes_on_at(policy: missed.Missed, window_s: int = hour) -> datetime | None:
        after = missed.after_window_skip(policy, EVERY_10S, START, now, window_s, fired=1)
        return rec.next_fire(EVERY_10S, after, fired=1)

    assert goes_on_at(missed.FIRE_ALL) == START + timedelta(hours=2, seconds=10)  # as before: after now
    assert goes_on_at(missed.Missed("skip", 30)) == START + timedelta(hours=2) - timedelta(seconds=20)
    assert goes_on_at(missed.Missed("fire_once", 30)) == START + timedelta(hours=2)  # the latest, once
    # The window is the outer bound: a latest occurrence older than it does not fire.
    sparse = rec.Recurrence(rec.EveryRule(5400), start_at=START)  # every 90 min: the latest by now is at 1:30
    once = missed.Missed("fire_once", 30)
    inside = missed.after_window_skip(once, sparse, START, now, hour, fired=1)
    assert rec.next_fire(sparse, inside, fired=1) == START + timedelta(minutes=90)
    assert missed.after_window_skip(once, sparse, START, now, 1800, fired=1) == now  # 1:30 is older than 30 min
