"""The audit trail: each record written to its tenant's day and, for a schedule, to the schedule's own trail;
read newest first, a page at a time (the cursor is the last record's (at, audit_id)). A client's
notifications (``schema.notices``) are records of the same shape in a feed of their own, by day."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Sequence
from datetime import UTC, date, datetime
from uuid import UUID

from tickd.schema import aio
from tickd.schema.cassandra.bridge import Part, Row, Write, fields_of, unset_if_none, utc, write_bytes
from tickd.schema.model import AuditRecord

# Rows per unlogged batch (a few hundred bytes each: well under Cassandra's 50 KiB batch_size_fail_threshold),
# and batches one request writes at once (a batch create writes a record per schedule it made).
AUDIT_BATCH_ROWS = 40
AUDIT_WRITES_IN_FLIGHT = 8
# Past any cursor: a page from the newest record on.
_TOP = (datetime(9999, 12, 31, tzinfo=UTC), "")


def _writes(record: AuditRecord, ttl_s: int) -> list[Write]:
    values = {**fields_of(record), "version": unset_if_none(record.version), "ttl": ttl_s}
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

    async def record_audit(self, records: Sequence[AuditRecord], ttl_s: int | None = None) -> None:
        """The records' rows in unlogged batches of at most ``AUDIT_BATCH_ROWS``, a few at once. A request's
        records share their tenant's partition (client, day), so its tenant rows go together, and its
        schedules' rows (a partition each) apart: a 1,000-item batch create writes 50 batches, not 1,000
        (CI at 8dd3d8d: one write per record outlasted the request's store budget). A batch also stays under
        ``TICKD_BATCH_MAX_BYTES``."""
        rows = [
            write
            for record in records
            for write in _writes(record, ttl_s if ttl_s is not None else self._audit_retention(record.client_id))
        ]
        groups: list[list[Write]] = [[]]
        for row in sorted(rows, key=lambda write: write[0]):  # the tenant's rows, then the schedules'
            group = groups[-1]
            if group and (len(group) >= AUDIT_BATCH_ROWS or write_bytes([*group, row]) > self.settings.batch_max_bytes):
                groups.append(group := [])
            group.append(row)

        def write(group: list[Write]) -> Awaitable[None]:
            return self._db.batch(group, logged=False)

        await aio.gather_limited([functools.partial(write, g) for g in groups if g], AUDIT_WRITES_IN_FLIGHT)

    async def record_notice(self, notice: AuditRecord) -> None:
        """One notice in its client's feed (the client-day row an audit record has, in ``notices``)."""
        _, values = _writes(notice, self._retention(notice.client_id))[0]
        await self._db.write("insert_notice", values)

    async def page_client_audit(
        self, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        return await self._page_day("page_client_audit", client_id, day, before, max_rows)

    async def page_notices(
        self, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        return await self._page_day("page_notices", client_id, day, before, max_rows)

    async def _page_day(
        self, statement: str, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        at, audit_id = before or _TOP
        values = {"client_id": client_id, "day": day, "at": at, "audit_id": audit_id, "max_rows": max_rows}
        return [_record(client_id, row, None) for row in await self._db.rows(statement, values)]

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
