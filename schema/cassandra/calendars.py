"""A tenant's calendars (``schema.calendars``): one row each, every change a compare-and-set on its version."""

from __future__ import annotations

from datetime import datetime

import msgspec

from tickd.schema.calendars import Calendar, StoredCalendar
from tickd.schema.cassandra.bridge import Part, Row, utc


class Calendars(Part):
    """The calendars part of ``schema.store.CalendarStore`` on Cassandra."""

    async def save_calendar(self, client_id: str, calendar: Calendar, now: datetime) -> bool:
        """Store ``calendar`` at ``calendar.version``: version 1 only if the client has no calendar of that
        name, a later one only over ``calendar.version - 1``. False, nothing written, otherwise. Safe to
        call again after ``StoreUnavailable``: a save that landed, its answer lost, finds itself stored."""
        values: dict[str, object] = {
            "client_id": client_id,
            "name": calendar.name,
            "version": calendar.version,
            "body": msgspec.json.encode(calendar).decode(),
            "updated_at": now,
        }
        if calendar.version == 1:
            applied, _ = await self._db.applied("insert_calendar", {**values, "created_at": now})
        else:
            applied, _ = await self._db.applied("update_calendar", {**values, "seen_version": calendar.version - 1})
        if applied:
            return True
        stored = await self.get_calendar(client_id, calendar.name)
        return stored is not None and stored.calendar == calendar

    async def get_calendar(self, client_id: str, name: str) -> StoredCalendar | None:
        rows = await self._db.rows("get_calendar", {"client_id": client_id, "name": name})
        return _stored(rows[0]) if rows else None

    async def list_calendars(self, client_id: str) -> list[StoredCalendar]:
        """The client's calendars, by name."""
        return [_stored(row) for row in await self._db.rows("list_calendars", {"client_id": client_id})]

    async def delete_calendar(self, client_id: str, name: str, version: int) -> bool:
        """Remove the calendar if it is still at ``version``; False (nothing removed) if not, or gone."""
        values = {"client_id": client_id, "name": name, "seen_version": version}
        applied, _ = await self._db.applied("delete_calendar", values)
        return applied


def _stored(row: Row) -> StoredCalendar:
    calendar = msgspec.json.decode(row.body, type=Calendar)
    calendar = msgspec.structs.replace(calendar, name=row.name, version=row.version)
    return StoredCalendar(calendar, utc(row.created_at), utc(row.updated_at))
