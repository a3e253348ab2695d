"""Dead letters: list and read them, redrive one or a page of them (``schema.redrives``).

A redrive writes the fire again, due now or at ``at``, keeping its fire id; each dead letter is
redriven once: redriving it again answers 200 with the same dead letter (``redriven_at`` and
``redriven_due_at`` as the first redrive set them) and writes no second fire.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import structlog
from aiohttp import web
from msgspec import UnsetType

from tickd.schema import aio
from tickd.schema.errors import TickdError
from tickd.schema.model import Client, DeadLetter
from tickd.service import actions, dead_letters, keys, params
from tickd.service.declare import Routes
from tickd.service.errors import Forbidden, Invalid, json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import RedriveRequest, decode, parse_time, to_ms
from tickd.service.views import (
    DeadLetterList,
    DeadLetterView,
    RedriveError,
    RedriveResult,
    dead_letter_id,
    dead_letter_view,
)

log = structlog.get_logger("tickd.api")
# Redrives of one redrive-all written at once: each is a few store requests in turn (a compare-and-set
# among them), so 100 one after another took about 4 s on the local Cassandra.
REDRIVES_AT_ONCE = 8
_BODY_MAX = 4096


Query = params.DeadLetterQuery | params.RedriveQuery
# "redrive" is not a dead letter id: POST /v1/dead-letters/redrive is redrive-all, not a lookup.
routes = Routes("dead-letters", path_params=(params.DeadLetterPath,), patterns={"dead_letter_id": "(?!redrive$)[^/]+"})


def _filter(query: Query, at: datetime, *, unredriven: bool) -> dead_letters.Filter:
    start = None if isinstance(query.start, UnsetType) else parse_time(query.start, "from")
    end = None if isinstance(query.end, UnsetType) else parse_time(query.end, "to")
    start, end = dead_letters.time_range(start, end, at)
    schedule_id = None if isinstance(query.schedule_id, UnsetType) else query.schedule_id
    return dead_letters.Filter(start, end, schedule_id, params.cursor(query.cursor), unredriven)


@routes.get(
    "/v1/dead-letters",
    "List dead letters (fires that failed for good), newest first, paged",
    response=DeadLetterList,
    query=params.DeadLetterQuery,
    description="from/to: when they failed (default the last 7 days, at most 31 days); schedule_id: of one "
    "schedule. A page may be short and still have a next_cursor. List items carry no payload (GET of one "
    "dead letter does).",
)
async def list_dead_letters(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    query = params.query(params.DeadLetterQuery, request)
    wanted = _filter(query, now(), unredriven=False)
    found, cursor = await dead_letters.page(request.app[keys.STORE], client.client_id, wanted, query.limit)
    return json_response(DeadLetterList([dead_letter_view(letter, payload=False) for letter in found], cursor))


@routes.get("/v1/dead-letters/{dead_letter_id}", "Get a dead letter", response=DeadLetterView)
async def get_dead_letter(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    letter_id = params.path(params.DeadLetterPath, request).dead_letter_id
    letter = await dead_letters.get(request.app[keys.STORE], client.client_id, letter_id)
    return json_response(dead_letter_view(letter))


async def _redriver(request: web.Request) -> tuple[Client, datetime]:
    """The client (active: a redrive writes a fire, as a create does) and when the fires are due."""
    client = await request.app[keys.AUTH].client(request)
    if not client.active:
        raise Forbidden("this client is deactivated and cannot redrive", code="client_inactive")
    at = now()
    if not request.body_exists:
        return client, at
    body = decode(RedriveRequest, await read_json(request, _BODY_MAX))
    due = at if isinstance(body.at, UnsetType) else to_ms(parse_time(body.at, "at"))
    horizon_s = request.app[keys.SETTINGS].max_horizon_s
    if (due - at).total_seconds() > horizon_s:
        raise Invalid(f"at may be at most {horizon_s} s ahead", field="at", code="out_of_range")
    return client, max(due, at)


async def _redrive(request: web.Request, client: Client, letter: DeadLetter, due_at: datetime) -> DeadLetter:
    marked = await actions.redrive(request, client, letter, due_at)
    log.info("dead_letter_redriven", client_id=letter.client_id, fire_id=letter.fire_id)
    return marked


@routes.post(
    "/v1/dead-letters/{dead_letter_id}/redrive",
    "Redrive a dead letter: its fire again, due now or at `at`, with the same fire id (once)",
    response=DeadLetterView,
    request=RedriveRequest,
    optional_body=True,
    errors=(403, 409),
    description="The body is optional. Redriving it again answers 200 with the same redriven_at and "
    "redriven_due_at and writes no second fire. 409 not_redrivable (an event's dead letter), "
    "schedule_changed (the schedule changed since), schedule_gone (expired), topic_not_allowed (a Kafka "
    "topic no longer granted to the client).",
)
async def redrive_dead_letter(request: web.Request) -> web.Response:
    letter_id = params.path(params.DeadLetterPath, request).dead_letter_id
    client, due_at = await _redriver(request)
    letter = await dead_letters.get(request.app[keys.STORE], client.client_id, letter_id)
    request.app[keys.LIMITER].take(client.client_id)
    return json_response(dead_letter_view(await _redrive(request, client, letter, due_at)))


@routes.post(
    "/v1/dead-letters/redrive",
    "Redrive the dead letters not yet redriven that match a filter, up to limit per call",
    response=RedriveResult,
    request=RedriveRequest,
    optional_body=True,
    query=params.RedriveQuery,
    errors=(403,),
    description="Same filters as the listing; call again with next_cursor until it is null. Those that "
    "cannot be redriven are listed in errors with their code.",
)
async def redrive_dead_letters(request: web.Request) -> web.Response:
    query = params.query(params.RedriveQuery, request)
    client, due_at = await _redriver(request)
    wanted = _filter(query, now(), unredriven=True)  # which letters: failed in the last 7 days by default
    found, cursor = await dead_letters.page(request.app[keys.STORE], client.client_id, wanted, query.limit)
    request.app[keys.LIMITER].take(client.client_id, max(1, len(found)))
    gate = asyncio.Semaphore(REDRIVES_AT_ONCE)

    async def one(letter: DeadLetter) -> DeadLetterView | RedriveError:
        async with gate:
            try:
                return dead_letter_view(await _redrive(request, client, letter, due_at))
            except TickdError as exc:
                if exc.retriable:
                    raise  # the store is unavailable: the caller retries; redrives are idempotent
                return RedriveError(dead_letter_id(letter), exc.code, exc.message)

    results = await aio.gather(*(one(letter) for letter in found))
    done = [r for r in results if isinstance(r, DeadLetterView)]
    errors = [r for r in results if isinstance(r, RedriveError)]
    return json_response(RedriveResult(done, errors, cursor))
