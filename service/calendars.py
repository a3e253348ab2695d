"""A client's calendars (``schema.calendars``) over the store port: create or replace one, each change a
new version; read, list, delete. The rules live here; ``routes.calendars`` decodes and encodes.

Every change is a compare-and-set on the version it read. Without ``If-Match`` a change that loses to a
concurrent one reads again and applies on top (a few times; then 409 ``conflict``); with it, it applies
only to the version named and answers 412 otherwise. Failure edges: bad input is refused naming the field
(``dates.3``, ``ranges.0.to``) before any store request; a calendar that does not exist is ``NotFound``
naming ``name``; a store that does not answer raises ``StoreUnavailable`` (503), and the same request made
again is safe (a save that landed finds itself stored)."""

from __future__ import annotations

from datetime import datetime

import msgspec
import structlog

from tickd.schema import calendars as cal
from tickd.schema.calendars import StoredCalendar
from tickd.schema.errors import Conflict, NotFound
from tickd.schema.store import Store
from tickd.service.preconditions import IfMatch
from tickd.service.validation import CalendarPut

log = structlog.get_logger("tickd.api")

# Reads again after losing a compare-and-set to a concurrent change, before answering 409.
_RACES = 3


def parsed(name: str, body: CalendarPut) -> cal.Calendar:
    """The calendar a PUT asks for, at version 1; ``InvalidInput`` naming the field."""
    return cal.parse_calendar(
        name,
        timezone=body.timezone if isinstance(body.timezone, str) else None,
        dates=body.dates,
        ranges=[(r.start, r.end) for r in body.ranges],
        weekdays=body.weekdays,
        business_days=body.business_days,
    )


async def put(
    store: Store, client_id: str, wanted_calendar: cal.Calendar, wanted: IfMatch | None, *, at: datetime
) -> tuple[StoredCalendar, bool]:
    """Store the calendar as the next version of the client's calendar of that name (its first if there
    is none); the calendar as stored, and whether it was created."""
    name = wanted_calendar.name
    for _ in range(_RACES):
        current = await store.get_calendar(client_id, name)
        if wanted is not None:
            wanted.check(current.calendar if current is not None else None, "calendar")
        version = 1 if current is None else current.calendar.version + 1
        calendar = msgspec.structs.replace(wanted_calendar, version=version)
        if await store.save_calendar(client_id, calendar, at):
            log.info("calendar_saved", client_id=client_id, calendar=name, version=version)
            return StoredCalendar(calendar, current.created_at if current else at, at), current is None
        if wanted is not None:
            raise wanted.changed_meanwhile("calendar")
    raise Conflict("the calendar was changed concurrently; read it again and retry")


async def get(store: Store, client_id: str, name: str) -> StoredCalendar:
    stored = await store.get_calendar(client_id, name)
    if stored is None:
        raise NotFound(f"no calendar named {name!r}", field="name")
    return stored


async def listed(store: Store, client_id: str) -> list[StoredCalendar]:
    """The client's calendars by name."""
    return sorted(await store.list_calendars(client_id), key=lambda s: s.calendar.name)


async def delete(store: Store, client_id: str, name: str, wanted: IfMatch | None) -> StoredCalendar:
    """Remove the calendar; the calendar as it was."""
    for _ in range(_RACES):
        current = await get(store, client_id, name)
        if wanted is not None:
            wanted.check(current.calendar, "calendar")
        if await store.delete_calendar(client_id, name, current.calendar.version):
            log.info("calendar_deleted", client_id=client_id, calendar=name, version=current.calendar.version)
            return current
        if wanted is not None:
            raise wanted.changed_meanwhile("calendar")
    raise Conflict("the calendar was changed concurrently; read it again and retry")
