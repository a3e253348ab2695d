"""The API's answers as small frozen dataclasses, and the callbacks a schedule can name.

``decode(kind, data)`` builds any of them from the JSON the API sent: fields it does not know are
ignored (a newer API adds fields without breaking an older SDK), missing optional ones take defaults.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class HttpCallback:
    """Deliver each fire as an HTTP request to ``url``."""

    url: str
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0
    type: str = "http"


@dataclass(frozen=True)
class KafkaCallback:
    """Deliver each fire as a record on ``topic`` (granted to the client)."""

    topic: str
    type: str = "kafka"


@dataclass(frozen=True)
class Client:
    client_id: str
    poller_count: int
    poller_span: int
    active: bool
    kafka_topics: list[str]
    created_at: datetime
    updated_at: datetime
    resized_at: datetime | None = None
    api_key: str | None = None  # only in the answer to registration: shown once
    signing_secret: str | None = None  # likewise: the secret callbacks are signed with (verify_webhook)


@dataclass(frozen=True)
class ApiKey:
    client_id: str
    api_key: str


@dataclass(frozen=True)
class SigningSecret:
    """A new signing secret (shown once); the previous one also signs until ``previous_valid_until``."""

    client_id: str
    signing_secret: str
    previous_valid_until: datetime | None = None


@dataclass(frozen=True)
class MissedPolicy:
    """A missed-fire policy: what a recurring schedule does with an occurrence whose first attempt cannot
    start within ``deadline_s`` of its due time (all pollers down, the schedule paused, a backlog).
    ``policy``: ``fire_all`` (every one fires, late, in order; ``deadline_s`` None), ``skip`` (a missed one
    does not fire) or ``fire_once`` (of those missed together, only the latest fires)."""

    policy: str
    deadline_s: int | None = None


@dataclass(frozen=True)
class Recurrence:
    cron: str | None = None
    timezone: str | None = None
    every: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_fires: int | None = None
    on_gap: str | None = None
    on_overlap: str | None = None
    # The calendars whose exclusions the rule skips (``Calendar``), by name; None: it names none.
    calendars: list[str] | None = None
    # Its own missed-fire policy; None: your default applies (``ClientSettings.missed``).
    missed: MissedPolicy | None = None


@dataclass(frozen=True)
class Pause:
    """A paused schedule's pause, when it was paused with a time or a note (``pause_schedule(until=...,
    note=...)``): when it was paused; ``until``, when it resumes by itself (its ``due_at`` until then; None:
    only a resume ends it); ``note``, the text shown with it (None: none)."""

    paused_at: datetime
    until: datetime | None = None
    note: str | None = None


@dataclass(frozen=True)
class Debounce:
    """A by-key schedule's debounce (``put_schedule_by_key(debounce=...)``): its fire goes out ``window_s``
    after the latest PUT of the key, at most ``max_wait_s`` after the first PUT of the burst (None: no
    cap); ``edge``: ``trailing``, or ``leading`` (the first PUT of a burst fired at once).
    ``first_put_at``/``last_put_at``: the first and the latest PUT the pending (or last) fire carries."""

    window_s: float
    edge: str
    max_wait_s: float | None = None
    first_put_at: datetime | None = None
    last_put_at: datetime | None = None


@dataclass(frozen=True)
class Schedule:
    schedule_id: str
    status: str
    fire_at: datetime
    due_at: datetime
    fire_id: str
    attempts: int
    fired_at: datetime | None
    last_error: str | None
    created_at: datetime
    callback: dict[str, Any]
    payload: Any = None
    # The schedule's version (its ETag): pass it as ``if_match`` to change only this version.
    version: int | None = None
    recurrence: Recurrence | None = None
    occurrence: int | None = None
    jitter_s: float | None = None
    events: int | None = None
    window_s: float | None = None
    throttle: str | None = None
    tags: dict[str, str] | None = None
    # Recurring: paused after this many fires in a row dead-lettered (0: never); None: the client's default.
    pause_after_failures: int | None = None
    notice: bool | None = None  # a notification of yours on its way to your notify target
    trigger_of: str | None = None  # a trigger (``trigger_schedule``): the schedule it is an extra fire of
    backfill_of: str | None = None  # a backfill's fire (``backfill_schedule``): the schedule whose occurrence it is
    # A paused schedule's pause, when it was paused with a time or a note; None otherwise (cleared by a resume).
    pause: Pause | None = None
    # A by-key schedule that coalesces bursts of PUTs (``put_schedule_by_key(debounce=...)``); None otherwise.
    debounce: Debounce | None = None


@dataclass(frozen=True)
class BatchItemError:
    code: str
    message: str
    field: str | None
    status: int


@dataclass(frozen=True)
class BatchItem:
    """One schedule of a batch, in request order: created (``schedule_id``) or refused (``error``)."""

    index: int
    schedule_id: str | None = None
    status: str | None = None
    fire_at: datetime | None = None
    error: BatchItemError | None = None


@dataclass(frozen=True)
class Run:
    fire_id: str
    nominal_at: datetime
    status: str
    attempts: int
    fired_at: datetime | None
    lateness_s: float | None
    last_error: str | None
    occurrence: int | None = None
    events: int | None = None
    events_delivered: int | None = None
    last_event_at: datetime | None = None
    completed_in_window: bool | None = None
    # Fired by a backfill (``backfill_schedule``), not the schedule's timeline: its fire id ends in :backfill.
    backfill: bool = False


@dataclass(frozen=True)
class Notice:
    """One notification (``GET /v1/notifications``): ``kind`` is ``schedule.auto_paused``,
    ``fire.dead_lettered`` or ``schedule.resumed``; ``target`` the schedule or fire it is about."""

    notice_id: str
    at: datetime
    kind: str
    target: str
    detail: dict[str, Any]
    schedule_id: str | None = None


@dataclass(frozen=True)
class BulkJob:
    """A bulk job (``POST /v1/bulk-jobs``) and its progress. ``state``: queued, running, done or
    cancelled; ``filter``: ``tag`` and, if given, ``status``, ``from``, ``to``, ``target``; ``matched``:
    schedules the filter selected so far, ``changed`` those the action changed, ``unchanged`` those
    already as it leaves them (every one, in a dry run), ``failed`` those it could not change (the first
    few in ``failures``, each ``{"schedule_id", "reason"}``). A backfill (``backfill_schedule``; action
    ``backfill``) has no filter but ``backfill``: ``schedule_id``, ``from``, ``to``, ``rate_per_s``; its
    ``matched`` counts occurrences, ``changed`` those it fired, and a failure names its ``nominal_at``."""

    job_id: str
    action: str
    filter: dict[str, Any] | None
    dry_run: bool
    state: str
    matched: int
    changed: int
    unchanged: int
    failed: int
    failures: list[dict[str, str]]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    backfill: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("done", "cancelled")


@dataclass(frozen=True)
class ClientSettings:
    """Your own settings: the default of ``pause_after_failures`` for your recurring schedules (0: never),
    the target your notifications are delivered to (None: the feed only), how long your records are
    kept (runs, dead letters, schedules after their fire and notices; audit records), with the most you
    may choose, and the default missed-fire policy of your recurring schedules (``fire_all`` unless set)."""

    pause_after_failures: int
    notify: dict[str, Any] | None
    retention_s: int | None = None
    audit_retention_s: int | None = None
    retention_max_s: int | None = None
    audit_retention_max_s: int | None = None
    missed: MissedPolicy | None = None


@dataclass(frozen=True)
class AuditRecord:
    """One change to a schedule, policy, calendar or client: when, by whom (``admin``, or ``key:`` and 12 hex
    digits of the API key's sha256), the action (``schedule.update``...), its target, the request's fields,
    the version it left (schedules) and the request id."""

    audit_id: str
    at: datetime
    actor: str
    action: str
    target: str
    changes: dict[str, Any]
    request_id: str
    schedule_id: str | None = None
    version: int | None = None


@dataclass(frozen=True)
class Occurrence:
    """One fire time of a previewed rule: in UTC, and on the rule's wall clock. ``excluded_by``: the
    calendar the rule names that skips it, with its version (``"holidays v2"``); None: it fires."""

    utc: datetime
    local: datetime
    timezone: str
    excluded_by: str | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    max_in_flight: int
    release_timeout_s: int
    created_at: datetime
    updated_at: datetime
    in_flight: int | None = None  # only on a single policy's get


@dataclass(frozen=True)
class Calendar:
    """A calendar: the occurrences of the recurring schedules naming it (``calendars=[name]``) that fall,
    on its ``timezone``'s wall clock, on one of its ``dates`` (YYYY-MM-DD), inside one of its ``ranges``
    (each ``{"from", "to"}``: local wall times, ``to`` excluded; overlapping ones merged) or on one of its
    ``weekdays`` (``mon``...``sun``; ``business_days`` shows as ``sat`` and ``sun``) are skipped. Each put
    is a new ``version``, also its ETag: pass it as ``if_match`` to change or delete only that version."""

    name: str
    version: int
    timezone: str
    dates: list[str]
    ranges: list[dict[str, str]]
    weekdays: list[str]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Release:
    event_id: str
    released: bool


@dataclass(frozen=True)
class DeadLetter:
    """A fire that failed for good; ``redriven_at``/``redriven_due_at`` are set once it was redriven."""

    dead_letter_id: str
    schedule_id: str
    fire_id: str
    failed_at: datetime
    attempts: int
    last_error: str
    callback: dict[str, Any]
    payload: Any = None
    redriven_at: datetime | None = None
    redriven_due_at: datetime | None = None


@dataclass(frozen=True)
class RedriveError:
    """A dead letter a redrive of many could not redrive (``code``: ``not_redrivable``, ``schedule_gone``...)."""

    dead_letter_id: str
    code: str
    message: str


@dataclass(frozen=True)
class Redrive:
    """What a redrive of many did: the dead letters it redrove and those it could not."""

    redriven: list[DeadLetter]
    errors: list[RedriveError]
    next_cursor: str | None = None


@dataclass(frozen=True)
class Instance:
    """A poller instance of a client: ``epoch`` of its claim (0: never claimed), ``owner`` the node the claim
    names (None: never claimed or released), ``draining`` at or above the client's poller count."""

    client_id: str
    poller_id: int
    epoch: int
    owner: str | None
    draining: bool


@dataclass(frozen=True)
class Node:
    """A poller node with a live heartbeat, and the instances it has claimed."""

    node_id: str
    address: str
    metrics_port: int
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_s: float
    instances: list[Instance]


@dataclass(frozen=True)
class Cluster:
    """The cluster view (admin): the live nodes, and the instances no live node holds."""

    at: datetime
    nodes: list[Node]
    unowned: list[Instance]


@dataclass(frozen=True)
class StatsWindow:
    """One window of delivery statistics (the last ``window_s`` seconds, in whole minutes): first attempts
    ``fired``, attempts ``delivered``, ``retried`` and ``failed`` for good; lateness (sent minus due) of the
    first attempts as seconds, None when nothing fired (p50/p99: the upper edge of the bucket holding them)."""

    window_s: int
    fired: int
    delivered: int
    retried: int
    failed: int
    lateness_p50_s: float | None = None
    lateness_p99_s: float | None = None
    lateness_max_s: float | None = None


@dataclass(frozen=True)
class Stats:
    """Delivery statistics at ``at``: one window each for the last 5 minutes, hour and day. ``client_id``:
    whose they are; None for the cluster view (``admin_stats()``: every client together)."""

    client_id: str | None
    at: datetime
    windows: list[StatsWindow]

    def window(self, window_s: int) -> StatsWindow:
        """The window of ``window_s`` seconds (300, 3600 or 86400); ``KeyError`` if the answer has none."""
        for found in self.windows:
            if found.window_s == window_s:
                return found
        raise KeyError(window_s)


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def decode(kind: type[T], data: Any) -> T:
    """``data`` (parsed JSON) as ``kind``; raises ``ValueError`` naming the field that does not fit."""
    return typing.cast(T, _convert(kind, data, kind.__name__))


def _convert(kind: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if kind is Any:
        return value
    if origin in (Union, types.UnionType):
        return _union(typing.get_args(kind), value, where)
    if origin is list:
        (item,) = typing.get_args(kind)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(_checked(list, value, where))]
    if origin is dict:
        return dict(_checked(dict, value, where))
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, _checked(dict, value, where), where)
    if kind is datetime:
        return _time(_checked(str, value, where), where)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return _checked(kind, value, where)


def _union(options: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in options:
        return None
    (kind,) = [option for option in options if option is not type(None)]
    return _convert(kind, value, where)


def _dataclass(kind: Any, value: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    args = {name: _convert(hints[name], value[name], f"{where}.{name}") for name in fields if name in value}
    missing = [
        name
        for name, f in fields.items()
        if name not in args and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    return kind(**args)


def _checked(kind: type[T], value: Any, where: str) -> T:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _time(text: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{where}: not an ISO 8601 time: {text!r}") from None
