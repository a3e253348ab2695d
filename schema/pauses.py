"""What a resume writes: a paused schedule's next fire from the resume time on, and the occurrences of
a recurring schedule that fell while it was paused (recorded in its runs as skipped, never fired).

- Recurring: the timeline goes on from the resume time: the first occurrence at or after it (not the
  ones missed). Each skipped occurrence counts towards ``max_fires`` (the timeline's occurrence number
  goes on), and the last ``MAX_SKIPPED_RUNS`` of them are written as skipped runs. A rule with no
  occurrence left (``end_at`` passed, ``max_fires`` spent) ends the schedule: it is cancelled.
- One-time: its fire keeps its time (and fire id): due then if still ahead, due now if it passed while
  the schedule was paused.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from tickd.schema import calendars as cal
from tickd.schema import recurrence as rec
from tickd.schema import timing
from tickd.schema.model import Client, Location, Run, Schedule, Status, with_pause

MAX_SKIPPED_RUNS = 100
# Occurrences walked one by one (a long pause of a frequent rule): past these, straight to the next one.
_MAX_STEPS = 10_000


@dataclasses.dataclass(frozen=True)
class Resumption:
    resumed: Schedule | None  # None: the rule has no occurrence left
    skipped: list[Run]


def resume(
    current: Schedule,
    client: Client,
    at: datetime,
    calendars: Sequence[cal.Calendar] = (),
    now: datetime | None = None,
) -> Resumption:
    """The resume at ``at`` of paused ``current`` (the fire that was next when it was paused); a recurring
    one goes on at its first occurrence from ``at`` on that ``calendars`` (its own) do not exclude, unless
    a missed-fire policy (its own, else its client's) says otherwise about the ones that fell meanwhile:
    ``skip`` fires those still within their start deadline, ``fire_once`` the latest of them, once,
    ``fire_all`` every one of them (from the first, late, as after an outage). ``now`` (if later than
    ``at``: a timed pause ended at ``at`` and is resumed late) is where the resumed fire is placed: the
    occurrences from ``at`` to ``now`` are late fires, as after an outage, not ones the pause passed over."""
    now = at if now is None else max(at, now)
    if current.repeat is None:
        return Resumption(placed_again(current, client, current.fire_at, current.seq, now), [])
    policy = current.repeat.missed or client.settings.missed
    if policy is not None and policy.policy == "fire_all":
        return Resumption(placed_again(current, client, current.fire_at, current.seq, now), [])
    recurrence = current.repeat.recurrence()
    # Skipped: the occurrences before this (a skip policy: those that can no longer start in time).
    until = at - timedelta(seconds=policy.deadline_s) if policy is not None and policy.policy == "skip" else at
    nominal: datetime | None = current.fire_at
    seq = current.seq
    skipped: collections.deque[Run] = collections.deque(maxlen=MAX_SKIPPED_RUNS)
    for _ in range(_MAX_STEPS):
        if nominal is None or nominal >= until:
            break
        skipped.append(Run(nominal, Status.SKIPPED, 0, None, seq=seq))
        nominal = rec.next_fire(recurrence, nominal, fired=seq)
        seq += 1
    if nominal is not None and nominal < until:
        nominal = rec.next_fire(recurrence, until, fired=seq)
    if policy is not None and policy.policy == "fire_once" and skipped:
        last = skipped.pop()  # the latest that fell while paused fires, once, now
        return Resumption(placed_again(current, client, last.nominal_at, last.seq, now), list(skipped))
    if nominal is not None and cal.excluded_by(calendars, nominal):
        nominal, _ = cal.next_allowed(recurrence, nominal, calendars, fired=seq - 1)
    resumed = None if nominal is None else placed_again(current, client, nominal, seq, now)
    return Resumption(resumed, list(skipped))


def placed_again(current: Schedule, client: Client, nominal: datetime, seq: int, at: datetime) -> Schedule:
    """``current``'s fire at ``nominal``, scheduled again (off a draining poller if it was on one)."""
    poller_id = current.location.poller_id
    if poller_id >= client.poller_count:
        poller_id = timing.poller_id_for(current.schedule_id, client.poller_count)
    location = Location(poller_id, timing.stored_due_at(current.schedule_id, nominal, current.options, at))
    return dataclasses.replace(
        current,
        location=location,
        fire_at=nominal,
        seq=seq,
        status=Status.SCHEDULED,
        options=with_pause(current.options, None),
        attempts=0,
        fired_at=None,
        last_error=None,
        tries=(),
    )
