"""Response bodies as msgspec Structs: encoded fast, and the source of the OpenAPI response schemas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TypeVar
from uuid import UUID

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from tickd.schema import calendars, timing
from tickd.schema.calendars import StoredCalendar
from tickd.schema.missed import FIRE_ALL, Missed
from tickd.schema.model import (
    AuditRecord,
    BulkJob,
    Callback,
    Client,
    ClientSettings,
    DeadLetter,
    Debounce,
    PauseNote,
    Repeat,
    Run,
    Schedule,
    Status,
    ThrottlePolicy,
    Try,
)
from tickd.schema.recurrence import format_duration
from tickd.schema.settings import retention_of
from tickd.service.settings import ApiSettings

T = TypeVar("T")
# An event counts as inside its window if delivered up to this long after the window's end (delivery
# takes a moment even for the event due at the very end).
_WINDOW_GRACE = timedelta(seconds=1)


class ErrorDetail(Struct):
    code: str
    message: str
    field: str | None = None


class ErrorBody(Struct):
    error: ErrorDetail


class ClientView(Struct):
    client_id: str
    poller_count: int
    poller_span: int
    active: bool
    kafka_topics: list[str]
    created_at: datetime
    updated_at: datetime
    resized_at: datetime | None = None
    # Only in the answer to registration and rotation: shown once, never stored.
    api_key: str | UnsetType = UNSET
    # Only in the answer to registration: shown once (stored, but never shown again).
    signing_secret: str | UnsetType = UNSET


class ClientList(Struct):
    clients: list[ClientView]


class ApiKeyView(Struct):
    client_id: str
    api_key: str


class SigningSecretView(Struct):
    client_id: str
    signing_secret: str
    # Until then deliveries carry a signature by the previous secret too; None if there was none.
    previous_valid_until: datetime | None


class MissedView(Struct):
    """A missed-fire policy: fire_all, or skip / fire_once past ``deadline_s`` after an occurrence's due time."""

    policy: str
    deadline_s: int | None


def missed_view(missed: Missed | None) -> MissedView | UnsetType:
    if missed is None:
        return UNSET
    return MissedView(*_missed_fields(missed))


class RecurrenceView(Struct, omit_defaults=True):
    cron: str | UnsetType = UNSET
    timezone: str | UnsetType = UNSET
    every: str | UnsetType = UNSET
    start_at: datetime | UnsetType = UNSET
    end_at: datetime | UnsetType = UNSET
    max_fires: int | UnsetType = UNSET
    on_gap: str | UnsetType = UNSET
    on_overlap: str | UnsetType = UNSET
    calendars: list[str] | UnsetType = UNSET
    # Its own policy; absent: the client's default (GET /v1/settings).
    missed: MissedView | UnsetType = UNSET


class ScheduleView(Struct, omit_defaults=True):
    schedule_id: UUID
    status: str
    fire_at: datetime
    due_at: datetime
    fire_id: str
    attempts: int
    fired_at: datetime | None
    last_error: str | None
    created_at: datetime
    callback: Callback
    # The schedule's version, also its ETag: a change sent with If-Match: "<version>" applies only to it.
    version: int
    # Absent in a listing's items (a listing reads no payloads); GET of one schedule shows it.
    payload: Raw | UnsetType = UNSET
    # Recurring schedules: the rule, and which occurrence fire_at is (1 = the first).
    recurrence: RecurrenceView | UnsetType = UNSET
    occurrence: int | UnsetType = UNSET
    jitter_s: float | UnsetType = UNSET
    # Batch triggers: events per fire, spread over window_s after it.
    events: int | UnsetType = UNSET
    window_s: float | UnsetType = UNSET
    throttle: str | UnsetType = UNSET
    tags: dict[str, str] | UnsetType = UNSET
    # Recurring: paused after this many fires in a row dead-lettered (0: never); absent: the client's default.
    pause_after_failures: int | UnsetType = UNSET
    # A notification of the client's (schema.notices) on its way to the client's notify target.
    notice: bool | UnsetType = UNSET
    # A trigger (POST /v1/schedules/{id}/trigger): the schedule it is an extra fire of.
    trigger_of: UUID | UnsetType = UNSET
    # A backfill's fire of one occurrence (POST .../backfill): the schedule whose occurrence it is (fire_at).
    backfill_of: UUID | UnsetType = UNSET
    # A paused schedule's pause, when it was given a time or a note.
    pause: PauseView | UnsetType = UNSET
    # A by-key schedule that coalesces bursts of PUTs (service.debounce).
    debounce: DebounceView | UnsetType = UNSET


class PauseView(Struct, omit_defaults=True):
    """When the schedule was paused; ``until``: it resumes by itself then (``due_at`` is that time too)."""

    paused_at: datetime
    until: datetime | UnsetType = UNSET
    note: str | UnsetType = UNSET


class DebounceView(Struct, omit_defaults=True):
    """The debounce a by-key PUT gave; ``first_put_at``/``last_put_at``: the first and the latest PUT the
    pending (or last) fire carries: it goes out ``window_s`` after the latest, at most ``max_wait_s``
    after the first (``edge: leading``: the first PUT of a burst went out at once)."""

    window_s: float
    edge: str
    max_wait_s: float | UnsetType = UNSET
    first_put_at: datetime | UnsetType = UNSET
    last_put_at: datetime | UnsetType = UNSET


class ScheduleList(Struct):
    schedules: list[ScheduleView]
    next_cursor: str | None


class BatchItemError(Struct):
    code: str
    message: str
    field: str | None
    status: int


class BatchItem(Struct, omit_defaults=True):
    index: int
    schedule_id: UUID | UnsetType = UNSET
    status: str | UnsetType = UNSET
    fire_at: datetime | UnsetType = UNSET
    error: BatchItemError | UnsetType = UNSET


class BatchResult(Struct):
    results: list[BatchItem]


class TryView(Struct):
    """One attempt of a fire: when it was due (after jitter, window spread, backoff or redrive) and sent,
    sent minus due, and how it ended (``delivered``, ``retry``, ``failed`` for good)."""

    attempt: int
    due_at: datetime
    sent_at: datetime
    lateness_s: float
    outcome: str
    error: str | None


class RunView(Struct, omit_defaults=True):
    fire_id: str
    nominal_at: datetime
    status: str
    attempts: int
    # The first attempt's time and its lateness (sent minus due); null before it went out, and the
    # lateness for a run recorded before attempts were kept (its due time is not known).
    fired_at: datetime | None
    lateness_s: float | None
    last_error: str | None
    occurrence: int | UnsetType = UNSET
    # Each attempt (the first and the latest 19 of a fire retried more often).
    tries: list[TryView] | UnsetType = UNSET
    # A fire expanded into events: how many, how many were delivered, the last delivery, and whether all
    # were delivered by the end of the window (null while some are outstanding and the window is open).
    events: int | UnsetType = UNSET
    events_delivered: int | UnsetType = UNSET
    last_event_at: datetime | UnsetType | None = UNSET
    completed_in_window: bool | UnsetType | None = UNSET
    # Fired by a backfill (POST .../backfill), not by the schedule's timeline: its fire id ends in :backfill.
    backfill: bool | UnsetType = UNSET


class RunList(Struct):
    runs: list[RunView]
    next_cursor: str | None


class AuditView(Struct, omit_defaults=True):
    """One change (``service.audit``): when, who, what, on which target, and what it left."""

    audit_id: str
    at: datetime
    actor: str
    action: str
    target: str
    # The request's fields: a payload as its size and sha256, a callback's secrets redacted.
    changes: Raw
    request_id: str
    schedule_id: UUID | UnsetType = UNSET
    version: int | UnsetType = UNSET


class AuditList(Struct):
    records: list[AuditView]
    next_cursor: str | None


def audit_view(r: AuditRecord) -> AuditView:
    return AuditView(
        audit_id=r.audit_id,
        at=r.at,
        actor=r.actor,
        action=r.action,
        target=r.target,
        changes=Raw(r.changes.encode()),
        request_id=r.request_id,
        schedule_id=r.schedule_id if r.schedule_id is not None else UNSET,
        version=r.version if r.version is not None else UNSET,
    )


class NoticeView(Struct):
    """One notice of the client's feed (``schema.notices``): its kind (schedule.auto_paused,
    fire.dead_lettered, schedule.resumed), what it is about and its details."""

    notice_id: str
    at: datetime
    kind: str
    target: str
    detail: Raw
    schedule_id: UUID | UnsetType = UNSET


class NoticeList(Struct):
    notices: list[NoticeView]
    next_cursor: str | None


def notice_view(r: AuditRecord) -> NoticeView:
    schedule_id = r.schedule_id if r.schedule_id is not None else UNSET
    return NoticeView(r.audit_id, r.at, r.action, r.target, Raw(r.changes.encode()), schedule_id)


class SettingsView(Struct):
    """The client's own settings (``PATCH /v1/settings``); retentions as they apply (the client's choice,
    else the deployment's default) with the most it may choose."""

    pause_after_failures: int
    notify: Callback | None
    retention_s: int
    audit_retention_s: int
    retention_max_s: int
    audit_retention_max_s: int
    # The default missed-fire policy of its recurring schedules.
    missed: MissedView


def settings_view(client: ClientSettings, api: ApiSettings) -> SettingsView:
    return SettingsView(
        client.pause_after_failures,
        client.notify,
        retention_of(client.retention_s, api.retention_s, api.retention_max_s),
        retention_of(client.audit_retention_s, api.audit_retention_s, api.audit_retention_max_s),
        api.retention_max_s,
        api.audit_retention_max_s,
        MissedView(*_missed_fields(client.missed or FIRE_ALL)),
    )


def _missed_fields(missed: Missed) -> tuple[str, int | None]:
    return missed.policy, missed.deadline_s if missed.applies else None


class OccurrenceView(Struct, omit_defaults=True):
    utc: datetime
    local: datetime
    timezone: str
    # With calendars: the one that excludes this occurrence, and its version ("holidays v2").
    excluded_by: str | UnsetType = UNSET


class PreviewView(Struct):
    occurrences: list[OccurrenceView]


class PolicyView(Struct, omit_defaults=True):
    name: str
    max_in_flight: int
    release_timeout_s: int
    created_at: datetime
    updated_at: datetime
    # Tokens held now (events delivered and not yet released); only on a single policy's GET.
    in_flight: int | UnsetType = UNSET


class PolicyList(Struct):
    policies: list[PolicyView]


class CalendarRangeView(Struct, rename={"start": "from", "end": "to"}):
    start: str
    end: str


class CalendarView(Struct):
    """A calendar as stored: its zone, excluded dates, ranges (merged) and weekdays (business_days shows
    as sat and sun), its version (also the ETag) and when it was made and last changed."""

    name: str
    version: int
    timezone: str
    dates: list[str]
    ranges: list[CalendarRangeView]
    weekdays: list[str]
    created_at: datetime
    updated_at: datetime


class CalendarList(Struct):
    calendars: list[CalendarView]


class ReleaseView(Struct):
    event_id: str
    # False: the event held no token any more (released before, or timed out).
    released: bool


class DeadLetterView(Struct):
    dead_letter_id: str
    schedule_id: UUID
    fire_id: str
    failed_at: datetime
    attempts: int
    last_error: str
    callback: Callback
    # Set once redriven: when, and when the redriven fire (same fire id) is due.
    redriven_at: datetime | None
    redriven_due_at: datetime | None
    # Only in GET of one dead letter (and a redrive's answer): a listing reads no payloads.
    payload: Raw | UnsetType = UNSET
    # Each attempt of the fire, the last one the failure (GET of one dead letter; not for letters
    # written before attempts were kept).
    tries: list[TryView] | UnsetType = UNSET


class StatsWindow(Struct):
    window_s: int
    fired: int
    delivered: int
    retried: int
    failed: int
    lateness_p50_s: float | None
    lateness_p99_s: float | None
    lateness_max_s: float | None


class StatsView(Struct):
    client_id: str | None  # None: every client together (GET /v1/admin/stats)
    at: datetime
    windows: list[StatsWindow]


class DeadLetterList(Struct):
    dead_letters: list[DeadLetterView]
    next_cursor: str | None


class RedriveError(Struct):
    dead_letter_id: str
    code: str
    message: str


class RedriveResult(Struct):
    """The dead letters this call redrove, those it could not, and where the next call continues."""

    redriven: list[DeadLetterView]
    errors: list[RedriveError]
    next_cursor: str | None


class Health(Struct):
    status: str


def client_view(
    client: Client, api_key: str | UnsetType = UNSET, signing_secret: str | UnsetType = UNSET
) -> ClientView:
    return ClientView(
        client_id=client.client_id,
        poller_count=client.poller_count,
        poller_span=client.poller_span,
        active=client.active,
        kafka_topics=sorted(client.kafka_topics),
        created_at=client.created_at,
        updated_at=client.updated_at,
        resized_at=client.resized_at,
        api_key=api_key,
        signing_secret=signing_secret,
    )


def public_status(status: Status) -> str:
    """ "moved" is internal: a moved row's schedule lives on, scheduled, at its new location."""
    return Status.SCHEDULED.value if status is Status.MOVED else status.value


def calendar_view(stored: StoredCalendar) -> CalendarView:
    c = stored.calendar
    return CalendarView(
        c.name,
        c.version,
        c.timezone,
        [d.isoformat() for d in c.dates],
        [CalendarRangeView(start.isoformat(), end.isoformat()) for start, end in c.ranges],
        [calendars.WEEKDAYS[d] for d in c.weekdays],
        stored.created_at,
        stored.updated_at,
    )


def policy_view(p: ThrottlePolicy, in_flight: int | None) -> PolicyView:
    return PolicyView(
        p.name,
        p.max_in_flight,
        p.release_timeout_s,
        p.created_at,
        p.updated_at,
        UNSET if in_flight is None else in_flight,
    )


def recurrence_view(r: Repeat) -> RecurrenceView:
    def opt(value: T | None) -> T | UnsetType:
        return UNSET if value is None else value

    if r.every_s is not None:
        view = RecurrenceView(every=format_duration(r.every_s))
    else:
        view = RecurrenceView(cron=opt(r.cron), timezone=r.timezone, on_gap=r.on_gap, on_overlap=r.on_overlap)
    view.start_at = UNSET if r.implicit_start else opt(r.start_at)
    view.end_at, view.max_fires = opt(r.end_at), opt(r.max_fires)
    view.calendars = list(r.calendars) if r.calendars else UNSET
    view.missed = missed_view(r.missed)
    return view


def try_views(tries: tuple[Try, ...]) -> list[TryView] | UnsetType:
    views = [TryView(t.attempt, t.due_at, t.sent_at, round(t.lateness_s, 3), t.outcome, t.error) for t in tries]
    return views or UNSET


def run_view(schedule_id: UUID, run: Run) -> RunView:
    first = run.tries[0] if run.tries else None
    view = RunView(
        fire_id=timing.fire_id(schedule_id, run.nominal_at, backfill=run.backfill),
        nominal_at=run.nominal_at,
        status=run.status.value,
        attempts=run.attempts,
        fired_at=first.sent_at if first is not None else run.fired_at,
        lateness_s=round(first.lateness_s, 3) if first is not None else None,
        last_error=run.last_error,
        occurrence=run.seq or UNSET,
        tries=try_views(run.tries),
        backfill=True if run.backfill else UNSET,
    )
    if run.events:
        view.events, view.events_delivered, view.last_event_at = run.events, run.events_done, run.last_event_at
        view.completed_in_window = _completed(run)
    return view


def _completed(run: Run) -> bool | None:
    end = run.window_end or run.nominal_at
    if run.events_done >= run.events and run.last_event_at is not None:
        return run.last_event_at <= end + _WINDOW_GRACE
    return False if datetime.now(UTC) > end + _WINDOW_GRACE else None


def _or_unset(value: T | None) -> T | UnsetType:
    return UNSET if value is None else value


def schedule_view(s: Schedule, *, payload: bool = True) -> ScheduleView:
    """``payload`` False: a listing's item, read without its payload (``Store.list_minute``)."""
    options = s.options
    return ScheduleView(
        schedule_id=s.schedule_id,
        status=public_status(s.status),
        fire_at=s.fire_at,
        due_at=s.location.due_at,
        fire_id=s.fire_id,
        attempts=s.attempts,
        fired_at=s.fired_at,
        last_error=s.last_error,
        created_at=s.created_at,
        callback=s.callback,
        version=s.version,
        payload=Raw(s.payload or b"null") if payload else UNSET,
        recurrence=recurrence_view(options.repeat) if options and options.repeat else UNSET,
        occurrence=s.seq or UNSET,
        jitter_s=options.jitter_ms / 1000 if options and options.jitter_ms else UNSET,
        events=options.events if options and options.batch else UNSET,
        window_s=options.window_ms / 1000 if options and options.window_ms else UNSET,
        throttle=options.throttle if options and options.throttle else UNSET,
        tags=dict(options.tags) if options and options.tags else UNSET,
        pause_after_failures=_or_unset(options.pause_after_failures if options else None),
        notice=True if options and options.notice else UNSET,
        trigger_of=options.retry_of
        if options and options.retry_of and not options.repeat and not options.backfill
        else UNSET,
        backfill_of=options.retry_of if options and options.backfill and options.retry_of else UNSET,
        pause=pause_view(s.pause) if s.status is Status.PAUSED and s.pause is not None else UNSET,
        debounce=debounce_view(s.debounce) if s.debounce is not None else UNSET,
    )


def debounce_view(debounce: Debounce) -> DebounceView:
    return DebounceView(
        window_s=debounce.window_ms / 1000,
        edge="leading" if debounce.leading else "trailing",
        max_wait_s=debounce.max_wait_ms / 1000 if debounce.max_wait_ms else UNSET,
        first_put_at=_or_unset(debounce.first_at),
        last_put_at=_or_unset(debounce.last_at),
    )


def pause_view(pause: PauseNote) -> PauseView:
    return PauseView(paused_at=pause.at, until=_or_unset(pause.until), note=_or_unset(pause.note))


def dead_letter_id(letter: DeadLetter) -> str:
    """A dead letter's id: its key, ``<failed_at epoch ms>-<schedule_id>``."""
    return f"{timing.to_epoch_ms(letter.failed_at)}-{letter.schedule_id}"


def dead_letter_view(letter: DeadLetter, *, payload: bool = True) -> DeadLetterView:
    """``payload`` False: a listing's item, read without its payload (``Store.page_dead_letters``)."""
    return DeadLetterView(
        dead_letter_id=dead_letter_id(letter),
        schedule_id=letter.schedule_id,
        fire_id=letter.fire_id,
        failed_at=letter.failed_at,
        attempts=letter.attempts,
        last_error=letter.last_error,
        callback=letter.callback,
        payload=Raw(letter.payload or b"null") if payload else UNSET,
        redriven_at=letter.redriven_at,
        redriven_due_at=letter.redriven_due_at,
        tries=try_views(letter.tries) if payload else UNSET,
    )


class BulkFilterView(Struct):
    tag: str
    status: str | None
    start: datetime | None = msgspec.field(name="from")
    end: datetime | None = msgspec.field(name="to")
    target: str | None = None


class BackfillView(Struct):
    """A backfill's schedule, range (its occurrences in [from, to)) and rate (fires a second)."""

    schedule_id: UUID
    start: datetime = msgspec.field(name="from")
    end: datetime = msgspec.field(name="to")
    rate_per_s: float = 0.0


class BulkFailure(Struct, omit_defaults=True):
    """An item a job could not act on: a schedule, or (a backfill's) one occurrence of its schedule."""

    schedule_id: str
    reason: str
    nominal_at: str | None = None


class BulkJobView(Struct):
    """A bulk job and its progress: ``matched`` schedules the filter selected so far, ``changed`` the action
    changed, ``unchanged`` already as it leaves them (or every one, in a dry run), ``failed`` it could not
    change (the first few in ``failures``, with the reason: fire_imminent, already_fired, gone ...)."""

    job_id: UUID
    action: str
    filter: BulkFilterView | None
    dry_run: bool
    state: str
    matched: int
    changed: int
    unchanged: int
    failed: int
    failures: list[BulkFailure]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # A backfill's (action "backfill", no filter): matched counts occurrences, changed those it fired.
    backfill: BackfillView | None = None


class BulkJobList(Struct):
    jobs: list[BulkJobView]
    next_cursor: str | None


def bulk_job_view(job: BulkJob) -> BulkJobView:
    f = job.filter
    filter_view = backfill = None
    if f.tag is not None:
        tag = f"{f.tag[0]}={f.tag[1]}"
        filter_view = BulkFilterView(
            tag, public_status(f.status) if f.status is not None else None, f.due_from, f.due_to, f.target
        )
    if f.schedule_id is not None and f.due_from is not None and f.due_to is not None:
        backfill = BackfillView(f.schedule_id, f.due_from, f.due_to, f.rate_per_s or 0.0)
    return BulkJobView(
        job_id=job.job_id,
        action=job.action,
        filter=filter_view,
        dry_run=job.dry_run,
        state=job.state.value,
        matched=job.matched,
        changed=job.changed,
        unchanged=job.unchanged,
        failed=job.failed,
        failures=[_failure(job, subject, reason) for subject, reason in job.failures],
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        backfill=backfill,
    )


def _failure(job: BulkJob, subject: str, reason: str) -> BulkFailure:
    """A backfill keeps the occurrence that failed (its schedule is the job's); other jobs the schedule."""
    if job.filter.schedule_id is not None:
        return BulkFailure(str(job.filter.schedule_id), reason, subject)
    return BulkFailure(subject, reason)
