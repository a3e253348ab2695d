"""A client's changes of one schedule (cancel, pause, resume, trigger) or one dead letter (redrive): the rules
and the writes, once, for whoever asks: a request to its own endpoint, or a bulk job acting on many
(``service.bulk``).

Each takes the schedule as read and the ``Caller`` (the app, and who asked: the request id and actor its
audit records carry); a change the schedule's state forbids raises ``Conflict`` with a code, as the
endpoints answer it. The change guarantee (``routes.schedules``) holds for both: a change near the fire is
refused (409 ``fire_imminent``), and one not confirmed in time is a 503, never a late success."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from msgspec import UnsetType

from tickd.schema import notices, pauses, redrives, timing, triggers
from tickd.schema.model import Client, DeadLetter, Location, PauseNote, Schedule, Status, with_pause
from tickd.service import audit, grants, keys, recurring
from tickd.service.audit import Caller
from tickd.service.confirm import confirmed
from tickd.service.errors import Invalid
from tickd.service.routes.common import conflict
from tickd.service.validation import PauseRequest, parse_time, to_ms
from tickd.service.views import dead_letter_id, public_status

T = TypeVar("T")


class JobCaller(dict[Any, Any]):
    """A bulk job's stand-in for the request of each change it makes: its audit records name the job's
    actor (the key that created it) and carry ``bulk:<job id>`` as their request id."""

    def __init__(self, app: web.Application, request_id: str, actor: str) -> None:
        super().__init__({audit.REQUEST_ID: request_id, audit.ACTOR: actor})
        self._app = app

    @property
    def app(self) -> web.Application:
        return self._app


def check_mutable(caller: Caller, schedule: Schedule, at: datetime, *, stops: bool = False) -> float | None:
    """Refuse a change the schedule's state forbids; the seconds left to confirm it (None: no limit).

    ``stops``: the change stops the schedule (cancel, pause). A schedule whose fire is in retry takes such
    a change at any time, so a failing endpoint can always be stopped: the poller reads the schedule again
    before each retry's attempt (``poller.fire.Settler``), though an attempt already on the wire may arrive.
    A debounced schedule takes any change at any time, for the same reason."""
    if schedule.status is Status.CANCELLED:
        raise conflict("the schedule is cancelled", "already_cancelled")
    if schedule.status in (Status.SUCCEEDED, Status.FAILED):
        raise conflict("the schedule has already fired", "already_fired")
    if (stops and schedule.attempts > 0) or schedule.debounce is not None:
        # A debounced fire is read again right before it is sent (``Schedule.rechecked``): any change
        # may land at any time; one that lands while its fire is on the wire leaves both to arrive.
        return None
    if schedule.repeat is not None or schedule.status is Status.PAUSED:
        # A paused row does not fire (pollers fire only scheduled rows): no fire to race with.
        return None  # the poller's compare-and-set before each occurrence keeps a changed rule's old one unfired
    guard_s = caller.app[keys.SETTINGS].mutation_guard_s
    left_s = (schedule.location.due_at - at).total_seconds() - guard_s
    if left_s < 0:
        raise conflict(f"the schedule fires in less than {guard_s:g} s; it can no longer change", "fire_imminent")
    return left_s


async def confirmed_change(
    caller: Caller, at: datetime, dues: Sequence[datetime], left_s: float | None, write: Awaitable[T]
) -> T:
    """``service.confirm.confirmed`` with this API's hot window and hot-write deadline."""
    settings = caller.app[keys.SETTINGS]
    return await confirmed(
        write,
        at=at,
        dues=dues,
        left_s=left_s,
        hot_window_s=settings.hot_window_s,
        deadline_s=settings.hot_write_deadline_s,
        now=lambda: audit.app_now(caller.app),
    )


async def cancel_now(caller: Caller, current: Schedule, at: datetime, left_s: float | None) -> Schedule:
    """Cancel ``current``, answered as reads will show it: a cancelled row keeps the version it was
    cancelled at (the store tells a landed cancel by its status, ``schema.changes.abandoned``)."""
    write = caller.app[keys.STORE].cancel_schedule(current, at)
    cancelled = await confirmed_change(caller, at, [current.location.due_at], left_s, write)
    return dataclasses.replace(cancelled, version=current.version)


async def cancel(caller: Caller, client: Client, current: Schedule) -> Schedule:
    """Cancel; cancelling a cancelled schedule changes nothing and is no error."""
    if current.status is Status.CANCELLED:
        return current
    at = audit.app_now(caller.app)
    cancelled = await cancel_now(caller, current, at, check_mutable(caller, current, at, stops=True))
    await audit.schedules_changed(caller, client, "schedule.cancel", [(cancelled, None)])
    return cancelled


async def pause(caller: Caller, client: Client, current: Schedule, *, wanted: PauseRequest | None = None) -> Schedule:
    """Pause: the schedule fires nothing until resumed. Pausing a paused schedule without ``wanted``
    changes nothing; with it (a time it resumes by itself, a note), its pause becomes that one, the
    schedule's row parked at ``until`` (``schema.model.PauseNote``), or where it is if there is none."""
    if current.status is Status.PAUSED and wanted is None:
        return current
    at = audit.app_now(caller.app)
    # A pause replaced keeps when the schedule was paused.
    since = current.pause.at if current.status is Status.PAUSED and current.pause is not None else at
    note = None if wanted is None else pause_note(caller, wanted, since)
    if current.status is Status.PAUSED and note is not None and _same_pause(current.pause, note):
        return current  # the same pause asked again (a retry: even once its until has passed)
    if note is not None:
        check_until(caller, note, at)
    left_s = check_mutable(caller, current, at, stops=True)
    store = caller.app[keys.STORE]
    parked = None if note is None else parked_at(current, client, note, at)
    write = store.pause_schedule(current, at, parked)
    dues = [current.location.due_at] if parked is None else [current.location.due_at, parked.location.due_at]
    paused = await confirmed_change(caller, at, dues, left_s, write)
    await audit.schedules_changed(caller, client, "schedule.pause", [(paused, _pause_fields(note))])
    return paused


def pause_note(caller: Caller, wanted: PauseRequest, since: datetime) -> PauseNote:
    """The pause a request asks for, paused ``since`` (its ``until`` not checked yet: ``check_until``)."""
    until = None
    if wanted.until is not None and not isinstance(wanted.until, UnsetType):
        until = to_ms(parse_time(wanted.until, "until"))
    note = wanted.note if isinstance(wanted.note, str) and wanted.note else None
    return PauseNote(at=since, until=until, note=note)


def check_until(caller: Caller, note: PauseNote, at: datetime) -> None:
    """A new pause's ``until``: ahead of now and within the horizon (422 naming it)."""
    if note.until is None:
        return
    horizon_s = caller.app[keys.SETTINGS].max_horizon_s
    if note.until <= at:
        raise Invalid("until must be ahead of now", field="until", code="out_of_range")
    if (note.until - at).total_seconds() > horizon_s:
        raise Invalid(f"until is more than {horizon_s} s ahead", field="until", code="out_of_range")


def parked_at(current: Schedule, client: Client, note: PauseNote, at: datetime) -> Schedule:
    """``current`` paused with ``note``, on its instance (off a draining poller if it was on one): at the
    time its pause ends; for a pause with no time, where it is, or, if a timed pause had parked it, back
    where its fire is due (``due_at`` then says when that is, not when a pause it no longer has ends)."""
    location = current.location
    poller_id = location.poller_id
    if poller_id >= client.poller_count:
        poller_id = timing.poller_id_for(current.schedule_id, client.poller_count)
    if note.until is not None:
        location = Location(poller_id, note.until)
    elif current.wakes:
        location = Location(poller_id, timing.stored_due_at(current.schedule_id, current.fire_at, current.options, at))
    return dataclasses.replace(current, location=location, options=with_pause(current.options, note))


def _same_pause(current: PauseNote | None, asked: PauseNote) -> bool:
    return current is not None and (current.until, current.note) == (asked.until, asked.note)


def _pause_fields(note: PauseNote | None) -> bytes | None:
    """The audit record's fields of a pause: its until and note, as a request body would give them."""
    if note is None:
        return None
    fields = {"until": note.until.isoformat() if note.until else None, "note": note.note}
    return msgspec.json.encode({k: v for k, v in fields.items() if v is not None})


async def resume(caller: Caller, client: Client, current: Schedule) -> Schedule:
    """Resume a paused schedule (``service.pauses``); ``Conflict`` ``not_paused`` for one that is not."""
    if current.status is not Status.PAUSED:
        raise conflict(f"the schedule is not paused (it is {public_status(current.status)})", "not_paused")
    at = audit.app_now(caller.app)
    store = caller.app[keys.STORE]
    names = current.repeat.calendars if current.repeat is not None else ()
    calendars = await recurring.named_calendars(store, client.client_id, names, missing_ok=True)
    plan = pauses.resume(current, client, at, calendars)
    if plan.skipped:
        await store.add_runs(client.client_id, current.schedule_id, plan.skipped)
    if plan.resumed is None:
        ended = await cancel_now(caller, current, at, None)  # the rule has nothing left: it ends
        await audit.schedules_changed(caller, client, "schedule.resume_ended", [(ended, None)])
        return ended
    write = store.resume_schedule(current, plan.resumed, at)
    resumed = await confirmed_change(caller, at, [plan.resumed.location.due_at], None, write)
    await audit.schedules_changed(caller, client, "schedule.resume", [(resumed, None)])
    await audit.notify(caller, client, notices.RESUMED, resumed)
    return resumed


async def write_trigger(caller: Caller, client: Client, parent: Schedule, at: datetime) -> Schedule:
    """Write the trigger of ``parent`` made at ``at`` (its id and fire id derive from both), confirmed as a
    create is, and record it."""
    trigger = triggers.trigger_row(client, parent, at)
    await confirmed_change(caller, at, [at], None, caller.app[keys.CREATES].create(trigger, audit.app_now(caller.app)))
    record = audit.record(
        caller,
        client.client_id,
        client,
        "schedule.trigger",
        str(trigger.schedule_id),
        at=audit.app_now(caller.app),
        fields={"trigger_id": str(trigger.schedule_id), "fire_id": trigger.fire_id},
        schedule_id=parent.schedule_id,
        version=parent.version,
    )
    await audit.write(caller, [record])
    return trigger


async def redrive(
    caller: Caller, client: Client, letter: DeadLetter, due_at: datetime, at: datetime | None = None
) -> DeadLetter:
    """Redrive ``letter`` to a fire due at ``due_at`` (``schema.redrives``: once; a repeat answers the first
    redrive's marks and writes nothing) and record it if this call redrove it: then the letter's
    ``redriven_at`` is ``at`` (default: the app's clock now; a caller that tells its own redrives from
    repeats passes the time it read). ``Conflict`` with a code for one that cannot be
    (``topic_not_allowed``, ``not_redrivable``, ``schedule_changed``...)."""
    settings = caller.app[keys.SETTINGS]
    grants.refuse_revoked(client, letter.callback, settings.reserved_topics)
    at = at if at is not None else audit.app_now(caller.app)
    marked = await redrives.redrive(caller.app[keys.STORE], letter, due_at, at, late_s=settings.hot_write_deadline_s)
    if marked.redriven_at == at:  # this call redrove it (a repeat answers the first redrive's marks)
        fields = {"fire_id": letter.fire_id, "due_at": (marked.redriven_due_at or due_at).isoformat()}
        record = audit.record(
            caller,
            client.client_id,
            client,
            "dead_letter.redrive",
            dead_letter_id(letter),
            at=at,
            fields=fields,
            schedule_id=letter.schedule_id,
        )
        await audit.write(caller, [record])
    return marked
