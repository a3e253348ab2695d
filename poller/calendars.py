"""The calendars a node's fires are read against (``schema.calendars``), known without a store read per fire.

``CalendarBook`` keeps each client's calendars for ``refresh_s`` (the node's ``TICKD_CLIENTS_REFRESH_S``),
read only for clients whose fires name one: a calendar change reaches every node within that time, and an
occurrence due later than that is read against it. One read per client at a time, however many fires ask.
Calendars older than that are never used: while the store does not answer, the read raises
``StoreUnavailable`` and the chain step waits for it in place (as it waits to write the chain itself).

A name the client has no calendar of (deleted since the schedule named it) excludes nothing: its fires go
on (each such fire logs ``calendar_missing``), as the README says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from tickd.schema.calendars import Calendar
from tickd.schema.store import Store

log = structlog.get_logger("tickd.poller")


class CalendarBook:
    def __init__(self, store: Store, refresh_s: float) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._known: dict[str, tuple[float, dict[str, Calendar]]] = {}
        self._reading: dict[str, asyncio.Task[dict[str, Calendar]]] = {}

    async def named(self, client_id: str, names: Sequence[str]) -> list[Calendar]:
        """The client's calendars ``names`` names, in that order (the ones it no longer has left out)."""
        if not names:
            return []
        calendars = await self._calendars(client_id)
        missing = [name for name in names if name not in calendars]
        if missing:
            log.warning("calendar_missing", client_id=client_id, calendars=missing)
        return [calendars[name] for name in names if name in calendars]

    async def _calendars(self, client_id: str) -> dict[str, Calendar]:
        known = self._known.get(client_id)
        if known is not None and asyncio.get_running_loop().time() - known[0] < self._refresh_s:
            return known[1]
        return await self._read_once(client_id)

    async def _read_once(self, client_id: str) -> dict[str, Calendar]:
        task = self._reading.get(client_id)
        if task is None:
            task = asyncio.ensure_future(self._read(client_id))
            self._reading[client_id] = task
            task.add_done_callback(lambda _: self._reading.pop(client_id, None))
        return await asyncio.shield(task)

    async def _read(self, client_id: str) -> dict[str, Calendar]:
        stored = await self._store.list_calendars(client_id)
        calendars = {s.calendar.name: s.calendar for s in stored}
        self._known[client_id] = (asyncio.get_running_loop().time(), calendars)
        return calendars
