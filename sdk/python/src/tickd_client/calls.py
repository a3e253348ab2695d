"""Every API operation as a ``Call``: the request to send and how to read its answer. Both clients send
these; neither builds a request or parses a body itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote

from tickd_client.models import (
    ApiKey,
    AuditRecord,
    BatchItem,
    BulkJob,
    Calendar,
    Client,
    ClientSettings,
    Cluster,
    DeadLetter,
    Debounce,
    HttpCallback,
    KafkaCallback,
    MissedPolicy,
    Notice,
    Occurrence,
    Page,
    Policy,
    Redrive,
    Release,
    Run,
    Schedule,
    SigningSecret,
    Stats,
    decode,
)

T = TypeVar("T")
Item = TypeVar("Item")
Time = datetime | int | str
CallbackSpec = HttpCallback | KafkaCallback | Mapping[str, Any]
WallTime = datetime | str
# A calendar's range: ``(from, to)``, or ``{"from": ..., "to": ...}`` as a ``Calendar`` shows it.
RangeSpec = tuple[WallTime, WallTime] | Mapping[str, WallTime]
_TIME_FIELDS = frozenset({"fire_at", "start_at", "end_at", "after"})


class MissedFields(TypedDict, total=False):
    """A missed-fire policy as the API takes it: ``policy`` ``fire_all`` (every late occurrence fires),
    ``skip`` (one whose first attempt cannot start within ``deadline`` of its due time does not) or
    ``fire_once`` (only the latest of those fires); ``deadline``: ``"90s"``, ``"5m"`` (``<n>s|m|h|d``, at
    most 7 days; default 60 s; not with ``fire_all``)."""

    policy: Literal["fire_all", "skip", "fire_once"]
    deadline: str


# A policy as given, or one as read (``Recurrence.missed``, ``ClientSettings.missed``) to set it again.
MissedSpec = MissedFields | MissedPolicy


class RuleFields(TypedDict, total=False):
    """A recurring schedule's rule (also what ``preview`` takes)."""

    cron: str
    timezone: str
    every: str
    start_at: Time
    end_at: Time
    max_fires: int
    on_gap: Literal["shift", "skip"]
    on_overlap: Literal["first", "last", "both"]
    # Names of your calendars whose exclusions the rule skips; on a change, ``[]`` or None names none.
    calendars: Sequence[str] | None
    # What an occurrence that cannot start in time does (recurring only); on a change, None: your default.
    missed: MissedSpec | None


class ScheduleFields(RuleFields, total=False):
    """A new schedule, as the API's ``POST /v1/schedules`` body; ``callback`` is required."""

    callback: CallbackSpec
    fire_at: Time
    delay_s: float
    payload: Any
    jitter: str
    events: int
    window: str
    throttle: str
    tags: Mapping[str, str]
    pause_after_failures: int


class DebounceFields(TypedDict, total=False):
    """A by-key PUT's debounce as the API takes it (``window_s`` is required): the key's fire goes out
    ``window_s`` seconds (1 to 86400) after the latest PUT, each PUT while it is pending pushing it back,
    never further than ``max_wait_s`` (``window_s`` to 604800; absent: no cap) after the first PUT of the
    burst; ``edge`` ``leading`` also fires the first PUT of a burst at once (default ``trailing``)."""

    window_s: float
    max_wait_s: float
    edge: Literal["trailing", "leading"]


# A debounce as given, or one as read (``Schedule.debounce``) to PUT again.
DebounceSpec = DebounceFields | Debounce


class KeyedFields(ScheduleFields, total=False):
    """A ``PUT /v1/schedules/by-key/{key}`` body: a create's, and ``debounce``, which only a by-key PUT
    takes (then no ``fire_at``, ``delay_s``, ``cron``, ``every``, ``events``, ``window`` or ``throttle``:
    its fire time is the debounce's, and it fires once)."""

    debounce: DebounceSpec


class ScheduleChanges(RuleFields, total=False):
    """A ``PATCH`` of a schedule: any subset; ``throttle=None`` removes the policy, ``calendars=[]`` (or
    None) every calendar, ``missed=None`` its own missed-fire policy (your default applies)."""

    callback: CallbackSpec
    fire_at: Time
    delay_s: float
    payload: Any
    jitter: str
    events: int
    window: str
    throttle: str | None
    tags: Mapping[str, str] | None
    pause_after_failures: int | None


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request. ``repeatable``: sending it twice does no more than sending it once, so it may be
    retried even after it may have reached the server. ``auth``: which credential it needs."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Any = None
    params: dict[str, str | int] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    auth: Literal["client", "admin"] = "client"
    repeatable: bool = True

    def at_cursor(self, cursor: str) -> Call[T]:
        return dataclasses.replace(self, params={**self.params, "cursor": cursor})


def time_value(value: Time) -> str | int:
    """A time as the API takes it: RFC 3339 with an offset (a naive datetime is refused here), epoch
    seconds, or a string passed as given."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime sent to tickd needs a timezone (naive times are ambiguous)")
        return value.isoformat()
    return value


def _json_field(name: str, value: Any) -> Any:
    if name == "callback" and isinstance(value, HttpCallback | KafkaCallback):
        return dataclasses.asdict(value)
    if name == "callback" and isinstance(value, Mapping):
        return dict(value)
    if name in _TIME_FIELDS and value is not None:
        return time_value(value)
    if name == "calendars" and value is not None and not isinstance(value, str):
        return list(value)  # any sequence of names; a lone name goes as given, for the API to refuse
    if name == "missed" and value is not None:
        return missed_value(value)
    if name == "debounce" and value is not None:
        return debounce_value(value)
    return value


def missed_value(value: MissedSpec) -> Any:
    """A missed-fire policy as the API takes it: ``{"policy", "deadline"}`` as given, or a ``MissedPolicy``
    read back (its ``deadline_s`` as ``"<n>s"``). Anything else goes as given, for the API to refuse."""
    if isinstance(value, MissedPolicy):
        deadline = {} if value.deadline_s is None else {"deadline": f"{value.deadline_s}s"}
        return {"policy": value.policy, **deadline}
    if isinstance(value, Mapping):
        return dict(value)
    return value


def debounce_value(value: DebounceSpec) -> Any:
    """A debounce as the API takes it: ``{"window_s", "max_wait_s", "edge"}`` as given, or a ``Debounce``
    read back (its ``window_s``, ``edge`` and ``max_wait_s`` if it has one; not its PUT times). Anything
    else goes as given, for the API to refuse."""
    if isinstance(value, Debounce):
        max_wait = {} if value.max_wait_s is None else {"max_wait_s": value.max_wait_s}
        return {"window_s": value.window_s, **max_wait, "edge": value.edge}
    if isinstance(value, Mapping):
        return dict(value)
    return value


def body_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _json_field(name, value) for name, value in fields.items()}


def _path(*parts: str) -> str:
    return "/v1/" + "/".join(quote(part, safe=":") for part in parts)


def _one(kind: type[T]) -> Callable[[Any], T]:
    return lambda data: decode(kind, data)


def _listed(kind: type[T], key: str) -> Callable[[Any], list[T]]:
    return lambda data: [decode(kind, item) for item in _member(data, key)]


def _paged(kind: type[Item], key: str) -> Callable[[Any], Page[Item]]:
    def parse(data: Any) -> Page[Item]:
        cursor = data.get("next_cursor") if isinstance(data, dict) else None
        return Page([decode(kind, item) for item in _member(data, key)], cursor if isinstance(cursor, str) else None)

    return parse


def _member(data: Any, key: str) -> list[Any]:
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"the answer has no list {key!r}")
    return items


# Clients (admin)


def create_client(client_id: str, poller_count: int, kafka_topics: Iterable[str] = ()) -> Call[Client]:
    body = {"client_id": client_id, "poller_count": poller_count, "kafka_topics": list(kafka_topics)}
    return Call("POST", _path("clients"), _one(Client), body, auth="admin", repeatable=False)


def list_clients() -> Call[list[Client]]:
    return Call("GET", _path("clients"), _listed(Client, "clients"), auth="admin")


def get_client(client_id: str) -> Call[Client]:
    return Call("GET", _path("clients", client_id), _one(Client), auth="admin")


def update_client(
    client_id: str,
    *,
    poller_count: int | None = None,
    active: bool | None = None,
    kafka_topics: Iterable[str] | None = None,
) -> Call[Client]:
    """A PATCH of absolute values: repeating it leaves the client as one did."""
    body: dict[str, Any] = {"poller_count": poller_count, "active": active}
    body = {name: value for name, value in body.items() if value is not None}
    if kafka_topics is not None:
        body["kafka_topics"] = list(kafka_topics)
    return Call("PATCH", _path("clients", client_id), _one(Client), body, auth="admin")


def rotate_key(client_id: str) -> Call[ApiKey]:
    return Call("POST", _path("clients", client_id, "api-keys"), _one(ApiKey), auth="admin", repeatable=False)


def rotate_signing_secret(client_id: str) -> Call[SigningSecret]:
    path = _path("clients", client_id, "signing-secrets")
    return Call("POST", path, _one(SigningSecret), auth="admin", repeatable=False)


def cluster() -> Call[Cluster]:
    return Call("GET", _path("admin", "nodes"), _one(Cluster), auth="admin")


# Schedules


def create_schedule(fields: ScheduleFields, idempotency_key: str | None) -> Call[Schedule]:
    """Repeatable only with a key: the API then answers a repeat with the schedule the first one made."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    body = body_of(fields)
    return Call("POST", _path("schedules"), _one(Schedule), body, headers=headers, repeatable=bool(headers))


def create_schedules(schedules: Iterable[ScheduleFields]) -> Call[list[BatchItem]]:
    """A batch takes no Idempotency-Key, so it is never sent twice once it may have arrived."""
    body = {"schedules": [body_of(s) for s in schedules]}
    return Call("POST", _path("schedules", "batch"), _listed(BatchItem, "results"), body, repeatable=False)


def preview(rule: RuleFields, count: int = 10, after: Time | None = None) -> Call[list[Occurrence]]:
    """Writes nothing, so it is repeatable although it is a POST."""
    body = body_of({**rule, "count": count, **({"after": after} if after is not None else {})})
    return Call("POST", _path("schedules", "preview"), _listed(Occurrence, "occurrences"), body)


def list_schedules(
    start: Time | None,
    end: Time | None,
    *,
    status: str | None = None,
    tag: str | None = None,
    target: str | None = None,
    page_size: int = 100,
) -> Call[Page[Schedule]]:
    """Due in ``[start, end)``; or, with ``tag`` (``key=value``) and neither, every schedule with the tag.
    ``target``: only schedules calling that host (HTTP) or topic (Kafka)."""
    params: dict[str, str | int] = {"limit": page_size}
    if start is not None:
        params["from"] = time_value(start)
    if end is not None:
        params["to"] = time_value(end)
    for name, value in (("status", status), ("tag", tag), ("target", target)):
        if value is not None:
            params[name] = value
    return Call("GET", _path("schedules"), _paged(Schedule, "schedules"), params=params)


def create_bulk_job(
    action: str, filter: Mapping[str, Any], *, dry_run: bool = False, idempotency_key: str | None = None
) -> Call[BulkJob]:
    """Repeatable only with a key: the API then answers a repeat with the job the first one started."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    body = {"action": action, "filter": {k: _filter_value(v) for k, v in filter.items()}, "dry_run": dry_run}
    return Call("POST", _path("bulk-jobs"), _one(BulkJob), body, headers=headers, repeatable=bool(headers))


def bulk_filter(
    tag: str, status: str | None, due_from: Time | None, due_to: Time | None, target: str | None
) -> dict[str, Any]:
    """A bulk job's filter as the API takes it: ``tag``, and the others only if given."""
    wanted: dict[str, Any] = {"tag": tag}
    for name, value in (("status", status), ("from", due_from), ("to", due_to), ("target", target)):
        if value is not None:
            wanted[name] = value
    return wanted


def _filter_value(value: Any) -> Any:
    return time_value(value) if isinstance(value, datetime) else value


def backfill_schedule(
    schedule_id: str, start: Time, end: Time, rate_per_s: float | None, idempotency_key: str | None
) -> Call[BulkJob]:
    """Repeatable only with a key (as a bulk job); without one a repeat starts a second backfill, which
    fires nothing the first fired."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    body: dict[str, Any] = {"from": time_value(start), "to": time_value(end)}
    if rate_per_s is not None:
        body["rate_per_s"] = rate_per_s
    path = _path("schedules", str(schedule_id), "backfill")
    return Call("POST", path, _one(BulkJob), body, headers=headers, repeatable=bool(headers))


def get_bulk_job(job_id: str) -> Call[BulkJob]:
    return Call("GET", _path("bulk-jobs", str(job_id)), _one(BulkJob))


def list_bulk_jobs(*, page_size: int = 100) -> Call[Page[BulkJob]]:
    return Call("GET", _path("bulk-jobs"), _paged(BulkJob, "jobs"), params={"limit": page_size})


def cancel_bulk_job(job_id: str) -> Call[BulkJob]:
    """Stopping a stopped job changes nothing, so it is repeatable."""
    return Call("POST", _path("bulk-jobs", str(job_id), "cancel"), _one(BulkJob))


def get_schedule(schedule_id: str) -> Call[Schedule]:
    return Call("GET", _path("schedules", str(schedule_id)), _one(Schedule))


def audit(start: Time | None = None, end: Time | None = None, *, page_size: int = 100) -> Call[Page[AuditRecord]]:
    """The client's audit trail in [start, end) (default: the last 7 days), newest first."""
    return Call("GET", _path("audit"), _paged(AuditRecord, "records"), params=_range(start, end, page_size))


def notices(start: Time | None = None, end: Time | None = None, *, page_size: int = 100) -> Call[Page[Notice]]:
    """Your notifications in [start, end) (default: the last 7 days), newest first."""
    return Call("GET", _path("notifications"), _paged(Notice, "notices"), params=_range(start, end, page_size))


def _range(start: Time | None, end: Time | None, page_size: int) -> dict[str, str | int]:
    """The query of a listing by time range, newest first (audit trail, notifications)."""
    params: dict[str, str | int] = {"limit": page_size}
    if start is not None:
        params["from"] = time_value(start)
    if end is not None:
        params["to"] = time_value(end)
    return params


def get_settings() -> Call[ClientSettings]:
    return Call("GET", _path("settings"), _one(ClientSettings))


_UNCHANGED: Any = object()


def patch_settings(
    *,
    pause_after_failures: int | None = None,
    notify: Any = _UNCHANGED,
    retention_s: int | None = None,
    audit_retention_s: int | None = None,
    missed: MissedSpec | None = _UNCHANGED,
) -> Call[ClientSettings]:
    """Change your settings; only what is given changes (``notify=None`` removes the target; a retention
    of 0 goes back to the deployment's default; ``missed=None`` the default policy back to ``fire_all``)."""
    given = {
        "pause_after_failures": pause_after_failures,
        "retention_s": retention_s,
        "audit_retention_s": audit_retention_s,
    }
    body: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    if notify is not _UNCHANGED:
        body["notify"] = notify
    if missed is not _UNCHANGED:
        body["missed"] = None if missed is None else missed_value(missed)
    return Call("PATCH", _path("settings"), _one(ClientSettings), body=body)


def schedule_audit(schedule_id: str, *, page_size: int = 100) -> Call[Page[AuditRecord]]:
    path = _path("schedules", str(schedule_id), "audit")
    return Call("GET", path, _paged(AuditRecord, "records"), params={"limit": page_size})


def runs(schedule_id: str, *, page_size: int = 100) -> Call[Page[Run]]:
    return Call("GET", _path("schedules", str(schedule_id), "runs"), _paged(Run, "runs"), params={"limit": page_size})


IfMatch = int | str | None


def precondition(if_match: IfMatch) -> dict[str, str]:
    """The ``If-Match`` header of a conditional change: a version (``Schedule.version``,
    ``Calendar.version``), an ETag as the API answered it (``'"7"'``), or ``"*"`` (any existing one); None:
    unconditional."""
    if if_match is None:
        return {}
    if isinstance(if_match, bool):
        raise TypeError("if_match is a version (int), an ETag or '*'")
    return {"If-Match": f'"{if_match}"' if isinstance(if_match, int) else if_match}


def update_schedule(schedule_id: str, changes: ScheduleChanges, if_match: IfMatch = None) -> Call[Schedule]:
    """Repeatable unless it moves the time by ``delay_s``, which counts from when the API reads it, or is
    conditional (a repeat of one that applied would find the version moved on: 412)."""
    body = body_of(changes)
    path = _path("schedules", str(schedule_id))
    repeatable = "delay_s" not in body and if_match is None
    return Call("PATCH", path, _one(Schedule), body, headers=precondition(if_match), repeatable=repeatable)


def cancel_schedule(schedule_id: str, if_match: IfMatch = None) -> Call[Schedule]:
    """Cancelling a cancelled schedule is 200 (it keeps the version it was cancelled at): repeatable."""
    return Call("DELETE", _path("schedules", str(schedule_id)), _one(Schedule), headers=precondition(if_match))


def pause_schedule(
    schedule_id: str, if_match: IfMatch = None, *, until: Time | None = None, note: str | None = None
) -> Call[Schedule]:
    """A pause; with ``until`` (it resumes by itself then) or ``note`` (shown with the pause), a body that
    becomes the schedule's pause, replacing the one it has; with neither, no body (a paused schedule stays
    as it is). Pausing a paused schedule is 200 with it, and asking for the pause it has changes nothing:
    repeatable although it is a POST, unless conditional (a repeat of one that applied finds the version
    moved on: 412)."""
    path = _path("schedules", str(schedule_id), "pause")
    body = pause_body(until, note)
    return Call("POST", path, _one(Schedule), body, headers=precondition(if_match), repeatable=if_match is None)


def pause_body(until: Time | None, note: str | None) -> dict[str, Any] | None:
    """A pause's body: ``until`` as RFC 3339 (a naive datetime is refused here) or epoch seconds, and
    ``note``, each only if given; None (no body) when neither is."""
    if isinstance(until, bool):
        raise TypeError("until is a datetime with a timezone, epoch seconds or an RFC 3339 string")
    body: dict[str, Any] = {}
    if until is not None:
        body["until"] = time_value(until)
    if note is not None:
        body["note"] = note
    return body or None


def resume_schedule(schedule_id: str, if_match: IfMatch = None) -> Call[Schedule]:
    """Not repeated once sent: a repeat of a resume that went through answers 409 ``not_paused``."""
    path = _path("schedules", str(schedule_id), "resume")
    return Call("POST", path, _one(Schedule), headers=precondition(if_match), repeatable=False)


def trigger_schedule(schedule_id: str, idempotency_key: str | None) -> Call[Schedule]:
    """Repeatable only with a key (as a create): the API answers a repeat with the trigger the first made."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    path = _path("schedules", str(schedule_id), "trigger")
    return Call("POST", path, _one(Schedule), headers=headers, repeatable=bool(headers))


# Schedules by business key


def put_schedule_by_key(key: str, fields: KeyedFields, if_match: IfMatch = None) -> Call[Schedule]:
    """A PUT: the same body again leaves the key's schedule as one did, so it is repeatable; except with
    ``delay_s``, which counts from when the API reads it (a repeat would move the fire and its fire id),
    with ``debounce`` (a repeat is one more PUT of the burst: it pushes the pending fire back again, or,
    after a ``leading`` fire went out, makes a trailing fire of its own), or when conditional (a repeat of
    one that applied finds the version moved on: 412)."""
    body = body_of(fields)
    path = _path("schedules", "by-key", key)
    repeatable = "delay_s" not in body and "debounce" not in body and if_match is None
    return Call("PUT", path, _one(Schedule), body, headers=precondition(if_match), repeatable=repeatable)


def get_schedule_by_key(key: str) -> Call[Schedule]:
    return Call("GET", _path("schedules", "by-key", key), _one(Schedule))


def cancel_schedule_by_key(key: str, if_match: IfMatch = None) -> Call[Schedule]:
    """Cancelling the key's cancelled schedule is 200 with it: repeatable."""
    return Call("DELETE", _path("schedules", "by-key", key), _one(Schedule), headers=precondition(if_match))


# Dead letters


def _letter_filter(
    start: Time | None, end: Time | None, schedule_id: str | None, page_size: int
) -> dict[str, str | int]:
    params: dict[str, str | int] = {"limit": page_size}
    if start is not None:
        params["from"] = time_value(start)
    if end is not None:
        params["to"] = time_value(end)
    if schedule_id is not None:
        params["schedule_id"] = str(schedule_id)
    return params


def _redrive_body(at: Time | None) -> dict[str, Any] | None:
    return None if at is None else {"at": time_value(at)}


def list_dead_letters(
    start: Time | None = None, end: Time | None = None, *, schedule_id: str | None = None, page_size: int = 100
) -> Call[Page[DeadLetter]]:
    params = _letter_filter(start, end, schedule_id, page_size)
    return Call("GET", _path("dead-letters"), _paged(DeadLetter, "dead_letters"), params=params)


def get_dead_letter(dead_letter_id: str) -> Call[DeadLetter]:
    return Call("GET", _path("dead-letters", dead_letter_id), _one(DeadLetter))


def redrive_dead_letter(dead_letter_id: str, at: Time | None = None) -> Call[DeadLetter]:
    """A dead letter is redriven once; a repeat answers 200 with the first redrive's marks: repeatable."""
    path = _path("dead-letters", dead_letter_id, "redrive")
    return Call("POST", path, _one(DeadLetter), _redrive_body(at))


def redrive_dead_letters(
    start: Time | None = None,
    end: Time | None = None,
    *,
    schedule_id: str | None = None,
    at: Time | None = None,
    page_size: int = 100,
) -> Call[Redrive]:
    """One page of the matching dead letters not yet redriven. Repeatable: each is redriven once, and a
    repeat skips those the first one redrove."""
    params = _letter_filter(start, end, schedule_id, page_size)
    return Call("POST", _path("dead-letters", "redrive"), _one(Redrive), _redrive_body(at), params=params)


# Throttle policies and event release


def put_policy(name: str, max_in_flight: int, release_timeout_s: int) -> Call[Policy]:
    body = {"max_in_flight": max_in_flight, "release_timeout_s": release_timeout_s}
    return Call("PUT", _path("throttle-policies", name), _one(Policy), body)


def get_policy(name: str) -> Call[Policy]:
    return Call("GET", _path("throttle-policies", name), _one(Policy))


def list_policies() -> Call[list[Policy]]:
    return Call("GET", _path("throttle-policies"), _listed(Policy, "policies"))


def delete_policy(name: str) -> Call[Policy]:
    """Not repeated once sent: a repeat of a delete that went through answers 404, not the policy."""
    return Call("DELETE", _path("throttle-policies", name), _one(Policy), repeatable=False)


def release_event(event_id: str) -> Call[Release]:
    """A second release answers ``released: false``: repeatable."""
    return Call("POST", _path("events", event_id, "release"), _one(Release))


# Calendars


def _wall_time(value: WallTime) -> str:
    """A local wall time of a calendar (its own zone applies): ``YYYY-MM-DDTHH:MM[:SS]`` as given, or a
    naive datetime (one with a timezone is refused here: the calendar's zone is the one that counts)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ValueError("a calendar's ranges are wall times in its own timezone: give naive datetimes")
        return value.isoformat()
    return value


def _day(value: date | str) -> str:
    if isinstance(value, datetime):
        raise ValueError("a calendar's dates are days: give dates (or YYYY-MM-DD), not datetimes")
    return value.isoformat() if isinstance(value, date) else value


def _range_body(given: RangeSpec) -> dict[str, str]:
    start, end = (given["from"], given["to"]) if isinstance(given, Mapping) else given
    return {"from": _wall_time(start), "to": _wall_time(end)}


def put_calendar(
    name: str,
    *,
    timezone: str | None = None,
    dates: Iterable[date | str] = (),
    ranges: Iterable[RangeSpec] = (),
    weekdays: Iterable[str] = (),
    business_days: bool = False,
    if_match: IfMatch = None,
) -> Call[Calendar]:
    """A PUT of the whole calendar (no ``timezone``: UTC). A repeat leaves the calendar as one did (a
    version more), so it is repeatable, unless conditional (a repeat of one that applied finds the version
    moved on: 412)."""
    body: dict[str, Any] = {} if timezone is None else {"timezone": timezone}
    body["dates"] = [_day(d) for d in dates]
    body["ranges"] = [_range_body(r) for r in ranges]
    body["weekdays"] = list(weekdays)
    body["business_days"] = business_days
    path = _path("calendars", name)
    return Call("PUT", path, _one(Calendar), body, headers=precondition(if_match), repeatable=if_match is None)


def get_calendar(name: str) -> Call[Calendar]:
    return Call("GET", _path("calendars", name), _one(Calendar))


def list_calendars() -> Call[list[Calendar]]:
    return Call("GET", _path("calendars"), _listed(Calendar, "calendars"))


def delete_calendar(name: str, if_match: IfMatch = None) -> Call[Calendar]:
    """Not repeated once sent: a repeat of a delete that went through answers 404, not the calendar."""
    path = _path("calendars", name)
    return Call("DELETE", path, _one(Calendar), headers=precondition(if_match), repeatable=False)


# Delivery statistics


def stats() -> Call[Stats]:
    """The client's delivery statistics over the last 5 minutes, hour and day: a read, so repeatable."""
    return Call("GET", _path("stats"), _one(Stats))


def admin_stats(client_id: str | None = None) -> Call[Stats]:
    """The cluster's delivery statistics (every client together, ``client_id`` None in the answer), or one
    client's (admin token): a read, so repeatable."""
    params: dict[str, str | int] = {} if client_id is None else {"client_id": client_id}
    return Call("GET", _path("admin", "stats"), _one(Stats), params=params, auth="admin")
