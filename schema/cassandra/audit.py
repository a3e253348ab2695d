"""The audit trail: each record written to its tenant's day and, for a schedule, to the schedule's own trail;
read newest first, a page at a time (the cursor is the last record's (at, audit_id))."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Sequence
from datetime import UTC, date, datetime
from uuid import UUID

from cassandra.query import UNSET_VALUE

from tickd.schema import aio
from tickd.schema.cassandra.bridge import Part, Row, Write, unset_if_none, utc
from tickd.schema.model import AuditRecord

# Records written at once by one request (a batch create writes one per schedule it made).
AUDIT_WRITES_IN_FLIGHT = 8
# Past any cursor: a page from the newest record on.
_TOP = (datetime(9999, 12, 31, tzinfo=UTC), "")


def _writes(record: AuditRecord, ttl_s: int) -> list[Write]:
    values = {
        "client_id": record.client_id,
        "at": record.at,
        "audit_id": record.audit_id,
        "actor": record.actor,
        "action": record.action,
        "target": record.target,
        "version": record.version if record.version is not None else UNSET_VALUE,
        "changes": record.changes,
        "request_id": record.request_id,
        "ttl": ttl_s,
    }
    day = record.at.astimezone(UTC).date()
    writes: list[Write] = [
        ("insert_client_audit", {**values, "day": day, "schedule_id": unset_if_none(record.schedule_id)})
    ]
    if record.schedule_id is not None:
        writes.append(("insert_schedule_audit", {**values, "schedule_id": record.schedule_id}))
    return writes


def _record(client_id: str, row: Row, schedule_id: UUID | None) -> AuditRecord:
    return AuditRecord(
        client_id,
        utc(row.at),
        row.audit_id,
        row.actor,
        row.action,
        row.target,
        row.changes or "{}",
        row.request_id or "",
        getattr(row, "schedule_id", schedule_id),
        row.version,
    )


class Audit(Part):
    """``schema.store.AuditStore`` on the adapter's connection."""

    async def record_audit(self, records: Sequence[AuditRecord], ttl_s: int) -> None:
        """Each record's rows, one unlogged batch per record (two partitions at most), a few at once."""

        def write(record: AuditRecord) -> Awaitable[None]:
            return self._db.batch(_writes(record, ttl_s), logged=False)

        await aio.gather_limited([functools.partial(write, r) for r in records], AUDIT_WRITES_IN_FLIGHT)

    async def page_client_audit(
        self, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        at, audit_id = before or _TOP
        values = {"client_id": client_id, "day": day, "at": at, "audit_id": audit_id, "max_rows": max_rows}
        return [_record(client_id, row, None) for row in await self._db.rows("page_client_audit", values)]

    async def page_schedule_audit(
        self, client_id: str, schedule_id: UUID, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        at, audit_id = before or _TOP
        values = {
            "client_id": client_id,
            "schedule_id": schedule_id,
            "at": at,
            "audit_id": audit_id,
            "max_rows": max_rows,
        }
        return [_record(client_id, row, schedule_id) for row in await self._db.rows("page_schedule_audit", values)]
