"""Pure occurrence math for recurring schedules: the row of the occurrence after a given one."""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime, timedelta

from tickd.schema import recurrence as rec
from tickd.schema import timing
from tickd.schema.model import Location, Repeat, Schedule, Status

_ONE_MS = timedelta(milliseconds=1)


def following(row: Schedule, repeat: Repeat, after: datetime, now: datetime, poller_count: int) -> Schedule | None:
    """The occurrence after nominal time ``after`` as a row to write, or None when the timeline ends.
    A row of a poller at or above ``poller_count`` (a lowered quota) moves to a poller that stays."""
    nominal = rec.next_fire(_recurrence(repeat), after, fired=row.seq)
    if nominal is None:
        return None
    poller_id = row.location.poller_id
    if poller_id >= poller_count:  # leave a draining poller
        poller_id = timing.poller_id_for(row.schedule_id, poller_count)
    jitter_ms = row.options.jitter_ms if row.options is not None else 0
    due = timing.truncate_ms(timing.due_time(nominal + timing.jitter(row.schedule_id, nominal, jitter_ms), now))
    # Catching up, several overdue occurrences are each due "now": the next one's row must not land on
    # this one's key (same due, same id), or writing it overwrites the occurrence being fired.
    due = max(due, row.location.due_at + _ONE_MS)
    return dataclasses.replace(
        row,
        location=Location(poller_id, due),
        fire_at=nominal,
        seq=row.seq + 1,
        status=Status.SCHEDULED,
        attempts=0,
        fired_at=None,
        last_error=None,
        tries=(),
    )


@functools.lru_cache(maxsize=4096)
def _recurrence(repeat: Repeat) -> rec.Recurrence:
    """The pure recurrence of a stored rule, built once per distinct rule (not per fire)."""
    return repeat.recurrence()
