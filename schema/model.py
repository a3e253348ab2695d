"""The domain model. Entities are frozen dataclasses; callbacks are msgspec Structs because they travel
as JSON (API body, stored column, delivery) and one tagged definition serves all three."""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple
from uuid import UUID

import msgspec

from tickd.schema import calendars as cal
from tickd.schema import recurrence as rec
from tickd.schema import timing
from tickd.schema.errors import InvalidInput
from tickd.schema.missed import Missed


class Status(enum.StrEnum):
    SCHEDULED = "scheduled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # The row was superseded by a reschedule; the schedule lives on at its new location.
    MOVED = "moved"
    # The client paused the schedule: pollers fire only scheduled rows, so this one waits for a resume.
    PAUSED = "paused"
    # An occurrence of a recurring schedule never fired: in runs, one that fell while it was paused; in
    # its row and run, one a calendar excluded when it came due.
    SKIPPED = "skipped"


class HttpCallback(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="http"):
    url: str
    method: str = "POST"
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout_s: float = 5.0


class KafkaCallback(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="kafka"):
    topic: str


Callback = HttpCallback | KafkaCallback

_callback_decoder: msgspec.json.Decoder[Callback] = msgspec.json.Decoder(Callback)
_encoder = msgspec.json.Encoder()


def callback_type(callback: Callback) -> str:
    """``"http"`` or ``"kafka"``: the wire tag, for metrics and logs."""
    return "http" if isinstance(callback, HttpCallback) else "kafka"


def encode_callback(callback: Callback) -> str:
    return _encoder.encode(callback).decode()


@functools.lru_cache(maxsize=4096)
def decode_callback(raw: str | bytes) -> Callback:
    """A stored callback, decoded once per distinct text: the rows of a minute mostly share a few
    callbacks, and every row read would otherwise hold a copy (callbacks are frozen; nothing mutates
    their headers)."""
    return _callback_decoder.decode(raw)


class Repeat(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A schedule's recurrence as stored (validated and normalised by ``from_recurrence``)."""

    cron: str | None = None
    timezone: str = "UTC"
    every_s: int | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_fires: int | None = None
    on_gap: rec.GapPolicy = "shift"
    on_overlap: rec.OverlapPolicy = "first"
    # An every rule's start_at chosen by tickd (one interval after the create), not by the client: it
    # anchors the timeline but is not shown, and a change to a cron rule does not keep it.
    implicit_start: bool = False
    # The client's calendars (``schema.calendars``) whose exclusions this timeline skips, in the order named.
    calendars: tuple[str, ...] = ()
    # What an occurrence that cannot start in time does (``schema.missed``); None: the client's default.
    missed: Missed | None = None

    @classmethod
    def from_recurrence(cls, r: rec.Recurrence, *, implicit_start: bool = False) -> Repeat:
        bounded = cls(start_at=r.start_at, end_at=r.end_at, max_fires=r.max_fires)
        rule = r.rule
        if isinstance(rule, rec.EveryRule):
            return msgspec.structs.replace(bounded, every_s=rule.interval_s, implicit_start=implicit_start)
        return msgspec.structs.replace(
            bounded, cron=rule.expr, timezone=rule.timezone, on_gap=rule.on_gap, on_overlap=rule.on_overlap
        )

    def recurrence(self) -> rec.Recurrence:
        rule: rec.Rule
        if self.every_s is not None:
            rule = rec.EveryRule(self.every_s)
        else:
            assert self.cron is not None
            rule = rec.CronRule(self.cron, self.timezone, self.on_gap, self.on_overlap)
        return rec.Recurrence(rule, self.start_at, self.end_at, self.max_fires)


class EventOf(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """On an event row: the schedule and fire it belongs to, and which of its ``count`` events it is."""

    parent: UUID
    index: int
    count: int


class PauseNote(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A pause the client gave a time or a reason: on the paused row's options until it is resumed. A
    pause with ``until`` is parked at that time (its row's due time): the instance owning that minute
    resumes it then, as a client's resume would (``schema.pauses``)."""

    at: datetime  # when it was paused
    until: datetime | None = None
    note: str | None = None


# A pause note's longest text (characters).
MAX_PAUSE_NOTE = 500


class Debounce(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A by-key schedule that coalesces bursts (``service.debounce``): each PUT of the key within the
    window pushes its pending fire back, with the latest payload, at most ``max_wait_ms`` after the
    burst's first PUT. Its row is read again right before it is sent (``Schedule.rechecked``), so a PUT
    may move it at any time, inside the mutation guard too."""

    window_ms: int
    max_wait_ms: int = 0  # 0: no cap
    leading: bool = False  # the first PUT of a burst fires at once; the burst's later ones once after it
    first_at: datetime | None = None  # the first PUT of the burst this pending fire carries
    last_at: datetime | None = None  # the latest PUT it carries


class Options(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a schedule asks beyond one fire at one time; stored as JSON, absent for plain schedules."""

    repeat: Repeat | None = None
    # Each fire's due time is moved later by a deterministic offset in [0, jitter_ms) (its fire id's hash).
    jitter_ms: int = 0
    # Each fire produces ``events`` events, spread over ``window_ms`` after the fire (0: all at once).
    events: int = 1
    window_ms: int = 0
    # Set on the rows of the events a fire produced.
    event: EventOf | None = None
    # The client's throttle policy its events go through (each waits for a token before delivery).
    throttle: str | None = None
    # Set on a durable retry row of a recurring occurrence: the schedule it belongs to. Such a row has an
    # id of its own (two occurrences' retries may come due in the same millisecond, and rows are keyed by
    # due time and id); subscribers, runs and fire ids see the schedule's id.
    retry_of: UUID | None = None
    # The W3C traceparent of the create request (set only when tracing is on): each fire's delivery span
    # links to it (``schema.tracing``).
    traceparent: str | None = None
    # The client's labels (key, value), sorted by key: shown, listed by, carried to every fire's row.
    tags: tuple[tuple[str, str], ...] = ()
    # A recurring schedule is paused after this many fires in a row ended dead-lettered (0: never; None:
    # the client's default, ``ClientSettings.pause_after_failures``).
    pause_after_failures: int | None = None
    # The row delivers one of the client's notifications (``schema.notices``): it never notifies itself.
    notice: bool = False
    # Set on a paused row whose pause has a time or a reason; dropped by the resume.
    pause: PauseNote | None = None
    # A by-key schedule that coalesces bursts of PUTs into one fire.
    debounce: Debounce | None = None
    # Set on a backfill's row (``schema.backfills``): with ``retry_of`` its schedule and ``fire_at`` the
    # occurrence it fires; its fire id ends in ``:backfill`` and its outcome is that occurrence's run.
    backfill: bool = False

    @property
    def batch(self) -> bool:
        """A fire of this schedule is expanded into event rows instead of being delivered itself."""
        return self.event is None and (self.events > 1 or self.window_ms > 0 or self.throttle is not None)

    @property
    def in_runs(self) -> bool:
        """This schedule's fires are kept in the runs table (recurring, expanded, an event's, or a backfill's)."""
        return self.repeat is not None or self.batch or self.event is not None or self.backfill

    @property
    def expansion(self) -> tuple[int, int]:
        """(events, window_ms) of a fire that is expanded into events; (0, 0) for one that is not."""
        return (self.events, self.window_ms) if self.batch else (0, 0)


_options_decoder: msgspec.json.Decoder[Options] = msgspec.json.Decoder(Options)


def encode_options(options: Options) -> str:
    return _encoder.encode(options).decode()


def decode_options(raw: str | bytes) -> Options:
    return _options_decoder.decode(raw)


class Try(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One delivery attempt of a fire, as its row, run and dead letter keep it: its number, when it was
    due (the row's due time, after jitter, window spread, backoff or redrive; an in-memory retry is due
    when it is sent), when it went out, and how it ended (``delivered``, ``retry``: tried again, ``failed``:
    for good), with its error."""

    attempt: int
    due_at: datetime
    sent_at: datetime
    outcome: str
    error: str | None = None

    @property
    def lateness_s(self) -> float:
        """Sent minus due, never below 0."""
        return max(0.0, (self.sent_at - self.due_at).total_seconds())


# The attempts a fire keeps: the first, then the latest (a fire retried for days is not kept whole).
MAX_TRIES = 20
_tries_decoder: msgspec.json.Decoder[tuple[Try, ...]] = msgspec.json.Decoder(tuple[Try, ...])


def add_tries(kept: tuple[Try, ...], new: tuple[Try, ...]) -> tuple[Try, ...]:
    """``kept`` then ``new``, bounded to ``MAX_TRIES``: the first attempt and the latest ones."""
    both = kept + new
    return both if len(both) <= MAX_TRIES else (both[0], *both[len(both) - MAX_TRIES + 1 :])


def encode_tries(tries: tuple[Try, ...]) -> str:
    return _encoder.encode(tries).decode()


def decode_tries(raw: str | bytes | None) -> tuple[Try, ...]:
    """A stored ``tries`` column; empty for none (rows written before attempts were kept)."""
    return _tries_decoder.decode(raw) if raw else ()


class ClientSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a client sets for itself (``PATCH /v1/settings``), stored as JSON in its row: its recurring
    schedules' default for pausing after failed fires (0: never), where its notifications go (none: kept
    in the feed only), and how long its records are kept."""

    pause_after_failures: int = 0
    notify: Callback | None = None
    # How long its records are kept, within the deployment's maxima (0: the deployment's default): runs,
    # dead letters, schedule rows after their fire and notices; and audit records.
    retention_s: int = 0
    audit_retention_s: int = 0
    # Its recurring schedules' missed-fire policy where they name none (``schema.missed``; None: fire_all).
    missed: Missed | None = None


_settings_decoder: msgspec.json.Decoder[ClientSettings] = msgspec.json.Decoder(ClientSettings)


def encode_client_settings(settings: ClientSettings) -> str:
    return _encoder.encode(settings).decode()


def decode_client_settings(raw: str | None) -> ClientSettings:
    return _settings_decoder.decode(raw) if raw else ClientSettings()


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    poller_count: int
    active: bool
    api_key_hash: str
    created_at: datetime
    updated_at: datetime
    # Pollers that may still hold schedules: >= poller_count; it stays up after a decrease until drained.
    poller_span: int = 0
    kafka_topics: frozenset[str] = frozenset()
    resized_at: datetime | None = None
    # The HMAC key of the client's Kafka acks (``poller.acks``); never shown. "" until one is created.
    ack_secret: str = field(default="", repr=False)
    # The key its deliveries are signed with (``whsec_...``, ``schema.signing``); shown once. "" until one
    # is created. After a rotation the previous one stays valid until ``signing_previous_until``.
    signing_secret: str = field(default="", repr=False)
    signing_secret_previous: str = field(default="", repr=False)
    signing_previous_until: datetime | None = None
    settings: ClientSettings = field(default_factory=ClientSettings)

    def __post_init__(self) -> None:
        if self.poller_span < self.poller_count:
            object.__setattr__(self, "poller_span", self.poller_count)

    def signing_secrets(self, now: datetime) -> tuple[str, ...]:
        """The secrets a delivery sent at ``now`` is signed with: the current one, then the previous one
        while it is still valid. Empty before the client has any."""
        if not self.signing_secret:
            return ()
        until = self.signing_previous_until
        if self.signing_secret_previous and until is not None and now < until:
            return (self.signing_secret, self.signing_secret_previous)
        return (self.signing_secret,)


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """An Idempotency-Key as the first request that sent it reserved it: the schedule it creates, a
    digest of that request (method, path, canonical body) and the time it was built at. Keys reserved
    before digests were kept have neither (None)."""

    client_id: str
    key: str
    schedule_id: UUID
    request_digest: str | None
    created_at: datetime | None


@dataclass(frozen=True, slots=True, order=True)
class InstanceKey:
    """One poller instance: the unit of ownership, checkpointing and hash-ring placement."""

    client_id: str
    poller_id: int

    def __str__(self) -> str:
        return f"{self.client_id}/{self.poller_id}"


@dataclass(frozen=True, slots=True)
class Location:
    """Where a schedule row lives: its partition (instance, minute) and clustering (due_at, id)."""

    poller_id: int
    due_at: datetime

    @property
    def minute(self) -> datetime:
        return timing.minute_bucket(self.due_at)


@dataclass(frozen=True, slots=True)
class Schedule:
    client_id: str
    schedule_id: UUID
    location: Location
    fire_at: datetime
    payload: bytes
    callback: Callback
    created_at: datetime
    status: Status = Status.SCHEDULED
    version: int = 1
    attempts: int = 0
    fired_at: datetime | None = None
    last_error: str | None = None
    options: Options | None = None
    # Recurring schedules: which occurrence this row is (1 = the first). 0 for one-time schedules.
    seq: int = 0
    # The attempts of this row's fire so far (carried by its retry and redrive rows), bounded.
    tries: tuple[Try, ...] = ()
    # Delivery only, never stored: what a throttled event's consumer puts in its Kafka ack (``poller.acks``).
    ack_token: str | None = field(default=None, compare=False, repr=False)
    # Delivery only, never stored: the client's signing secrets, current first (``poller.signing``).
    signing_secrets: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def instance(self) -> InstanceKey:
        return InstanceKey(self.client_id, self.location.poller_id)

    @property
    def fire_id(self) -> str:
        backfill = self.options is not None and self.options.backfill
        return timing.fire_id(self.public_id, self.fire_at, backfill=backfill)

    @property
    def public_id(self) -> UUID:
        """The schedule id subscribers see: an event row's or a retry row's is its schedule's."""
        options = self.options
        if options is None:
            return self.schedule_id
        if options.event is not None:
            return options.event.parent
        return options.retry_of if options.retry_of is not None else self.schedule_id

    @property
    def event_id(self) -> str | None:
        """``<fire id>:<index>`` on event rows, None on plain fires."""
        event = self.options.event if self.options is not None else None
        return None if event is None else f"{timing.fire_id(event.parent, self.fire_at)}:{event.index}"

    @property
    def repeat(self) -> Repeat | None:
        return self.options.repeat if self.options is not None else None

    @property
    def pause(self) -> PauseNote | None:
        return self.options.pause if self.options is not None else None

    @property
    def debounce(self) -> Debounce | None:
        return self.options.debounce if self.options is not None else None

    @property
    def rechecked(self) -> bool:
        """Whether the row is read again right before it fires (``poller.fire.Settler.still_wanted``), so
        a client change may land at any time, the API's mutation guard aside: a durable retry of a
        one-time schedule (the rows a client's pointer names; a recurring schedule's occurrences and
        events are kept by the chain's compare-and-set and their parent instead), and a debounced fire."""
        if self.repeat is not None or self.event_id is not None:
            return False
        return self.attempts > 0 or self.debounce is not None

    @property
    def wakes(self) -> bool:
        """A paused row parked at the time its pause ends: a poller takes it when due, to resume it."""
        pause = self.pause
        return self.status is Status.PAUSED and pause is not None and pause.until is not None


def with_pause(options: Options | None, pause: PauseNote | None) -> Options | None:
    """``options`` with ``pause`` set (None: dropped); None when nothing else is left in them."""
    if options is None:
        return None if pause is None else Options(pause=pause)
    changed = msgspec.structs.replace(options, pause=pause)
    return None if changed == Options() else changed


_ONE_MS = timedelta(milliseconds=1)


class Following(NamedTuple):
    """What a chain step writes: the next occurrence's row (None: the timeline ended), and the stretches
    of the timeline the schedule's calendars excluded on the way to it, in order."""

    row: Schedule | None
    excluded: list[cal.Excluded]


def next_occurrence(
    row: Schedule,
    repeat: Repeat,
    after: datetime,
    now: datetime,
    poller_count: int,
    calendars: Sequence[cal.Calendar] = (),
) -> Following:
    """The row of the first occurrence after nominal time ``after`` that none of ``calendars`` excludes
    (``repeat`` is ``row``'s rule), to be written. A row of a poller at or above ``poller_count`` (a
    lowered quota) moves to a poller that stays."""
    nominal, excluded = cal.next_allowed(_recurrence(repeat), after, calendars, fired=row.seq)
    if nominal is None:
        return Following(None, excluded)
    poller_id = row.location.poller_id
    if poller_id >= poller_count:  # leave a draining poller
        poller_id = timing.poller_id_for(row.schedule_id, poller_count)
    jitter_ms = row.options.jitter_ms if row.options is not None else 0
    due = timing.truncate_ms(timing.due_time(nominal + timing.jitter(row.schedule_id, nominal, jitter_ms), now))
    # Catching up, several overdue occurrences are each due "now": the next one's row must not land on
    # this one's key (same due, same id), or writing it overwrites the occurrence being fired.
    due = max(due, row.location.due_at + _ONE_MS)
    following = dataclasses.replace(
        row,
        location=Location(poller_id, due),
        fire_at=nominal,
        seq=row.seq + 1,
        status=Status.SCHEDULED,
        attempts=0,
        fired_at=None,
        last_error=None,
        tries=(),
    )
    return Following(following, excluded)


@functools.lru_cache(maxsize=4096)
def _recurrence(repeat: Repeat) -> rec.Recurrence:
    """The pure recurrence of a stored rule, built once per distinct rule (not per fire)."""
    return repeat.recurrence()


class RowStamp(NamedTuple):
    """What a re-read of a minute needs of a row to tell whether it changed since it was read: its
    clustering key, version, status and attempts (``Store.read_minute_stamps``). A row rewritten in
    place is either moved on a version or changes status or attempts."""

    due_at: datetime
    schedule_id: UUID
    version: int
    status: Status
    attempts: int


@dataclass(frozen=True, slots=True)
class ScheduleRef:
    """The by-id pointer to a schedule's row; ``previous`` is kept while a move is in flight."""

    client_id: str
    schedule_id: UUID
    location: Location
    version: int
    previous: Location | None = None
    # The version of the client's last change (create = 0): versions above it are the pollers' own moves.
    changed_version: int = 0
    # The write timestamp (µs) of the last client change's rows: the next change writes above it.
    write_ts: int | None = None
    # Targets of client changes whose rows never landed, fenced by the next change that lands.
    stale: tuple[Location, ...] = ()


class Chain(enum.Enum):
    """What became of a poller's attempt to move a recurring schedule on to its next occurrence."""

    # The pointer moved from this occurrence (the next one is written, or the timeline ended).
    CHAINED = "chained"
    # An earlier owner (or an earlier try) already chained from this occurrence: fire it, do not chain.
    ALREADY = "already"
    # The client changed or cancelled the schedule after this occurrence was queued: do not fire it.
    CHANGED = "changed"
    # The occurrence must not fire: a calendar excludes it (as it stands when the occurrence is due), or it
    # missed its start deadline and its policy skips it. The pointer moved on as for CHAINED; this one is
    # recorded skipped, never fired.
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Chained:
    """A chain's outcome, and the next occurrence's row as written (CHAINED with a next occurrence, or
    ALREADY when an earlier try of this very chain landed)."""

    outcome: Chain
    following: Schedule | None = None


@dataclass(frozen=True, slots=True)
class FireOutcome:
    """What a poller records for one fire; written in one batch per partition."""

    client_id: str
    schedule_id: UUID
    location: Location
    status: Status
    attempts: int
    fired_at: datetime
    last_error: str | None = None
    # Set for fires kept in a schedule's run history (recurring schedules): the occurrence's nominal time.
    nominal_at: datetime | None = None
    seq: int = 0
    # Set for an event's outcome (with its fire's nominal_at): counted in that fire's run.
    event: EventOf | None = None
    # A fire expanded into events: how many, over what window (kept in its run).
    events: int = 0
    window_ms: int = 0
    # The schedule whose run this is, when the row has an id of its own (a retry row); else schedule_id.
    run_of: UUID | None = None
    # Every attempt of the fire so far, this one's included (bounded: ``add_tries``).
    tries: tuple[Try, ...] = ()
    # Written at this timestamp (µs) instead of the writer's clock: a superseded row's mark, just below
    # the client change that superseded it, so the change's own write of the row wins whenever it lands.
    write_ts: int | None = None
    # The fire was a backfill's (``schema.backfills``): its run says so.
    backfill: bool = False

    @property
    def run_id(self) -> UUID:
        return self.run_of if self.run_of is not None else self.schedule_id


@dataclass(frozen=True, slots=True)
class Run:
    """One fire of a schedule as its history shows it: the nominal time and what became of it."""

    nominal_at: datetime
    status: Status
    attempts: int
    fired_at: datetime | None
    last_error: str | None = None
    seq: int = 0
    # Fires expanded into events: how many, how many were delivered, the last delivery, the window end.
    events: int = 0
    events_done: int = 0
    last_event_at: datetime | None = None
    window_end: datetime | None = None
    # The fire's attempts: the first one's time and lateness are the run's (empty for runs recorded
    # before attempts were kept, and for skipped ones).
    tries: tuple[Try, ...] = ()
    # Fired by a backfill (``schema.backfills``), not by the schedule's own timeline.
    backfill: bool = False


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """At most ``max_in_flight`` events of this policy delivered and not yet released, cluster-wide; an
    event not released within ``release_timeout_s`` is released automatically."""

    client_id: str
    name: str
    max_in_flight: int
    release_timeout_s: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Token:
    """A held throttle slot."""

    client_id: str
    policy: str
    slot: int
    event_id: str
    holder: str
    taken_at: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    instance: InstanceKey
    owner: str | None
    epoch: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    instance: InstanceKey
    minute: datetime
    epoch: int


@dataclass(frozen=True, slots=True)
class SkippedMinute:
    """A minute of an instance a poller closed without firing its rows: why, and how many rows it held."""

    instance: InstanceKey
    minute: datetime
    reason: str
    rows: int


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    address: str
    metrics_port: int
    started_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class HotMark:
    """An instance whose partition for ``minute`` changed inside the poller's look-ahead window."""

    minute: datetime
    instance: InstanceKey
    touched_at: datetime
    write_id: UUID | None = None  # one per write: two writes in one millisecond differ (None: an older writer)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    client_id: str
    schedule_id: UUID
    fire_id: str
    failed_at: datetime
    attempts: int
    last_error: str
    callback: Callback
    payload: bytes
    # Set once the dead letter is redriven (``schema.redrives``): when, and the due time of the new fire.
    redriven_at: datetime | None = None
    redriven_due_at: datetime | None = None
    # Every attempt of the fire (bounded), the last one the failure; empty for letters written before.
    tries: tuple[Try, ...] = ()


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One change a client or the admin made (``GET /v1/audit``, ``/v1/schedules/{id}/audit``): when, by
    whom (``admin``, or ``key:<prefix of the API key's hash>``), the action (``schedule.update``...), its
    target (a schedule id, policy name, client id or dead letter id), the request's fields as JSON text
    (a payload as its size and sha256), the version the change left, and the request id. ``schedule_id``:
    the schedule whose own trail the record is also in."""

    client_id: str
    at: datetime
    audit_id: str
    actor: str
    action: str
    target: str
    changes: str
    request_id: str
    schedule_id: UUID | None = None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class BusinessKey:
    """A client's business key and the one schedule it names (``PUT /v1/schedules/by-key/{key}``),
    pointed at it at ``claimed_at``."""

    client_id: str
    key: str
    schedule_id: UUID
    claimed_at: datetime


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing and the opaque cursor for the next (None at the end)."""

    items: list[Schedule] = field(default_factory=list)
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class ListCursor:
    """Where a listing resumes: after the row (due_at, schedule_id), or at ``due_at`` inclusive when
    ``schedule_id`` is None (a page that ended on its read budget rather than on a row)."""

    due_at: datetime
    schedule_id: UUID | None = None

    def encode(self) -> str:
        raw = f"1:{timing.to_epoch_ms(self.due_at)}:{self.schedule_id.hex if self.schedule_id else ''}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> ListCursor:
        """The cursor a listing handed out; ``InvalidInput`` (field ``cursor``) for anything else."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            version, ms, hex_id = raw.split(":")
            if version != "1" or not ms.isdigit() or len(ms) > 15:
                raise ValueError(raw)
            return cls(timing.from_epoch_ms(int(ms)), UUID(hex=hex_id) if hex_id else None)
        except (ValueError, UnicodeDecodeError):
            raise InvalidInput("cursor is not one this API handed out", field="cursor") from None


# -- bulk actions (issue 28) -------------------------------------------------------------------------------

BULK_ACTIONS = ("cancel", "pause", "resume", "trigger")


class BulkState(enum.StrEnum):
    QUEUED = "queued"  # waiting for a replica to take it
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"  # stopped by its client: what it did stands, the rest is left


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """Which schedules a bulk job acts on: those with ``tag`` (key, value), and, if given, of ``status``,
    due in [``due_from``, ``due_to``), calling ``target`` (a callback URL's host, or a Kafka topic). A
    backfill's (no tag): the occurrences of ``schedule_id`` in [``due_from``, ``due_to``), fired at
    ``rate_per_s``."""

    tag: tuple[str, str] | None
    status: Status | None = None
    due_from: datetime | None = None
    due_to: datetime | None = None
    target: str | None = None
    schedule_id: UUID | None = None
    rate_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class BulkJob:
    """A bulk action and its progress. ``cursor``: where the next page starts (None: at the beginning);
    ``matched``: schedules the filter selected so far; ``changed``: those the action changed; ``unchanged``:
    those already as the action leaves them (cancelled, paused; counted once more after a resume);
    ``failed``: those it could not change, the first few (schedule id, reason) in
    ``failures``. ``owner`` and ``lease_until``: the replica running it, until when."""

    client_id: str
    job_id: UUID
    action: str
    filter: BulkFilter
    dry_run: bool
    state: BulkState
    created_at: datetime
    updated_at: datetime
    actor: str = ""
    request_id: str = ""
    cursor: str | None = None
    matched: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    failures: tuple[tuple[str, str], ...] = ()
    finished_at: datetime | None = None
    owner: str = ""
    lease_until: datetime | None = None
