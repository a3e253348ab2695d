"""A backfill: the occurrences of a recurring schedule in a past range, fired once each, in order.

Each occurrence a backfill fires is a one-time row of its own, written like a trigger (``schema.triggers``)
but keyed by the occurrence, not by the time it is written: its id is derived from the schedule's and the
occurrence's nominal time (``uuid5``), and the write is reserved first under an idempotency key of the same
two (``reservation_key``), so two backfills over one occurrence, or one backfill resumed after its replica
died, write it once (the reservation keeps when it was written: a resumed write rebuilds the same row).
The row's ``fire_at`` is the nominal time and ``retry_of`` the schedule, so subscribers see the schedule's
id and the occurrence's time; its fire id is the timeline's with ``:backfill`` after it, so a subscriber
tells it from a live fire, and its outcome is the occurrence's run (``Run.backfill``).

An occurrence is left alone when its run says the timeline sent it (or is sending it), an earlier
backfill did, or a calendar of the schedule excludes it; one the timeline passed over without sending
(paused, skipped by a missed-fire policy or a calendar since removed) is fired. After the schedule was
created, an occurrence with no run at all is left alone too: the timeline writes an occurrence's run when
its fire ends, so one the poller has moved past but is still sending has none yet (``wanted``).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from datetime import datetime, timedelta

from tickd.schema import recurrence, timing
from tickd.schema.model import Client, Location, Options, Repeat, Run, Schedule, Status

# A backfill's bulk job action (``service.bulk``).
ACTION = "backfill"
_ONE_MS = timedelta(milliseconds=1)
# What a run that stops a backfill of its occurrence says: the timeline sent it (or is sending it), or an
# earlier backfill did; or it was superseded, which a node records of an occurrence it finds changed when it
# comes to fire it, though a node before it may have sent it and crashed before recording that (simulation
# seed 1046 at the backfill branch: a timed pause's change, the occurrence sent twice). Only a skipped one
# is known never sent.
SENT = frozenset({Status.SCHEDULED, Status.SUCCEEDED, Status.FAILED, Status.MOVED})


def backfill_id(parent: uuid.UUID, nominal: datetime) -> uuid.UUID:
    return uuid.uuid5(parent, f"backfill:{timing.to_epoch_ms(nominal)}")


def reservation_key(parent: uuid.UUID, nominal: datetime) -> str:
    """The idempotency key a backfill reserves before writing the occurrence (one per schedule and
    occurrence, whichever backfill writes it)."""
    return f"backfill:{parent}:{timing.to_epoch_ms(nominal)}"


def backfill_row(client: Client, parent: Schedule, nominal: datetime, due: datetime) -> Schedule:
    """The row that fires ``parent``'s occurrence at ``nominal``, due at ``due`` (millisecond precision).
    In the parent's poller instance, so one backfill's fires go out in the order they are written."""
    due = timing.truncate_ms(due)
    location = Location(timing.poller_id_for(parent.schedule_id, client.poller_count), due)
    options = Options(retry_of=parent.schedule_id, backfill=True)
    return Schedule(
        client.client_id,
        backfill_id(parent.schedule_id, nominal),
        location,
        nominal,
        parent.payload,
        parent.callback,
        due,
        options=options,
    )


def occurrences(repeat: Repeat, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """The nominal times of ``repeat``'s rule in [``start``, ``end``), oldest first: at most ``limit + 1``
    (one more than ``limit`` says the range holds more). Within the rule's own start and end; its
    ``max_fires`` does not count (a backfill names its range). The timeline of an ``every`` rule that
    tickd anchored (no start given) reaches back before its anchor, one interval at a time."""
    bounded = dataclasses.replace(repeat.recurrence(), max_fires=None)
    anchor = bounded.start_at
    if repeat.every_s is not None and repeat.implicit_start and anchor is not None and start < anchor:
        step = timedelta(seconds=repeat.every_s)
        back = math.ceil((anchor - start) / step)
        bounded = dataclasses.replace(bounded, start_at=anchor - back * step)
    found: list[datetime] = []
    moment: datetime | None = start - _ONE_MS
    while len(found) <= limit:
        assert moment is not None
        moment = recurrence.next_fire(bounded, moment)
        if moment is None or moment >= end:
            break
        found.append(moment)
    return found


def sent(run: Run | None) -> bool:
    """Whether ``run`` (an occurrence's, or None) says it was sent, or is being sent."""
    return run is not None and run.status in SENT


def wanted(run: Run | None, nominal: datetime, created_at: datetime) -> bool:
    """Whether a backfill fires the occurrence at ``nominal`` of a schedule created at ``created_at``, its
    run (None: none kept) as read now: not if it was sent; before the schedule existed, if not; after, only
    if its run says the timeline passed it over (without a run it may be on its way: the poller moves the
    timeline on before it sends an occurrence, and records the run when the send ends)."""
    if run is not None:
        return not sent(run)
    return nominal < created_at
