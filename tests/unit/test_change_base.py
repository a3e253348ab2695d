"""``schema.changes.change_base``: what a client change builds on, and which rows it fences."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema.changes import change_base, fenced
from tickd.schema.errors import Conflict
from tickd.schema.model import HttpCallback, Location, Schedule, ScheduleRef, Status

T0 = datetime(2030, 1, 1, 1, 49, tzinfo=UTC)
SID = uuid.uuid4()
CREATED = Location(1, T0 + timedelta(seconds=59))  # the row the create wrote
A = Location(1, T0 + timedelta(seconds=37))  # change A's target: its new row landed, the old not retired
B = Location(1, T0 + timedelta(seconds=51))  # change B's target: none of its rows landed


def at(loc: Location, version: int) -> Schedule:
    return Schedule("c0", SID, loc, loc.due_at, b"{}", HttpCallback(url="http://h/"), T0, version=version)


def test_a_change_on_the_pointer_fences_what_the_pointer_lists_as_stale() -> None:
    """Seed 93769. A moved the pointer and wrote its new row, but the created row was not retired (cut
    short without a batchlog); B, built on A's row, listed the created row as stale and fenced it in its
    batch, which was lost. C reads the schedule at B's version: it must fence B's lost target's origin
    (A's row) and the created row B listed, or the created row fires after C is answered."""
    after_b = ScheduleRef("c0", SID, B, 3, previous=A, changed_version=3, write_ts=100, stale=(CREATED,))
    base = change_base(at(B, 3), after_b, None, None, clock_ts=50)
    assert base.version == 3 and base.write_ts == 101
    assert set(base.stale) == {CREATED, A}
    final = Location(1, T0 + timedelta(minutes=1, seconds=8))
    assert set(fenced(base.stale, final)) == {CREATED, A}  # both retired by C's batch


def test_a_change_on_the_pointer_with_nothing_stale_fences_only_a_move_cut_short() -> None:
    clean = ScheduleRef("c0", SID, A, 2, previous=CREATED, changed_version=2, write_ts=100)
    assert change_base(at(A, 2), clean, None, None, clock_ts=200).stale == (CREATED,)
    poller_move = ScheduleRef("c0", SID, A, 2, previous=CREATED, changed_version=1, write_ts=100)
    assert change_base(at(A, 2), poller_move, None, None, clock_ts=200).stale == ()  # a poller's own move


def test_a_change_lost_on_its_way_back_to_where_the_schedule_was_is_taken_over() -> None:
    """A change moving the schedule back to a place it left (a timed pause resumed at its original time)
    moved the pointer and lost its rows: the row at the pointer's place is the schedule's own from before,
    at an older version, not the change's. The next change takes the lost one over (simulation seed 1000
    at the timed-pause branch: the resume, retried, was refused as concurrent and the schedule stopped)."""
    parked = dataclasses.replace(at(A, 2), status=Status.PAUSED)
    lost = ScheduleRef("c0", SID, CREATED, 3, previous=A, changed_version=3, write_ts=100)
    left_there = dataclasses.replace(at(CREATED, 1), status=Status.MOVED)
    base = change_base(parked, lost, parked, left_there, clock_ts=200)
    assert base.version == 3 and base.write_ts == 200  # built on the lost change, its version taken over
    landed = at(CREATED, 3)
    with pytest.raises(Conflict):
        change_base(parked, lost, parked, landed, clock_ts=200)  # it landed: a change of someone else's
    # The change landed there and a cancel followed in place (it keeps the row's version, moves the
    # pointer's): not lost either (seed 530119: taken for lost, the cancel was undone).
    cancelled = ScheduleRef("c0", SID, CREATED, 4, previous=A, changed_version=4, write_ts=100)
    with pytest.raises(Conflict):
        change_base(parked, cancelled, parked, dataclasses.replace(landed, status=Status.CANCELLED), clock_ts=200)
