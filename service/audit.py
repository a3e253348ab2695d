"""The audit trail: who changed what, when, in which request.

Every change a client or the admin makes is recorded once it is confirmed: a schedule created (also each
item of a batch), changed, cancelled, paused, resumed, triggered or put by key; a dead letter redriven; a
throttle policy put or deleted; a client registered, changed, or given a new key or signing secret. A
record holds the time, the actor (``admin``, or ``key:`` and the first 12 hex digits of the API key's
sha256, so a rotation shows which key did what), the action, its target, the version the change left, the
request id, and the request's fields: times, rules and names as sent; a payload as its size and sha256; a
callback's header values and URL query redacted (they may carry credentials).

Records are written after the change is confirmed, so a record never describes a change that did not
happen; a replica that dies between the two loses the record (the change stands), and a record that cannot
be written (the store unavailable) is logged as ``audit_write_failed`` without failing the change. Records
are read per tenant (by day, newest first) and per schedule, and expire after ``TICKD_AUDIT_RETENTION_S``.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol

import msgspec
import structlog
from aiohttp import web

from tickd.schema import notices, timing
from tickd.schema.addresses import redacted
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import AuditRecord, Client, Schedule
from tickd.schema.store import Store
from tickd.service import keys
from tickd.service.errors import Invalid
from tickd.service.validation import to_ms

log = structlog.get_logger("tickd.api")
REQUEST_ID = web.RequestKey("request_id", str)
# Who a change is recorded as made by, when not the caller's key: a bulk job's changes name the key that
# created the job (``service.actions.JobCaller``).
ACTOR = web.RequestKey("actor", str)


class Caller(Protocol):
    """Who asks for a change: an ``aiohttp`` request, or a bulk job's stand-in (``actions.JobCaller``):
    the app, and the request id and actor its records carry."""

    @property
    def app(self) -> web.Application: ...

    def get(self, key: Any, default: Any, /) -> Any: ...


ADMIN = "admin"
CREATE = "schedule.create"
_DAY = timedelta(days=1)
_LAST_MS = time(23, 59, 59, 999_000)
_MS = timedelta(milliseconds=1)
_AUDIT_ID = re.compile(r"[0-9a-f]{32}")
# Where a page stands: the last record shown, as (at, audit_id).
Position = tuple[datetime, str]


def actor(client: Client | None) -> str:
    """``admin`` (None), or the client's current key as ``key:<12 hex of its hash>``."""
    return ADMIN if client is None else f"key:{client.api_key_hash[:12]}"


def _callback(callback: Any) -> Any:
    if not isinstance(callback, dict):
        return callback
    shown = {k: v for k, v in callback.items() if k != "headers"}
    if isinstance(shown.get("url"), str):
        shown["url"] = redacted(shown["url"])  # as an attempt's error names it: no credentials, no query
    if isinstance(callback.get("headers"), dict):
        shown["headers"] = {name: "[redacted]" for name in callback["headers"]}
    return shown


def summary(body: Any) -> dict[str, Any]:
    """What a request's JSON body changes, fit to keep: a payload as its size and sha256, a callback's
    secrets redacted; other fields as sent."""
    if not isinstance(body, dict):
        return {}
    shown: dict[str, Any] = {}
    for name, value in body.items():
        if name == "payload":
            raw = msgspec.json.encode(value)
            shown[name] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
        elif name == "callback":
            shown[name] = _callback(value)
        elif name == "schedules" and isinstance(value, list):
            shown[name] = len(value)
        else:
            shown[name] = value
    return shown


def body_fields(raw: bytes | None) -> dict[str, Any]:
    """``summary`` of a request body already checked by its handler (anything else: no fields)."""
    if not raw:
        return {}
    try:
        return summary(msgspec.json.decode(raw))
    except msgspec.DecodeError:
        return {}


def record(
    request: Caller,
    client_id: str,
    by: Client | None,
    action: str,
    target: str,
    *,
    at: datetime,
    fields: dict[str, Any] | None = None,
    schedule_id: uuid.UUID | None = None,
    version: int | None = None,
) -> AuditRecord:
    return AuditRecord(
        client_id=client_id,
        at=at,
        audit_id=notices.record_id(),
        actor=request.get(ACTOR, "") or actor(by),
        action=action,
        target=target,
        changes=msgspec.json.encode(fields or {}).decode(),
        request_id=request.get(REQUEST_ID, ""),
        schedule_id=schedule_id,
        version=version,
    )


async def write(request: Caller, records: Sequence[AuditRecord]) -> None:
    """Write the records of a confirmed change; a failure is logged, never the change's answer."""
    if not records:
        return
    try:
        await request.app[keys.STORE].record_audit(records)
    except StoreUnavailable as exc:
        log.warning("audit_write_failed", records=len(records), action=records[0].action, error=str(exc))


def cursor_of(rec: AuditRecord) -> str:
    return f"{int(rec.at.timestamp() * 1000)}_{rec.audit_id}"


def parse_cursor(text: str) -> Position:
    ms, _, audit_id = text.partition("_")
    if not ms.isdigit() or len(ms) > 15 or _AUDIT_ID.fullmatch(audit_id) is None:
        raise Invalid("cursor is not one this API handed out", field="cursor")
    try:
        return timing.from_epoch_ms(int(ms)), audit_id
    except (OverflowError, ValueError):
        raise Invalid("cursor is not one this API handed out", field="cursor") from None


DayPage = Callable[[str, date, "Position | None", int], Awaitable[list[AuditRecord]]]


async def client_page(
    read: DayPage, client_id: str, start: datetime, end: datetime, after: tuple[datetime, str] | None, limit: int
) -> tuple[list[AuditRecord], str | None]:
    """Up to ``limit`` of the client's records in [start, end), newest first, past ``after``; and the
    next page's cursor. Reads the range's days from the newest down (31 partitions at most) with ``read``
    (``Store.page_client_audit``, or ``Store.page_notices`` for the client's notifications)."""
    top = after if after is not None else (end - _MS, "~")  # "~" sorts after every hex id
    found: list[AuditRecord] = []
    day = top[0].date()
    while day >= start.date():
        page = await read(client_id, day, _at_most(top, day), limit + 1 - len(found))
        found += [r for r in page if r.at >= start]
        if len(found) > limit:
            return found[:limit], cursor_of(found[limit - 1])
        if page and page[-1].at < start:
            break
        if day == date.min:
            break
        day -= _DAY
    return found, None


def _at_most(top: tuple[datetime, str], day: date) -> tuple[datetime, str]:
    """The read position in ``day``: the cursor, or the end of the day when the cursor is after it."""
    end_of_day = datetime.combine(day, _LAST_MS, top[0].tzinfo)
    return top if top[0] <= end_of_day else (end_of_day, "~")


async def schedule_page(
    store: Store, client_id: str, schedule_id: uuid.UUID, after: tuple[datetime, str] | None, limit: int
) -> tuple[list[AuditRecord], str | None]:
    page = await store.page_schedule_audit(client_id, schedule_id, after, limit + 1)
    if len(page) > limit:
        return page[:limit], cursor_of(page[limit - 1])
    return page, None


async def schedules_changed(
    request: Caller, by: Client, action: str, changes: Iterable[tuple[Schedule, bytes | None]]
) -> None:
    """Record a confirmed change of each schedule by the client's key, with its request body's fields
    (creates only with TICKD_AUDIT_CREATES, the default)."""
    if action == CREATE and not request.app[keys.SETTINGS].audit_creates:
        return
    at = app_now(request.app)
    records = [
        record(
            request,
            s.client_id,
            by,
            action,
            str(s.schedule_id),
            at=at,
            fields=body_fields(raw),
            schedule_id=s.schedule_id,
            version=s.version,
        )
        for s, raw in changes
    ]
    await write(request, records)


async def changed(
    request: Caller, client_id: str, by: Client | None, action: str, target: str, raw: bytes | None = None
) -> None:
    """Record a confirmed change of a policy, a client or a dead letter."""
    await write(
        request, [record(request, client_id, by, action, target, at=app_now(request.app), fields=body_fields(raw))]
    )


async def notify(request: Caller, client: Client, kind: str, schedule: Schedule) -> None:
    """A notice of a change a request made (``schema.notices``, e.g. a resume), for the client's feed and
    target; a failure is logged, never the change's answer."""
    fields = {"version": schedule.version, "actor": actor(client)}
    at = app_now(request.app)
    record = notices.notice(
        client.client_id, kind, str(schedule.schedule_id), at, fields, schedule.schedule_id, request.get(REQUEST_ID, "")
    )
    try:
        await notices.notify(request.app[keys.STORE], client, record)
    except StoreUnavailable as exc:
        log.warning("notice_write_failed", kind=kind, schedule_id=str(schedule.schedule_id), error=str(exc))


def now() -> datetime:
    return to_ms(datetime.now(UTC))


def app_now(app: web.Application) -> datetime:
    """The time by the app's clock (``keys.CLOCK``; the wall clock if it has none), to the ms."""
    clock = app.get(keys.CLOCK)
    return to_ms(clock()) if clock is not None else now()
