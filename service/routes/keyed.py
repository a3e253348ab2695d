"""Upsert by business key: ``PUT``, ``GET`` and ``DELETE /v1/schedules/by-key/{key}``.

One live schedule per (client, key). The key's row (``schedule_keys``) names it; a PUT creates the
schedule when the key is new, or when the one it names has fired or was cancelled (the key moves to the
new one with a compare-and-set), and otherwise replaces that schedule's time, payload and callback
through ``replace_schedule``, a client change like a PATCH (its compare-and-set of the version, the
mutation guard: 409 ``fire_imminent`` within ``TICKD_MUTATION_GUARD_S`` of the current due time). PUTs
racing on one key are retried a few times on a fresh read; so the last PUT answered 2xx is the live
version, and a PUT that lost every try answers 409 ``conflict`` having changed nothing. On one replica
PUTs of one key queue (``keys.KEY_LOCKS``), so they race only with PUTs sent to other replicas; each
PUT's write deadline starts when its turn comes.

A key whose schedule is still being created by another PUT is waited for (up to
``TICKD_IDEMPOTENCY_WAIT_S``; then 409 ``key_in_progress``); one whose schedule never landed (the
creating request died) is taken over after ``TICKD_IDEMPOTENCY_TAKEOVER_S``.
"""

from __future__ import annotations

import dataclasses

import structlog
from aiohttp import web

from tickd.schema.errors import Conflict, NotFound
from tickd.schema.model import BusinessKey, Client, IdempotencyKey, Schedule, Status
from tickd.service import actions, audit, debounce, idempotency, keys, params, preconditions, recurring
from tickd.service.declare import Routes
from tickd.service.routes.common import conflict, now, read_json, schedule_answer
from tickd.service.routes.schedules import (
    _BODY_OVERHEAD,
    _build,
    _creator,
)
from tickd.service.validation import DebounceFields, KeyedCreate, decode
from tickd.service.views import ScheduleView

log = structlog.get_logger("tickd.api")
_RETRIES = 8
_ENDED = (Status.CANCELLED, Status.SUCCEEDED, Status.FAILED)
_PATH = "/v1/schedules/by-key/{key}"
routes = Routes("schedules", path_params=(params.BusinessKeyPath,))


def _key(request: web.Request) -> str:
    return params.path(params.BusinessKeyPath, request).key


async def _holder(request: web.Request, client: Client, key: str) -> tuple[BusinessKey | None, Schedule | None]:
    """The key's row and the schedule it names; waits for one another PUT is still creating. The
    schedule is None for a new key, or one whose schedule never landed (past the takeover) or expired."""
    store, settings = request.app[keys.STORE], request.app[keys.SETTINGS]
    held = await store.get_business_key(client.client_id, key)
    if held is None:
        return None, None
    pending = IdempotencyKey(client.client_id, key, held.schedule_id, None, held.claimed_at)
    takeover = idempotency.abandoned(pending, now(), settings.idempotency_takeover_s)
    found = await idempotency.written(store, pending, 0.0 if takeover else settings.idempotency_wait_s)
    if found is None and not takeover:
        raise conflict("another request is creating this key's schedule; retry in a moment", "key_in_progress")
    return held, found


async def _create(
    request: web.Request,
    client: Client,
    key: str,
    body: KeyedCreate,
    held: BusinessKey | None,
    spec: DebounceFields | None,
    ended: Schedule | None,
) -> Schedule | None:
    """A new schedule for the key, if this request points the key at it (None: another one won).
    ``spec``: the PUT's debounce, if any; ``ended``: the key's schedule that fired or was cancelled (a
    debounce reads its last PUT)."""
    store, at = request.app[keys.STORE], now()
    debounced = None if spec is None else debounce.plan(spec, ended, at)
    schedule = await _build(request, client, body, at, debounced=debounced)
    claim = BusinessKey(client.client_id, key, schedule.schedule_id, at)
    stands = await (store.claim_business_key(claim) if held is None else store.move_business_key(held, claim))
    if stands is None or stands.schedule_id != schedule.schedule_id:
        return None
    write = request.app[keys.CREATES].create(schedule, now())
    await actions.confirmed_change(request, at, [schedule.location.due_at], None, write)
    return schedule


async def _replace(
    request: web.Request, client: Client, body: KeyedCreate, spec: DebounceFields | None, current: Schedule
) -> Schedule:
    """The key's schedule with the PUT's time, payload and callback (and rule), as a client change."""
    if current.status is Status.PAUSED:
        raise conflict("the schedule is paused; resume it first", "schedule_paused")
    at = now()
    debounced = None if spec is None else debounce.plan(spec, current, at)
    built = await _build(request, client, body, at, current.schedule_id, debounced=debounced)
    updated = dataclasses.replace(built, created_at=current.created_at)
    left_s = actions.check_mutable(request, current, at)
    replace = request.app[keys.STORE].replace_schedule(current, updated, at)
    return await actions.confirmed_change(
        request, at, [current.location.due_at, updated.location.due_at], left_s, replace
    )


@routes.put(
    _PATH,
    "Create or replace the one live schedule of a business key",
    also={201: "Created (a new schedule for the key)"},
    response=ScheduleView,
    request=KeyedCreate,
    headers=params.ChangeHeaders,
    errors=(403, 409, 412),
    description="The body is a create's, and may carry a debounce (the fire goes out window_s after the "
    "latest PUT, at most max_wait_s after the first it carries). 201 when it creates the key's schedule (a "
    "new key, or its schedule fired or was cancelled), 200 when it replaces it (a client change: 409 "
    "fire_imminent within the mutation guard, unless debounced; schedule_paused, conflict after concurrent "
    "PUTs won every retry, key_in_progress).",
)
async def put_by_key(request: web.Request) -> web.Response:
    client = await _creator(request)
    key = _key(request)
    settings = request.app[keys.SETTINGS]
    raw = await read_json(request, settings.max_payload_bytes + _BODY_OVERHEAD)
    body = decode(request.app[keys.TYPES].keyed_create, raw)
    spec = debounce.check(body, settings)  # before the rate-limit token and the key's lock: refused fast
    request.app[keys.LIMITER].take(client.client_id)
    async with request.app[keys.KEY_LOCKS].hold((client.client_id, key)):
        with preconditions.conditional(preconditions.if_match(request)):
            return await _upsert(request, client, key, body, spec, raw)


async def _upsert(
    request: web.Request, client: Client, key: str, body: KeyedCreate, spec: DebounceFields | None, raw: bytes
) -> web.Response:
    wanted = preconditions.if_match(request)
    for _ in range(_RETRIES):
        held, current = await _holder(request, client, key)
        if wanted is not None:
            wanted.check(current)  # a new key has no version to match: 412
        try:
            if current is None or current.status in _ENDED:
                created = await _create(request, client, key, body, held, spec, current)
                if created is not None:
                    log.info("schedule_created", client_id=client.client_id, schedule_id=str(created.schedule_id))
                    await audit.schedules_changed(request, client, "schedule.put_by_key", [(created, raw)])
                    return schedule_answer(created, 201)
            else:
                updated = await _replace(request, client, body, spec, current)
                log.info("schedule_updated", client_id=client.client_id, schedule_id=str(updated.schedule_id))
                await audit.schedules_changed(request, client, "schedule.put_by_key", [(updated, raw)])
                return schedule_answer(updated)
        except Conflict as exc:
            if exc.code != Conflict.code:
                raise  # fire_imminent, schedule_paused, key_in_progress: not a race to retry
            if wanted is not None:
                raise wanted.changed_meanwhile() from None
    raise conflict("this key's schedule is being changed concurrently; read it again and retry", Conflict.code)


async def _keyed(request: web.Request) -> tuple[Client, Schedule]:
    client = await request.app[keys.AUTH].client(request)
    key = _key(request)
    store = request.app[keys.STORE]
    held = await store.get_business_key(client.client_id, key)
    found = None if held is None else await store.get_schedule(client.client_id, held.schedule_id)
    if found is None:
        raise NotFound("no schedule for this key", field="key")
    return client, found


@routes.get(_PATH, "Get the schedule of a business key", response=ScheduleView)
async def get_by_key(request: web.Request) -> web.Response:
    _, schedule = await _keyed(request)
    return schedule_answer(await recurring.with_last_error(request.app[keys.STORE], schedule))


@routes.delete(
    _PATH,
    "Cancel the schedule of a business key (idempotent); the next PUT creates a new one",
    response=ScheduleView,
    headers=params.ChangeHeaders,
    errors=(409, 412),
)
async def delete_by_key(request: web.Request) -> web.Response:
    """Cancel the key's schedule (as ``DELETE /v1/schedules/{id}``); the next PUT creates a new one."""
    for attempt in range(_RETRIES):
        client, current = await _keyed(request)
        wanted = preconditions.if_match(request)
        if wanted is not None:
            wanted.check(current)
        if current.status is Status.CANCELLED:
            return schedule_answer(current)
        at = now()
        left_s = actions.check_mutable(request, current, at, stops=True)
        try:
            with preconditions.conditional(wanted):
                cancelled = await actions.cancel_now(request, current, at, left_s)
        except Conflict as exc:
            if wanted is not None and exc.code == Conflict.code:
                raise wanted.changed_meanwhile() from None
            if exc.code != Conflict.code or attempt == _RETRIES - 1:
                raise
            continue
        log.info("schedule_cancelled", client_id=cancelled.client_id, schedule_id=str(cancelled.schedule_id))
        await audit.schedules_changed(request, client, "schedule.cancel_by_key", [(cancelled, None)])
        return schedule_answer(cancelled)
    raise AssertionError("unreachable")
