"""Bulk jobs (``service.bulk``): create one (an action on every schedule a tag selects, or on their dead
letters, or a dry run that counts them), read one's progress, list them, cancel one; and a backfill of one
recurring schedule's past occurrences (``schema.backfills``), a job of its own kind."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import msgspec
import structlog
from aiohttp import web
from msgspec import Struct, UnsetType

from tickd.schema import backfills, timing
from tickd.schema.errors import Conflict, NotFound
from tickd.schema.model import BulkFilter, BulkJob, BulkState, Client, IdempotencyKey, Schedule, Status
from tickd.schema.settings import retention_of
from tickd.service import audit, dead_letters, idempotency, keys, params, recurring
from tickd.service.declare import Routes
from tickd.service.errors import Forbidden, Invalid, TooManyRequests, json_response
from tickd.service.routes.common import conflict, now, read_json
from tickd.service.validation import BackfillRequest, BulkJobCreate, decode, parse_time
from tickd.service.views import BulkJobList, BulkJobView, bulk_job_view

log = structlog.get_logger("tickd.api")
_MAX_BODY = 4 * 1024


class BulkJobPath(Struct, forbid_unknown_fields=True):
    job_id: uuid.UUID


class BulkListQuery(Struct, forbid_unknown_fields=True):
    limit: params.Limit = 100
    cursor: params.Cursor | UnsetType = msgspec.UNSET


routes = Routes("bulk-jobs", path_params=(BulkJobPath, params.SchedulePath))


def _filter(body: BulkJobCreate, at: datetime) -> BulkFilter:
    f = body.filter
    key, _, value = f.tag.partition("=")
    due_from = None if isinstance(f.start, UnsetType) else parse_time(f.start, "filter.from")
    due_to = None if isinstance(f.end, UnsetType) else parse_time(f.end, "filter.to")
    if due_from is not None and due_to is not None and due_to <= due_from:
        raise Invalid("filter.to must be after filter.from", field="filter.to", code="out_of_range")
    if body.action == "redrive":  # when the fires failed: the dead-letter listing's range, fixed now
        try:
            due_from, due_to = dead_letters.time_range(due_from, due_to, at)
        except Invalid as exc:
            raise Invalid(exc.message, field=f"filter.{exc.field}", code=exc.code) from None
    status = None if isinstance(f.status, UnsetType) else Status(f.status)
    target = None if isinstance(f.target, UnsetType) else f.target
    return BulkFilter((key, value), status, due_from, due_to, target)


@routes.post(
    "/v1/bulk-jobs",
    "Start a bulk job: cancel, pause, resume, trigger or redrive every schedule with a tag, or count them (dry_run)",
    ok=202,
    also={200: "Replayed (Idempotency-Key)"},
    request=BulkJobCreate,
    response=BulkJobView,
    headers=params.CreateHeaders,
    errors=(403, 429),
    description="The job runs in the background, at TICKD_BULK_RATE_PER_S schedules a second for this client; "
    "GET /v1/bulk-jobs/{job_id} shows its progress, and a notification (bulk_job.done) tells when it is done. "
    "filter: tag (key=value, required), and optionally status, from/to (due time), target (an HTTP "
    "callback's host or a Kafka topic). redrive: the dead letters not yet redriven of the schedules the "
    "filter selects, from/to being when their fires failed (default the last 7 days, at most 31 days), each "
    "fire due now; matched counts dead letters. dry_run: true counts (matched) and changes nothing. A "
    "schedule changed once is not changed again if the job is resumed after a replica failed. 429 "
    "too_many_bulk_jobs past TICKD_BULK_OPEN_MAX open jobs.",
)
async def create_bulk_job(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    raw = await read_json(request, _MAX_BODY)
    body = decode(BulkJobCreate, raw)
    at = now()
    wanted = _filter(body, at)
    if body.action in ("trigger", "redrive") and not body.dry_run and not client.active:
        raise Forbidden(f"this client is deactivated and cannot {body.action}", code="client_inactive")
    request.app[keys.LIMITER].take(client.client_id)
    stored, replayed = await _started(request, client, raw, body.action, wanted, at, dry_run=body.dry_run)
    if replayed:
        return json_response(bulk_job_view(stored), 200, headers={"Idempotent-Replayed": "true"})
    await audit.changed(request, client.client_id, client, "bulk_job.create", str(stored.job_id), raw)
    return json_response(bulk_job_view(stored), 202)


async def _started(
    request: web.Request, client: Client, raw: bytes, action: str, wanted: BulkFilter, at: datetime, *, dry_run: bool
) -> tuple[BulkJob, bool]:
    """Store a queued job, once per Idempotency-Key: (the job, whether it is an earlier request's)."""
    store = request.app[keys.STORE]
    job_id = uuid.uuid1()
    key = params.headers(params.CreateHeaders, request).idempotency_key
    if not isinstance(key, UnsetType):
        digest = idempotency.request_digest(request.method, request.path, raw)
        reservation = IdempotencyKey(client.client_id, f"bulk:{key}", job_id, digest, at)
        bound = await store.reserve_idempotency_key(reservation)
        if bound is not reservation:
            idempotency.check_same_request(bound, digest)
            existing = await store.get_bulk_job(client.client_id, bound.schedule_id)
            if existing is not None:
                return existing, True
            job_id = bound.schedule_id  # its first request stopped before storing the job: store it now
    await _room_for_one_more(request, client)
    job = BulkJob(
        client_id=client.client_id,
        job_id=job_id,
        action=action,
        filter=wanted,
        dry_run=dry_run,
        state=BulkState.QUEUED,
        created_at=at,
        updated_at=at,
        actor=audit.actor(client),
        request_id=request.get(audit.REQUEST_ID, ""),
    )
    stored = await store.create_bulk_job(job)
    log.info("bulk_job_created", client_id=client.client_id, job_id=str(job_id), action=job.action, dry_run=job.dry_run)
    return stored, False


_BACKFILL_BODY_MAX = 1024
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)


@routes.post(
    "/v1/schedules/{schedule_id}/backfill",
    "Backfill a recurring schedule: fire each of its occurrences in a past range once, oldest first",
    ok=202,
    also={200: "Replayed (Idempotency-Key)"},
    request=BackfillRequest,
    response=BulkJobView,
    headers=params.CreateHeaders,
    errors=(403, 409, 429),
    description="from/to (RFC 3339 or epoch seconds; to no later than now): the occurrences of the schedule's "
    "rule in [from, to), at most TICKD_BACKFILL_MAX_FIRES (422 too_many_fires), fired rate_per_s a second "
    "(default TICKD_BACKFILL_RATE_PER_S, at most TICKD_BULK_RATE_PER_S) as a bulk job (action backfill): "
    "GET /v1/bulk-jobs/{job_id} shows its progress, POST /v1/bulk-jobs/{job_id}/cancel stops it. An "
    "occurrence its runs show sent (by the schedule's timeline or an earlier backfill), one a calendar of the "
    "schedule excludes, and the pending occurrence and later ones (the timeline's) are left alone; each fire "
    "has a fire id of its own (<schedule_id>:<nominal ms>:backfill, X-Tickd-Backfill: true) and its outcome "
    "is the occurrence's run. from must be within the runs the client keeps (retention_s) for a range the "
    "schedule lived through (422 history_expired). 409 not_recurring, already_cancelled.",
)
async def backfill_schedule(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    schedule_id = params.path(params.SchedulePath, request).schedule_id
    raw = await read_json(request, _BACKFILL_BODY_MAX)
    body = decode(BackfillRequest, raw)
    if not client.active:
        raise Forbidden("this client is deactivated and cannot backfill", code="client_inactive")
    at = now()
    start, end = timing.truncate_ms(parse_time(body.start, "from")), timing.truncate_ms(parse_time(body.end, "to"))
    if start < _EARLIEST:
        raise Invalid("from must be in 1970 or later", field="from", code="out_of_range")
    if end <= start:
        raise Invalid("to must be after from", field="to", code="out_of_range")
    if end > at:
        raise Invalid("a backfill covers the past: to must not be after now", field="to", code="out_of_range")
    settings = request.app[keys.SETTINGS]
    rate = settings.backfill_rate_per_s if isinstance(body.rate_per_s, UnsetType) else body.rate_per_s
    if rate > settings.bulk_rate_per_s:
        raise Invalid(
            f"rate_per_s must be at most {settings.bulk_rate_per_s:g} (TICKD_BULK_RATE_PER_S)",
            field="rate_per_s",
            code="out_of_range",
        )
    parent = await request.app[keys.STORE].get_schedule(client.client_id, schedule_id)
    if parent is None:
        raise NotFound("no such schedule", field="schedule_id")
    await _backfillable(request, client, parent, start, end, at)
    request.app[keys.LIMITER].take(client.client_id)
    wanted = BulkFilter(None, None, start, end, None, parent.schedule_id, rate)
    job, replayed = await _started(request, client, raw, backfills.ACTION, wanted, at, dry_run=False)
    if replayed:
        return json_response(bulk_job_view(job), 200, headers={"Idempotent-Replayed": "true"})
    fields = {"job_id": str(job.job_id), "from": start.isoformat(), "to": end.isoformat(), "rate_per_s": rate}
    record = audit.record(
        request,
        client.client_id,
        client,
        "schedule.backfill",
        str(parent.schedule_id),
        at=at,
        fields=fields,
        schedule_id=parent.schedule_id,
        version=parent.version,
    )
    await audit.write(request, [record])
    return json_response(bulk_job_view(job), 202)


async def _backfillable(
    request: web.Request, client: Client, parent: Schedule, start: datetime, end: datetime, at: datetime
) -> None:
    """Refuse a backfill ``parent`` cannot take, naming why. Its occurrences are counted in a rule thread,
    as a create's rule is searched (``service.recurring.RuleWork``), not on the event loop."""
    repeat = parent.repeat
    if repeat is None:
        raise conflict("only a recurring schedule has occurrences to backfill", "not_recurring")
    if parent.status is Status.CANCELLED:
        raise conflict("the schedule is cancelled", "already_cancelled")
    settings = request.app[keys.SETTINGS]
    kept_s = retention_of(client.settings.retention_s, settings.retention_s, settings.retention_max_s)
    kept_from = at - timedelta(seconds=kept_s)
    if start < kept_from and end > parent.created_at:
        raise Invalid(
            f"runs are kept {kept_s} s (retention_s): which occurrences before {kept_from.isoformat()} the "
            "schedule sent is no longer known; backfill from then on",
            field="from",
            code="history_expired",
        )
    most = settings.backfill_max_fires
    work = recurring.RuleWork(settings.request_scan_steps, client.client_id)
    found = await work.run(lambda _: backfills.occurrences(repeat, start, end, most))
    if not found:
        raise Invalid("the schedule's rule has no occurrence in [from, to)", field="from", code="empty_range")
    if len(found) > most:
        raise Invalid(
            f"more than {most} occurrences in [from, to) (TICKD_BACKFILL_MAX_FIRES); backfill a shorter range",
            field="to",
            code="too_many_fires",
        )


async def _room_for_one_more(request: web.Request, client: Client) -> None:
    limit = request.app[keys.SETTINGS].bulk_open_max
    store = request.app[keys.STORE]
    mine = [job_id for client_id, job_id in await store.open_bulk_jobs(10_000) if client_id == client.client_id]
    if len(mine) < limit:
        return
    # An open entry may outlive its job by a moment (unlisted after its last save): count the running ones.
    jobs = [await store.get_bulk_job(client.client_id, job_id) for job_id in mine[: limit * 2]]
    if sum(1 for j in jobs if j is not None and j.state in (BulkState.QUEUED, BulkState.RUNNING)) >= limit:
        raise TooManyRequests(
            f"this client has {limit} bulk jobs open (TICKD_BULK_OPEN_MAX); wait for one to finish or cancel one",
            code="too_many_bulk_jobs",
        )


@routes.get("/v1/bulk-jobs", "The client's bulk jobs, newest first", response=BulkJobList, query=BulkListQuery)
async def list_bulk_jobs(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    query = params.query(BulkListQuery, request)
    before = None
    if not isinstance(query.cursor, UnsetType):
        try:
            before = uuid.UUID(hex=query.cursor)
        except ValueError:
            raise Invalid("cursor is not one this API handed out", field="cursor") from None
    jobs = await request.app[keys.STORE].list_bulk_jobs(client.client_id, before, query.limit)
    cursor = jobs[-1].job_id.hex if len(jobs) == query.limit else None
    return json_response(BulkJobList([bulk_job_view(j) for j in jobs], cursor))


async def _job(request: web.Request) -> tuple[Client, BulkJob]:
    client = await request.app[keys.AUTH].client(request)
    job_id = params.path(BulkJobPath, request).job_id
    job = await request.app[keys.STORE].get_bulk_job(client.client_id, job_id)
    if job is None:
        raise NotFound("no such bulk job", field="job_id")
    return client, job


@routes.get("/v1/bulk-jobs/{job_id}", "A bulk job and its progress", response=BulkJobView)
async def get_bulk_job(request: web.Request) -> web.Response:
    _, job = await _job(request)
    return json_response(bulk_job_view(job))


@routes.post(
    "/v1/bulk-jobs/{job_id}/cancel",
    "Stop a bulk job: what it did stands, the rest is left (cancelling a cancelled job is 200)",
    response=BulkJobView,
    errors=(409,),
    description="409 already_done for a job that finished.",
)
async def cancel_bulk_job(request: web.Request) -> web.Response:
    client, job = await _job(request)
    store = request.app[keys.STORE]
    for _ in range(5):  # the runner saves a page now and then: read again and retry
        if job.state is BulkState.CANCELLED:
            return json_response(bulk_job_view(job))
        if job.state is BulkState.DONE:
            raise conflict("the bulk job is done", "already_done")
        if await store.stop_bulk_job(job, now()):
            await audit.changed(request, client.client_id, client, "bulk_job.cancel", str(job.job_id))
            stopped = await store.get_bulk_job(client.client_id, job.job_id)
            return json_response(bulk_job_view(stopped or job))
        again = await store.get_bulk_job(client.client_id, job.job_id)
        if again is None:
            raise NotFound("no such bulk job", field="job_id")
        job = again
    raise Conflict("the bulk job kept changing; retry")
