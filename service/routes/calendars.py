"""Calendars (client endpoints): each handler decodes the request, calls ``service.calendars`` (where the
rules are) and encodes the answer, with the calendar's version as its ETag.

A calendar excludes occurrences of the recurring schedules that name it (``schema.calendars``): its dates,
ranges and weekdays, read on its own zone's wall clock.
"""

from __future__ import annotations

from aiohttp import web

from tickd.schema.calendars import StoredCalendar
from tickd.schema.model import Client
from tickd.service import audit, calendars, keys, params, preconditions
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import CalendarPut, decode
from tickd.service.views import CalendarList, CalendarView, calendar_view

# Room for the largest calendar the schema allows written at its longest (1,000 dates and 200 ranges, each
# string of escaped astral characters: about 225 KiB); a body past it is 413 too_large.
_MAX_BODY = 256 * 1024
routes = Routes("calendars", path_params=(params.CalendarPath,))


def _name(request: web.Request) -> str:
    return params.path(params.CalendarPath, request).name


async def _client(request: web.Request) -> Client:
    client: Client = await request.app[keys.AUTH].client(request)
    return client


def _answer(stored: StoredCalendar, status: int = 200) -> web.Response:
    return json_response(calendar_view(stored), status, {"ETag": preconditions.etag(stored.calendar)})


@routes.get("/v1/calendars", "List the client's calendars", response=CalendarList)
async def list_calendars(request: web.Request) -> web.Response:
    client = await _client(request)
    found = await calendars.listed(request.app[keys.STORE], client.client_id)
    return json_response(CalendarList([calendar_view(s) for s in found]))


@routes.put(
    "/v1/calendars/{name}",
    "Create (201) or replace (200) a calendar: a new version each time",
    ok=201,
    also={200: "Replaced"},
    response=CalendarView,
    request=CalendarPut,
    headers=params.ChangeHeaders,
    errors=(409, 412),
    description="Excludes the occurrences of schedules naming it whose nominal time, on the calendar's own "
    "wall clock (timezone, default UTC), falls on one of its dates (YYYY-MM-DD, at most 1,000), inside one "
    "of its ranges ([from, to) local wall times, at most 200, each at most 366 days) or on one of its "
    "weekdays (business_days: sat and sun). With If-Match, only over the version named (412 otherwise).",
)
async def put_calendar(request: web.Request) -> web.Response:
    client, name = await _client(request), _name(request)
    raw = await read_json(request, _MAX_BODY)
    wanted_calendar = calendars.parsed(name, decode(CalendarPut, raw))
    wanted = preconditions.if_match(request)
    store = request.app[keys.STORE]
    stored, created = await calendars.put(store, client.client_id, wanted_calendar, wanted, at=now())
    await audit.changed(request, client.client_id, client, "calendar.put", name, raw)
    return _answer(stored, 201 if created else 200)


@routes.get("/v1/calendars/{name}", "Get a calendar", response=CalendarView)
async def get_calendar(request: web.Request) -> web.Response:
    client = await _client(request)
    return _answer(await calendars.get(request.app[keys.STORE], client.client_id, _name(request)))


@routes.delete(
    "/v1/calendars/{name}",
    "Delete a calendar",
    response=CalendarView,
    headers=params.ChangeHeaders,
    errors=(409, 412),
)
async def delete_calendar(request: web.Request) -> web.Response:
    client, name = await _client(request), _name(request)
    wanted = preconditions.if_match(request)
    deleted = await calendars.delete(request.app[keys.STORE], client.client_id, name, wanted)
    await audit.changed(request, client.client_id, client, "calendar.delete", name)
    return _answer(deleted)
