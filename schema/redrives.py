"""Redriving a dead letter: its fire written again, due at a chosen time, with its fire id unchanged
(same schedule id, same nominal time), on the store port only; pollers fire it as any scheduled row.

A dead letter is redriven once: the compare-and-set that marks it records the due time of the new
fire, and every call (the first, a repeat, a retry after a lost answer) then makes sure that one fire
is written, never a second one.
- A one-time schedule's fire (a trigger's too) moves as a durable retry does (``requeue_schedule``): a new row due then,
  the pointer moved to it (GET shows it scheduled), the failed row marked moved.
- A recurring schedule's pointer has moved on to a later occurrence, so the fire gets a row of its own,
  as a retry of an occurrence does (``moves.retry_row``: its id derived from the fire id, ``retry_of``
  the schedule), and its run shows it waiting again. The row counts one attempt: a recurring row with
  none is an occurrence the poller would chain on from, so it gets ``max_attempts - 1`` tries.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from tickd.schema import backfills, moves, timing, triggers
from tickd.schema.errors import Conflict, NotFound
from tickd.schema.model import DeadLetter, InstanceKey, Schedule, Status
from tickd.schema.store import Store


def nominal_at(letter: DeadLetter) -> datetime | None:
    """The nominal time in a dead letter's fire id (``<schedule_id>:<epoch ms>``, or a backfill's with
    ``:backfill`` after it); None for another shape (an event's dead letter: ``<fire id>:<index>``)."""
    parts = letter.fire_id.split(":")
    if len(parts) == 3 and parts[2] == timing.BACKFILL_SUFFIX:
        parts = parts[:2]
    if len(parts) != 2 or parts[0] != str(letter.schedule_id) or not parts[1].isdigit() or len(parts[1]) > 15:
        return None
    return timing.from_epoch_ms(int(parts[1]))


async def redrive(store: Store, letter: DeadLetter, due_at: datetime, now: datetime, *, late_s: float) -> DeadLetter:
    """Redrive ``letter`` to a fire due at ``due_at`` (or now, if that is past), or finish its earlier
    redrive: the dead letter as marked. The fire is written at the marked due time, unless that is more
    than ``late_s`` past (the hot-write deadline: a row written later could land in a minute its poller
    has closed) and an earlier call's write was lost: then the mark moves to now first (compare-and-set),
    so that every call after it writes, or finds, that one row (contract test on Cassandra: two calls on
    the real clock, each due "now", wrote two fires). ``NotFound`` if the dead letter is gone;
    ``Conflict`` if it cannot be redriven (see the codes)."""
    nominal = nominal_at(letter)
    if nominal is None:
        raise Conflict("an event's dead letter cannot be redriven (only a fire's)", code="not_redrivable")
    marked = _marked(await store.mark_redriven(letter, now, timing.truncate_ms(max(due_at, now))))
    current = await _fire_owner(store, marked, nominal)
    if current is None:
        raise Conflict("the schedule of this dead letter has expired", code="schedule_gone")
    occurrence = None
    if current.repeat is None:
        if current.fire_id != letter.fire_id:
            raise Conflict("the schedule was changed after this fire failed", code="schedule_changed")
        if current.status is not Status.FAILED:
            return marked  # redriven already (a repeated call): the pointer is at the redriven fire
    else:
        occurrence = _occurrence(current, marked, nominal)
        if await _written(store, _row(occurrence, marked)):
            return marked  # an earlier call's row landed (it may have fired since: it is not written again)
    if _due(marked) < now - timedelta(seconds=late_s):
        marked = _marked(await store.move_redrive(marked, now, timing.truncate_ms(now)))
    if occurrence is None:
        await store.requeue_schedule(current, _due(marked), 0, marked.last_error, now)
    else:
        await store.add_redrive(_row(occurrence, marked), now)
    return marked


def _marked(letter: DeadLetter | None) -> DeadLetter:
    if letter is None or letter.redriven_due_at is None:
        raise NotFound("no such dead letter", field="dead_letter_id")
    return letter


def _due(letter: DeadLetter) -> datetime:
    assert letter.redriven_due_at is not None
    return letter.redriven_due_at


async def _fire_owner(store: Store, letter: DeadLetter, nominal: datetime) -> Schedule | None:
    """The schedule whose fire failed: a trigger or a backfill's fire of the letter's schedule
    (``schema.triggers``, ``schema.backfills``), whose dead letter carries its schedule's id, else that
    schedule."""
    own = triggers.trigger_id(letter.schedule_id, nominal)
    if letter.fire_id.endswith(f":{timing.BACKFILL_SUFFIX}"):
        own = backfills.backfill_id(letter.schedule_id, nominal)
    trigger = await store.get_schedule(letter.client_id, own)
    if trigger is not None and trigger.fire_id == letter.fire_id:
        return trigger
    return await store.get_schedule(letter.client_id, letter.schedule_id)


def _occurrence(current: Schedule, letter: DeadLetter, nominal: datetime) -> Schedule:
    """A recurring schedule's failed occurrence, as its redrive fires it."""
    return dataclasses.replace(
        current,
        fire_at=nominal,
        seq=0,
        payload=letter.payload,
        callback=letter.callback,
        attempts=0,
        last_error=None,
        status=Status.SCHEDULED,
        tries=letter.tries,  # the redriven fire's run shows the rounds before it
    )


def _row(occurrence: Schedule, letter: DeadLetter) -> Schedule:
    """The redriven occurrence's own row, due as ``letter`` is marked."""
    return moves.retry_row(occurrence, _due(letter), 1, letter.last_error)


async def _written(store: Store, row: Schedule) -> bool:
    """Whether ``row`` is stored already (an earlier call's redrive landed)."""
    instance = InstanceKey(row.client_id, row.location.poller_id)
    loc = row.location
    async for page in store.read_minute(instance, loc.minute, from_due=loc.due_at):
        if any(r.schedule_id == row.schedule_id and r.location == loc for r in page):
            return True
        if page and page[-1].location.due_at > loc.due_at:
            return False
    return False
