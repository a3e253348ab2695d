"""Client endpoints: create (single, batch), read, list, reschedule/modify, cancel.

Change guarantee: a DELETE or PATCH answered 200 is seen by the poller before the old version's due
time (pollers re-read partitions marked hot within TICKD_MUTATION_GUARD_S), so a cancelled schedule
never fires and a rescheduled one fires only at its new time. Closer to the due time than the guard,
the change is refused with 409 ``fire_imminent`` and the schedule fires as it was; but a cancel or pause
of a one-time schedule whose fire is in retry is taken at any time (``actions.check_mutable``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import msgspec
import structlog
from aiohttp import web
from msgspec import UNSET, UnsetType

from tickd.schema import recurrence as rec
from tickd.schema import tagged, timing, tracing, triggers
from tickd.schema.calendars import Calendar
from tickd.schema.errors import Conflict, NotFound, TickdError
from tickd.schema.model import (
    BulkFilter,
    Callback,
    Client,
    Debounce,
    IdempotencyKey,
    ListCursor,
    Location,
    Options,
    Repeat,
    Schedule,
    Status,
)
from tickd.service import actions, audit, budgets, idempotency, keys, params, preconditions, recurring
from tickd.service.creates import groups
from tickd.service.declare import Routes
from tickd.service.errors import Forbidden, Invalid, json_response, status_of
from tickd.service.routes.common import conflict, now, read_json, schedule_answer
from tickd.service.settings import ApiSettings
from tickd.service.validation import (
    REPEAT_FIELDS,
    BatchCreate,
    HttpTarget,
    PauseRequest,
    PreviewRequest,
    ScheduleCreate,
    SchedulePatch,
    Target,
    check_http_shape,
    check_kafka,
    decode,
    fire_time,
    parse_time,
    payload_bytes,
)
from tickd.service.views import (
    BatchItem,
    BatchItemError,
    BatchResult,
    OccurrenceView,
    PreviewView,
    RunList,
    ScheduleList,
    ScheduleView,
    run_view,
    schedule_view,
)

log = structlog.get_logger("tickd.api")
T = TypeVar("T")
_BODY_OVERHEAD = 32 * 1024  # room for the callback and fire_at around the largest payload
_PAUSE_BODY_MAX = 8 * 1024  # a pause's until and note (500 characters, each up to 6 bytes as JSON escapes)
_SCHEDULED = Status.SCHEDULED.value
_RACE_RETRIES = 3
# "batch", "preview" and "by-key" are not schedule ids: another method on them is a 405, not a lookup.
routes = Routes(
    "schedules", path_params=(params.SchedulePath,), patterns={"schedule_id": "(?!(?:batch|preview|by-key)$)[^/]+"}
)
_REPLAYED = {200: "Replayed (Idempotency-Key)"}


async def checked_callback(request: web.Request, client: Client, target: Target, field: str = "callback") -> Callback:
    """A callback (or a client's notify target, ``field``) as stored, once its destination is allowed."""
    if isinstance(target, HttpTarget):
        checked, host = check_http_shape(target, f"{field}.", request.app[keys.SETTINGS])
        await request.app[keys.TARGETS].check(host, f"{field}.url", client.client_id)
        return checked
    if not request.app[keys.SETTINGS].kafka_enabled:
        raise Invalid(
            "this tickd has no Kafka: Kafka callbacks are off (tickd-dev without --kafka)",
            field=f"{field}.type",
            code="kafka_disabled",
        )
    return check_kafka(target, client.kafka_topics, f"{field}.")


async def _build(
    request: web.Request,
    client: Client,
    body: ScheduleCreate,
    at: datetime,
    schedule_id: uuid.UUID | None = None,
    work: recurring.RuleWork | None = None,
    debounced: tuple[datetime, Debounce] | None = None,
) -> Schedule:
    """A validated, not yet written schedule (a new id unless given); raises ``Invalid`` naming the field.
    ``work``: the request's rule searches (a batch shares one); absent, the create's own. ``debounced``:
    a debounced PUT's fire time and debounce (``service.debounce``), in place of fire_at or delay_s."""
    settings = request.app[keys.SETTINGS]
    repeat = None
    if recurring.asks_repeat(body):
        if body.fire_at is not UNSET or body.delay_s is not UNSET:
            field = "fire_at" if body.fire_at is not UNSET else "delay_s"
            raise Invalid(f"{field} is for one-time schedules; a recurring one starts at start_at", field=field)
        work = work or recurring.RuleWork(settings.request_scan_steps, client.client_id)
        names = recurring.calendar_names(body.calendars)
        calendars = await recurring.named_calendars(request.app[keys.STORE], client.client_id, names, work)
        recurrence, fire_at = await recurring.timeline(body, at, settings, work, calendars)
        repeat = Repeat.from_recurrence(recurrence, implicit_start=recurring.implicit_start(body))
        repeat = msgspec.structs.replace(repeat, calendars=tuple(names), missed=recurring.missed_of(body.missed))
    else:
        recurring.refuse_repeat_fields(body, "applies to recurring schedules only (give cron or every)")
        fire_at = debounced[0] if debounced is not None else fire_time(body.fire_at, body.delay_s, at, settings)
    events, window_ms = recurring.batch_shape(body.events, body.window, None, settings)
    throttle = await _throttle(request, client, body.throttle, None)
    options = recurring.options_of(repeat, recurring.jitter_ms(body.jitter, settings), events, window_ms, throttle)
    pause_after = recurring.pause_after(body.pause_after_failures, None, repeat)
    options = recurring.with_extras(options, None if isinstance(body.tags, UnsetType) else body.tags, pause_after)
    if debounced is not None:
        options = msgspec.structs.replace(options or Options(), debounce=debounced[1])
    payload = payload_bytes(body.payload, settings)
    budgets.check(options, len(payload), settings)
    callback = await checked_callback(request, client, body.callback)
    return _placed(client, schedule_id or uuid.uuid4(), fire_at, payload, callback, at, _traced(options))


def _traced(options: Options | None) -> Options | None:
    """With tracing on: the create request's trace context (its server span), stored so fires link to it."""
    traceparent = tracing.current_traceparent() if tracing.on() else None
    if traceparent is None:
        return options
    return msgspec.structs.replace(options or Options(), traceparent=traceparent)


def _placed(
    client: Client,
    schedule_id: uuid.UUID,
    fire_at: datetime,
    payload: bytes,
    callback: Callback,
    at: datetime,
    options: Options | None,
) -> Schedule:
    poller_id = timing.poller_id_for(schedule_id, client.poller_count)
    location = Location(poller_id, timing.stored_due_at(schedule_id, fire_at, options, at))
    seq = 1 if options is not None and options.repeat is not None else 0
    return Schedule(client.client_id, schedule_id, location, fire_at, payload, callback, at, options=options, seq=seq)


async def _throttle(
    request: web.Request, client: Client, given: str | UnsetType | None, current: str | None
) -> str | None:
    """The throttle policy a create or patch names (it must exist), else the current one; null removes it."""
    if isinstance(given, UnsetType):
        return current
    if given is None:
        return None
    if await request.app[keys.STORE].get_policy(client.client_id, given) is None:
        raise Invalid(
            f"no throttle policy named {given!r}; create it with PUT /v1/throttle-policies/{given}", field="throttle"
        )
    return given


async def _creator(request: web.Request) -> Client:
    client = await request.app[keys.AUTH].client(request)
    if not client.active:
        raise Forbidden("this client is deactivated and cannot create schedules", code="client_inactive")
    return client


def _idempotency_key(request: web.Request) -> str | None:
    key = params.headers(params.CreateHeaders, request).idempotency_key
    return None if isinstance(key, UnsetType) else key


@routes.post(
    "/v1/schedules",
    "Create a schedule",
    ok=201,
    also=_REPLAYED,
    response=ScheduleView,
    request=ScheduleCreate,
    headers=params.CreateHeaders,
    errors=(403, 409),
    description=(
        "Idempotency-Key: a retried create with the same key and request returns the original (200); "
        "the key with another request is 422; while the first is still in flight, 409 with Retry-After."
    ),
)
async def create_schedule(request: web.Request) -> web.Response:
    client = await _creator(request)
    key = _idempotency_key(request)
    settings = request.app[keys.SETTINGS]
    raw = await read_json(request, settings.max_payload_bytes + _BODY_OVERHEAD)
    body = decode(request.app[keys.TYPES].schedule_create, raw)
    request.app[keys.LIMITER].take(client.client_id)  # before the DNS lookups and store reads it pays for
    at = now()
    schedule = await _build(request, client, body, at)
    if key is not None:
        digest = idempotency.request_digest(request.method, request.path, raw)
        reservation = IdempotencyKey(client.client_id, key, schedule.schedule_id, digest, at)
        bound = await request.app[keys.STORE].reserve_idempotency_key(reservation)
        if bound.schedule_id != schedule.schedule_id:
            replayed = await _reserved_elsewhere(request, client, body, bound, digest)
            if isinstance(replayed, web.Response):
                return replayed
            schedule = replayed
    # Confirmed within the hot-write deadline of the request time the due time was computed from.
    write = request.app[keys.CREATES].create(schedule, now())
    await actions.confirmed_change(request, at, [schedule.location.due_at], None, write)
    request.app[keys.METRICS].schedules_created.inc()
    log.info("schedule_created", client_id=client.client_id, schedule_id=str(schedule.schedule_id))
    await audit.schedules_changed(request, client, audit.CREATE, [(schedule, raw)])
    return schedule_answer(schedule, 201)


async def _reserved_elsewhere(
    request: web.Request, client: Client, body: ScheduleCreate, bound: IdempotencyKey, digest: str
) -> web.Response | Schedule:
    """Another request holds the key (see ``service.idempotency``): the replayed answer, or the schedule
    it reserved, rebuilt to be written now because that request is gone."""
    idempotency.check_same_request(bound, digest)
    settings, at = request.app[keys.SETTINGS], now()
    takeover = idempotency.abandoned(bound, at, settings.idempotency_takeover_s)
    wait_s = 0.0 if takeover else settings.idempotency_wait_s
    existing = await idempotency.written(request.app[keys.STORE], bound, wait_s)
    if existing is not None:
        return schedule_answer(existing, 200, {"Idempotent-Replayed": "true"})
    if not takeover:
        raise idempotency.in_progress(bound, now(), settings.idempotency_takeover_s)
    log.info("idempotency_key_taken_over", client_id=client.client_id, schedule_id=str(bound.schedule_id))
    # Fire time (and so fire id) as the first request computed it; a fire time now past is due now.
    rebuilt = await _build(request, client, body, bound.created_at or at, bound.schedule_id)
    due_at = timing.stored_due_at(rebuilt.schedule_id, rebuilt.fire_at, rebuilt.options, at)
    return dataclasses.replace(rebuilt, location=Location(rebuilt.location.poller_id, due_at))


# Batch items validated at once. Beyond these, an item waits for one to finish: a loop pass runs at most
# this many items' decoding and checks, so a 1,000-item batch never holds the loop for one long pass.
_BUILDING = 16


async def _build_items(request: web.Request, client: Client, items: list[msgspec.Raw], at: datetime) -> list[Any]:
    """Each item as a schedule or the error that refused it; the items' cron searches share one budget."""
    kind, gate = request.app[keys.TYPES].schedule_create, asyncio.Semaphore(_BUILDING)
    work = recurring.RuleWork(request.app[keys.SETTINGS].request_scan_steps, client.client_id)

    async def build(raw: msgspec.Raw) -> Schedule:
        async with gate:
            return await _build(request, client, decode(kind, bytes(raw)), at, work=work)

    return await asyncio.gather(*(build(raw) for raw in items), return_exceptions=True)


def _item_error(index: int, exc: TickdError) -> BatchItem:
    return BatchItem(index, error=BatchItemError(exc.code, exc.message, exc.field, status_of(exc)))


@routes.post(
    "/v1/schedules/batch",
    "Create up to TICKD_MAX_BATCH schedules; results in request order",
    response=BatchResult,
    request=BatchCreate,
    errors=(403,),
)
async def create_batch(request: web.Request) -> web.Response:
    client = await _creator(request)
    settings = request.app[keys.SETTINGS]
    body = decode(request.app[keys.TYPES].batch, await read_json(request, settings.max_body_bytes))
    # Each item costs a token; a batch over the burst could never be paid and is refused (422 over_burst).
    request.app[keys.LIMITER].take(client.client_id, len(body.schedules), field="schedules")
    at = now()
    built = await _build_items(request, client, body.schedules, at)
    results = await _write_batch(request, built, at)
    created = sum(1 for r in results if r.schedule_id is not UNSET)
    request.app[keys.METRICS].schedules_created.inc(created)
    log.info("schedules_created", client_id=client.client_id, created=created, failed=len(results) - created)
    made = zip(built, body.schedules, results, strict=True)  # a record per schedule made, with its item's fields
    changes = [(item, bytes(raw)) for item, raw, r in made if isinstance(item, Schedule) and r.schedule_id is not UNSET]
    await audit.schedules_changed(request, client, audit.CREATE, changes)
    return json_response(BatchResult(results))


def _split(built: list[Schedule | BaseException]) -> tuple[list[tuple[int, Schedule]], dict[int, BatchItem]]:
    """The items to write, and the answers of those that failed validation."""
    valid: list[tuple[int, Schedule]] = []
    failed: dict[int, BatchItem] = {}
    for index, item in enumerate(built):
        if isinstance(item, TickdError):
            failed[index] = _item_error(index, item)
        elif isinstance(item, BaseException):
            raise item
        else:
            valid.append((index, item))
    return valid, failed


def _second(item: tuple[int, Schedule]) -> Schedule:
    return item[1]


async def _write_batch(request: web.Request, built: list[Schedule | BaseException], at: datetime) -> list[BatchItem]:
    """Write the valid items in small atomic groups, concurrently; a failed write fails its group only."""
    store, settings = request.app[keys.STORE], request.app[keys.SETTINGS]
    valid, answers = _split(built)
    gate = asyncio.Semaphore(settings.batch_concurrency)

    async def write(group: list[tuple[int, Schedule]]) -> None:
        try:
            async with gate:
                written = store.create_schedules([schedule for _, schedule in group], at)
                await actions.confirmed_change(request, at, [s.location.due_at for _, s in group], None, written)
        except TickdError as exc:
            answers.update((index, _item_error(index, exc)) for index, _ in group)
            return
        for index, s in group:
            answers[index] = BatchItem(index, schedule_id=s.schedule_id, status=_SCHEDULED, fire_at=s.fire_at)

    grouped = groups(valid, settings.write_group, settings.batch_max_bytes, _second)
    await asyncio.gather(*(write(group) for group in grouped))
    return [answers[index] for index in range(len(built))]


def _schedule_id(request: web.Request) -> uuid.UUID:
    return params.path(params.SchedulePath, request).schedule_id


async def _current(request: web.Request) -> tuple[Client, Schedule]:
    client = await request.app[keys.AUTH].client(request)
    found = await request.app[keys.STORE].get_schedule(client.client_id, _schedule_id(request))
    if found is None:
        raise NotFound("no such schedule", field="schedule_id")
    return client, found


@routes.post(
    "/v1/schedules/preview",
    "The next fire times of a cron or every rule, in UTC and local time; writes nothing",
    response=PreviewView,
    request=PreviewRequest,
    description="count: 1-100 (default 10); after: start from this time instead of now.",
)
async def preview_schedule(request: web.Request) -> web.Response:
    """The next ``count`` fire times of a rule, in UTC and on the rule's wall clock; writes nothing.
    It is a read: it costs a token of the client's read bucket (TICKD_READ_*)."""
    client = await request.app[keys.AUTH].client(request, read=True)
    settings = request.app[keys.SETTINGS]
    body = decode(request.app[keys.TYPES].preview, await read_json(request, _BODY_OVERHEAD))
    if not recurring.asks_repeat(body):
        raise Invalid("give cron or every", field="cron", code="missing_field")
    at = now()
    after = recurring.parse_after(body.after, at)
    names = recurring.calendar_names(body.calendars)
    calendars = await recurring.named_calendars(request.app[keys.STORE], client.client_id, names)
    work = recurring.RuleWork(settings.request_scan_steps, client.client_id)
    recurrence, found = await recurring.preview(body, at, after, body.count, settings, work, calendars)
    views = []
    for moment, by in found:
        o = rec.occurrence(recurrence.rule, moment)
        excluded = f"{by.name} v{by.version}" if by is not None else UNSET
        views.append(OccurrenceView(o.utc, o.local, o.timezone, excluded))
    return json_response(PreviewView(views))


@routes.get(
    "/v1/schedules/{schedule_id}/runs",
    "The schedule's fire history, newest first, paged",
    response=RunList,
    query=params.RunsQuery,
)
async def schedule_runs(request: web.Request) -> web.Response:
    """The schedule's fires, newest first: nominal time, when it fired, status, attempts, lateness."""
    client, current = await _current(request)
    query = params.query(params.RunsQuery, request)
    limit, after = query.limit, params.cursor(query.cursor)
    before = after.due_at if after is not None else None
    if current.repeat is None and (current.options is None or not current.options.batch):
        runs = [r for r in recurring.one_time_runs(current) if before is None or r.nominal_at < before]
    else:
        runs = await request.app[keys.STORE].list_runs(client.client_id, current.schedule_id, before, limit + 1)
    more = len(runs) > limit
    runs = runs[:limit]
    next_cursor = ListCursor(runs[-1].nominal_at).encode() if more else None
    return json_response(RunList([run_view(current.schedule_id, r) for r in runs], next_cursor))


def _list_range(query: params.ListQuery, max_range_s: int) -> tuple[datetime, datetime]:
    if isinstance(query.start, UnsetType) or isinstance(query.end, UnsetType):
        missing = "from" if isinstance(query.start, UnsetType) else "to"
        why = "from and to are both required, unless tag is given without either"
        raise Invalid(why, field=missing, code="missing_field")
    start, end = parse_time(query.start, "from"), parse_time(query.end, "to")
    if not 0 < (end - start).total_seconds() <= max_range_s:
        raise Invalid(f"to must be after from, at most {max_range_s} s later", field="to", code="out_of_range")
    return start, end


@routes.get(
    "/v1/schedules",
    "List schedules due in [from, to), or every schedule with a tag; paged",
    response=ScheduleList,
    query=params.ListQuery,
    description="With from and to: schedules due in that range (at most TICKD_LIST_MAX_RANGE_S), in due order; "
    "a page may be short (even empty) and still have a next_cursor: keep paging until it is null. With tag "
    "and neither: every schedule with the tag, whatever its due time, in no particular order, full pages "
    "(a page is short only at the end, or once it has read 2,000 index entries or spent half the request's "
    "store time: a status or target filter that few match; keep paging until next_cursor is null). status and target "
    "narrow either. List items carry no payload (GET of one schedule does).",
)
async def list_schedules(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    query = params.query(params.ListQuery, request)
    status = None if isinstance(query.status, UnsetType) else Status(query.status)
    tag = None if isinstance(query.tag, UnsetType) else _tag(query.tag)
    target = None if isinstance(query.target, UnsetType) else query.target
    store = request.app[keys.STORE]
    if tag is not None and isinstance(query.start, UnsetType) and isinstance(query.end, UnsetType):
        cursor = None if isinstance(query.cursor, UnsetType) else tagged.TagCursor.decode(query.cursor)
        wanted = BulkFilter(tag, status, target=target)
        budget = min(query.limit * 10, tagged.PAGE_BUDGET)
        found, after = await tagged.page(store, client.client_id, wanted, cursor, query.limit, budget)
        next_cursor = after.encode() if after is not None else None
        return json_response(ScheduleList([schedule_view(s, payload=False) for s in found], next_cursor))
    start, end = _list_range(query, request.app[keys.SETTINGS].list_max_range_s)
    page = await store.list_schedules(client, start, end, status, params.cursor(query.cursor), query.limit, tag, target)
    return json_response(ScheduleList([schedule_view(s, payload=False) for s in page.items], page.cursor))


def _tag(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    return key, value


@routes.get("/v1/schedules/{schedule_id}", "Get a schedule", response=ScheduleView)
async def get_schedule(request: web.Request) -> web.Response:
    _, schedule = await _current(request)
    return schedule_answer(await recurring.with_last_error(request.app[keys.STORE], schedule))


async def _retrying_races(request: web.Request, change: Callable[[Client, Schedule], Awaitable[Schedule]]) -> Schedule:
    """Read the schedule and apply ``change``. A recurring schedule's pointer also moves when the poller
    chains it to its next occurrence, so a conflict with that is retried on a fresh read (a few times);
    with ``If-Match``, never: a change to the version read is the request's to apply or to refuse (412)."""
    for attempt in range(_RACE_RETRIES):
        client, current = await _current(request)
        wanted = preconditions.if_match(request)
        if wanted is not None:
            wanted.check(current)
        try:
            with preconditions.conditional(wanted):
                return await change(client, current)
        except Conflict as exc:
            if wanted is not None and exc.code == Conflict.code:
                raise wanted.changed_meanwhile() from None
            if wanted is not None or current.repeat is None or attempt == _RACE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


async def _changes(request: web.Request, client: Client, patch: SchedulePatch) -> dict[str, Any]:
    """The fields a patch sets whatever the schedule is: payload and callback (the throttle policy is
    checked here too, before anything is read or written)."""
    if isinstance(patch.throttle, str):
        await _throttle(request, client, patch.throttle, None)
    settings = request.app[keys.SETTINGS]
    changes: dict[str, Any] = {}
    if patch.payload is not UNSET:
        changes["payload"] = payload_bytes(patch.payload, settings)
    if not isinstance(patch.callback, UnsetType):
        changes["callback"] = await checked_callback(request, client, patch.callback)
    return changes


def _timing(
    request: web.Request,
    current: Schedule,
    patch: SchedulePatch,
    at: datetime,
    calendars: Sequence[Calendar] = (),
) -> tuple[datetime, Options | None, int]:
    """The patched schedule's nominal time, options and occurrence number (``calendars``: the ones the
    patched rule names, read by ``_patched_calendars``)."""
    settings = request.app[keys.SETTINGS]
    jitter = current.options.jitter_ms if current.options is not None else 0
    if patch.jitter is not UNSET:
        jitter = recurring.jitter_ms(patch.jitter, settings)
    current_throttle = current.options.throttle if current.options is not None else None
    shape = (
        *recurring.batch_shape(patch.events, patch.window, current.options, settings),
        current_throttle if isinstance(patch.throttle, UnsetType) else patch.throttle,
    )
    moves_time = patch.fire_at is not UNSET or patch.delay_s is not UNSET
    if current.repeat is None:
        recurring.refuse_repeat_fields(patch, "cannot be added to a one-time schedule; create a recurring one")
        fire_at = fire_time(patch.fire_at, patch.delay_s, at, settings) if moves_time else current.fire_at
        return fire_at, recurring.options_of(None, jitter, *shape), 0
    if moves_time:
        field = "fire_at" if patch.fire_at is not UNSET else "delay_s"
        raise Invalid("a recurring schedule's times come from its rule; change cron, every or start_at", field=field)
    if not recurring.given(patch):
        return current.fire_at, recurring.options_of(current.repeat, jitter, *shape), current.seq
    missed = recurring.missed_of(patch.missed, current.repeat)
    repeat = recurring.merge_repeat(current.repeat, patch, at, settings, [c.name for c in calendars], missed)
    first = recurring.first_fire(repeat.recurrence(), at, settings, calendars=calendars)
    return first, recurring.options_of(repeat, jitter, *shape), 1


async def _patched_calendars(
    request: web.Request, client: Client, current: Schedule, patch: SchedulePatch
) -> list[Calendar]:
    """The calendars a patch that changes a recurring schedule's timeline reads it against: the ones it
    names, else the ones the schedule named (the rest of a patch reads none)."""
    if current.repeat is None or not recurring.given(patch):
        return []
    names = recurring.calendar_names(patch.calendars, current.repeat)
    return await recurring.named_calendars(request.app[keys.STORE], client.client_id, names)


def _updated(
    settings: ApiSettings,
    client: Client,
    current: Schedule,
    changes: dict[str, Any],
    timed: tuple[datetime, Options | None, int],
    at: datetime,
) -> Schedule:
    fire_at, options, seq = timed
    budgets.check(options, len(changes.get("payload", current.payload)), settings)
    timing_only = recurring.with_extras(options, None, None), recurring.with_extras(current.options, None, None)
    if (fire_at, timing_only[0], seq) == (current.fire_at, timing_only[1], current.seq):
        # a new payload, callback, tags or pause_after_failures only
        return dataclasses.replace(current, options=options, **changes)
    poller_id = current.location.poller_id
    if poller_id >= client.poller_count:  # leave a draining poller when the schedule moves anyway
        poller_id = timing.poller_id_for(current.schedule_id, client.poller_count)
    location = Location(poller_id, timing.stored_due_at(current.schedule_id, fire_at, options, at))
    return dataclasses.replace(
        current,
        location=location,
        fire_at=fire_at,
        options=options,
        seq=seq,
        attempts=0,
        last_error=None,
        tries=(),
        **changes,
    )


_PATCHABLE = (
    "fire_at",
    "delay_s",
    "payload",
    "callback",
    "jitter",
    "events",
    "window",
    "throttle",
    "tags",
    "pause_after_failures",
    *REPEAT_FIELDS,
)


@routes.patch(
    "/v1/schedules/{schedule_id}",
    "Reschedule, or change payload, callback, jitter or a recurring schedule's rule",
    response=ScheduleView,
    request=SchedulePatch,
    headers=params.ChangeHeaders,
    errors=(409, 412),
)
async def patch_schedule(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    _schedule_id(request)  # the path before the body
    settings = request.app[keys.SETTINGS]
    raw = await read_json(request, settings.max_payload_bytes + _BODY_OVERHEAD)
    patch = decode(request.app[keys.TYPES].schedule_patch, raw)
    if all(getattr(patch, name) is UNSET for name in _PATCHABLE):
        raise Invalid(f"give at least one of {', '.join(_PATCHABLE)}", code="missing_field")
    request.app[keys.LIMITER].take(client.client_id)  # a change costs what a create does (DNS lookups too)
    changes = await _changes(request, client, patch)

    async def change(client: Client, current: Schedule) -> Schedule:
        if current.status is Status.PAUSED:
            raise conflict("the schedule is paused; resume it first", "schedule_paused")
        calendars = await _patched_calendars(request, client, current, patch)
        at = now()
        fire_at, options, seq = _timing(request, current, patch, at, calendars)
        tags = recurring.tags_of(current.options) if isinstance(patch.tags, UnsetType) else patch.tags
        repeat = options.repeat if options is not None else None
        pause_after = recurring.pause_after(patch.pause_after_failures, current.options, repeat)
        timed = (fire_at, recurring.with_extras(options, tags, pause_after), seq)
        updated = _updated(settings, client, current, changes, timed, at)
        left_s = actions.check_mutable(request, current, at)
        replace = request.app[keys.STORE].replace_schedule(current, updated, at)
        dues = [current.location.due_at, updated.location.due_at]
        return await actions.confirmed_change(request, at, dues, left_s, replace)

    updated = await _retrying_races(request, change)
    log.info("schedule_updated", client_id=updated.client_id, schedule_id=str(updated.schedule_id))
    await audit.schedules_changed(request, client, "schedule.update", [(updated, raw)])
    return schedule_answer(updated)


@routes.delete(
    "/v1/schedules/{schedule_id}",
    "Cancel a schedule (idempotent)",
    response=ScheduleView,
    headers=params.ChangeHeaders,
    errors=(409, 412),
    description="409 already_fired, or fire_imminent (a one-time schedule within TICKD_MUTATION_GUARD_S of "
    "its first due time); a fire in retry can be cancelled at any time (an attempt already on the wire may "
    "still arrive).",
)
async def cancel_schedule(request: web.Request) -> web.Response:
    cancelled = await _retrying_races(request, functools.partial(actions.cancel, request))
    log.info("schedule_cancelled", client_id=cancelled.client_id, schedule_id=str(cancelled.schedule_id))
    return schedule_answer(cancelled)


@routes.post(
    "/v1/schedules/{schedule_id}/pause",
    "Pause a schedule: it fires nothing until resumed, by a call or by itself at `until`",
    response=ScheduleView,
    request=PauseRequest,
    optional_body=True,
    headers=params.ChangeHeaders,
    errors=(409, 412),
    description="The body is optional: until (RFC 3339 or epoch seconds, ahead of now, within "
    "TICKD_MAX_HORIZON_S) resumes it by itself then, as POST .../resume would (its missed-fire policy "
    "decides about the occurrences that fell meanwhile); note (at most 500 characters) is shown with the "
    "pause. Pausing a paused schedule without a body changes nothing (200); with one, replaces its pause. "
    "409 already_cancelled, already_fired, or fire_imminent (a one-time schedule within "
    "TICKD_MUTATION_GUARD_S of its first due time; a fire in retry can be paused at any time).",
)
async def pause_schedule(request: web.Request) -> web.Response:
    """Pause: the schedule fires nothing until resumed. Pausing a paused schedule without a body is 200
    (idempotent); with one, its pause is replaced by the body's."""
    _schedule_id(request)  # the path before the body
    body = None
    if request.body_exists:
        body = decode(PauseRequest, await read_json(request, _PAUSE_BODY_MAX))
    paused = await _retrying_races(request, functools.partial(actions.pause, request, wanted=body))
    pause = paused.pause
    log.info(
        "schedule_paused",
        client_id=paused.client_id,
        schedule_id=str(paused.schedule_id),
        until=pause.until.isoformat() if pause is not None and pause.until is not None else None,
    )
    return schedule_answer(paused)


@routes.post(
    "/v1/schedules/{schedule_id}/resume",
    "Resume a paused schedule from now on; the occurrences missed are recorded in its runs as skipped",
    response=ScheduleView,
    headers=params.ChangeHeaders,
    errors=(409, 412),
    description="A recurring schedule goes on with its first occurrence at or after now; a one-time one "
    "fires at its time, or now if that passed. 409 not_paused.",
)
async def resume_schedule(request: web.Request) -> web.Response:
    """Resume a paused schedule (``service.pauses``); 409 ``not_paused`` for one that is not."""
    resumed = await _retrying_races(request, functools.partial(actions.resume, request))
    log.info("schedule_resumed", client_id=resumed.client_id, schedule_id=str(resumed.schedule_id))
    return schedule_answer(resumed)


@routes.post(
    "/v1/schedules/{schedule_id}/trigger",
    "Fire the schedule once more now, without moving its timeline: a one-time trigger of its own",
    ok=201,
    also=_REPLAYED,
    response=ScheduleView,
    headers=params.CreateHeaders,
    errors=(403, 409),
    description="The trigger has its own schedule id (trigger_of: the schedule) and fire id "
    "(<schedule_id>:<trigger time ms>), the schedule's payload and callback. Idempotency-Key as on a "
    "create (a replay answers 200). 409 already_cancelled.",
)
async def trigger_schedule(request: web.Request) -> web.Response:
    """One extra fire of the schedule now (``service.triggers``): 201 with the trigger, a one-time schedule
    of its own. An Idempotency-Key makes a retried request answer 200 with the same trigger."""
    client = await _creator(request)
    key = _idempotency_key(request)
    store, at = request.app[keys.STORE], now()
    parent = await store.get_schedule(client.client_id, _schedule_id(request))
    if parent is None:
        raise NotFound("no such schedule", field="schedule_id")
    if parent.status is Status.CANCELLED:
        raise conflict("the schedule is cancelled", "already_cancelled")
    request.app[keys.LIMITER].take(client.client_id)
    if key is not None:
        digest = idempotency.request_digest(request.method, request.path, b"null")  # no body
        own = triggers.trigger_id(parent.schedule_id, at)
        reservation = IdempotencyKey(client.client_id, key, own, digest, at)
        bound = await store.reserve_idempotency_key(reservation)
        # Whether this request reserved the key, by identity: a retry in the same millisecond derives the
        # same trigger id, so the ids alone cannot tell (CI: the retry answered 201, not a replay).
        if bound is not reservation:
            replayed = await _trigger_reserved(request, bound, digest)
            if replayed is not None:
                return replayed
            at = bound.created_at or at  # the first request's trigger, rebuilt: the same id
    trigger = await actions.write_trigger(request, client, parent, at)
    log.info(
        "schedule_triggered",
        client_id=client.client_id,
        schedule_id=str(parent.schedule_id),
        trigger_id=str(trigger.schedule_id),
    )
    return schedule_answer(trigger, 201)


async def _trigger_reserved(request: web.Request, bound: IdempotencyKey, digest: str) -> web.Response | None:
    """A key another request reserved: its trigger replayed (200), or None to write it (taken over)."""
    idempotency.check_same_request(bound, digest)
    settings, at = request.app[keys.SETTINGS], now()
    takeover = idempotency.abandoned(bound, at, settings.idempotency_takeover_s)
    existing = await idempotency.written(
        request.app[keys.STORE], bound, 0.0 if takeover else settings.idempotency_wait_s
    )
    if existing is not None:
        return schedule_answer(existing, 200, {"Idempotent-Replayed": "true"})
    if not takeover:
        raise idempotency.in_progress(bound, now(), settings.idempotency_takeover_s)
    return None
