"""A client's notifications: what happened to its schedules without a request asking for it.

A notice has the audit record's shape (``AuditRecord``, actor ``tickd``): ``action`` is its kind, ``target``
the schedule (or fire) it is about, ``changes`` its details as JSON. Each is kept in the client's feed
(``GET /v1/notifications``, newest first, ``TICKD_RETENTION_S``) and, when the client set a target
(``PATCH /v1/settings`` ``notify``), also delivered there: as a one-time schedule of the client's, due at
once, so it is signed, retried and dead-lettered like any fire of theirs. Such a row (``Options.notice``)
never gives rise to a notice of its own, nor to an auto-pause.

Written by the poller (auto-paused, dead-lettered) and the API (resumed).
"""

from __future__ import annotations

import secrets
import time
import uuid
from datetime import datetime
from typing import Any

import msgspec

from tickd.schema import timing
from tickd.schema.model import AuditRecord, Client, Location, Options, Schedule
from tickd.schema.store import Store

ACTOR = "tickd"
AUTO_PAUSED = "schedule.auto_paused"
DEAD_LETTERED = "fire.dead_lettered"
RESUMED = "schedule.resumed"
BULK_DONE = "bulk_job.done"  # a bulk job (service.bulk) finished
KINDS = (AUTO_PAUSED, DEAD_LETTERED, RESUMED, BULK_DONE)

_NOTICE = Options(notice=True)
_last_ns = 0


def record_id() -> str:
    """An audit record's or notice's id: 32 hex digits that grow with time in this process (nanoseconds,
    then 16 random digits), so records of one millisecond list in the order they were made (newest first).
    Across processes, ties within a millisecond fall in any order."""
    global _last_ns
    _last_ns = max(time.time_ns(), _last_ns + 1)
    return f"{_last_ns:016x}{secrets.token_hex(8)}"


def notice(
    client_id: str,
    kind: str,
    target: str,
    at: datetime,
    detail: dict[str, Any],
    schedule_id: uuid.UUID | None = None,
    request_id: str = "",
) -> AuditRecord:
    return AuditRecord(
        client_id=client_id,
        at=timing.truncate_ms(at),
        audit_id=record_id(),
        actor=ACTOR,
        action=kind,
        target=target,
        changes=msgspec.json.encode(detail).decode(),
        request_id=request_id,
        schedule_id=schedule_id,
    )


def delivery(client: Client, record: AuditRecord) -> Schedule | None:
    """The one-time schedule that takes ``record`` to the client's notification target; None without one."""
    target = client.settings.notify
    if target is None:
        return None
    body = {
        "notice_id": record.audit_id,
        "kind": record.action,
        "at": record.at.isoformat().replace("+00:00", "Z"),
        "target": record.target,
        "schedule_id": None if record.schedule_id is None else str(record.schedule_id),
        "detail": msgspec.json.decode(record.changes),
    }
    schedule_id = uuid.uuid4()
    location = Location(timing.poller_id_for(schedule_id, client.poller_count), record.at)
    payload = msgspec.json.encode(body)
    return Schedule(client.client_id, schedule_id, location, record.at, payload, target, record.at, options=_NOTICE)


async def notify(store: Store, client: Client, record: AuditRecord) -> None:
    """Keep ``record`` in the client's feed, then send it to the client's target if it has one."""
    await store.record_notice(record)
    sent = delivery(client, record)
    if sent is not None:
        await store.create_schedule(sent, record.at)


def is_notice(row: Schedule) -> bool:
    return row.options is not None and row.options.notice
