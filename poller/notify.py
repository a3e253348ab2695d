"""What a dead letter sets off beyond itself: the client's notice of it (``schema.notices``), and the
auto-pause of a recurring schedule whose fires failed ``pause_after_failures`` times in a row.

"In a row" is read from the schedule's runs: this occurrence ended dead-lettered, and so did each of the
``N - 1`` occurrences before it (a run that succeeded, or was skipped while the schedule was paused,
breaks the streak; a resume starts a new one). The pause is the one a client's ``POST .../pause`` makes
(a new version), written only if the schedule still stands as read: a client's change in between wins,
and an auto-pause lost to a crash before it was written is made by the next failed fire.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from tickd.poller.delivery import DeliveryResult
from tickd.poller.durable import durably
from tickd.poller.metrics import Metrics
from tickd.schema import notices
from tickd.schema.errors import Conflict
from tickd.schema.model import AuditRecord, Client, Schedule, Status
from tickd.schema.store import Store


class FailureNotices:
    """One instance's: called once a fire of its ended dead-lettered."""

    def __init__(self, store: Store, metrics: Metrics, log: FilteringBoundLogger) -> None:
        self._store = store
        self._metrics = metrics
        self._log = log

    async def dead_lettered(self, client: Client, row: Schedule, result: DeliveryResult, at: datetime) -> None:
        if notices.is_notice(row):  # a notification that could not be delivered: its dead letter says so
            return
        fire_id = row.event_id or row.fire_id
        detail = {"fire_id": fire_id, "attempts": result.attempts, "error": result.error or "failed"}
        record = notices.notice(row.client_id, notices.DEAD_LETTERED, fire_id, at, detail, row.public_id)
        await self._notify(client, record)
        threshold = _threshold(client, row)
        if threshold and await self._failed_in_a_row(row, threshold):
            await self._pause(client, row, threshold, at)

    async def _failed_in_a_row(self, row: Schedule, threshold: int) -> bool:
        """Whether the ``threshold - 1`` occurrences before ``row``'s all ended dead-lettered."""
        if threshold == 1:
            return True
        before = await durably(
            self._log,
            "read_runs",
            lambda: self._store.list_runs(row.client_id, row.public_id, row.fire_at, threshold - 1),
            self._metrics,
        )
        return len(before) == threshold - 1 and all(run.status is Status.FAILED for run in before)

    async def _pause(self, client: Client, row: Schedule, threshold: int, at: datetime) -> None:
        schedule_id = row.public_id
        current = await durably(
            self._log, "read_schedule", lambda: self._store.get_schedule(row.client_id, schedule_id), self._metrics
        )
        if current is None or current.status is not Status.SCHEDULED or current.repeat is None:
            return  # cancelled, paused, ended or changed into a one-time schedule meanwhile
        try:
            paused = await durably(
                self._log, "auto_pause", lambda: self._store.pause_schedule(current, at), self._metrics
            )
        except Conflict:
            # A client's change landed in between, or this pause did and its answer was lost (then retried).
            self._log.info("auto_pause_dropped_schedule_changed", schedule_id=str(schedule_id))
            return
        self._log.warning(
            "schedule_auto_paused", client_id=row.client_id, schedule_id=str(schedule_id), failed_in_a_row=threshold
        )
        detail = {"failed_in_a_row": threshold, "fire_id": row.fire_id, "version": paused.version}
        record = notices.notice(row.client_id, notices.AUTO_PAUSED, str(schedule_id), at, detail, schedule_id)
        # A change of the schedule's too: in its audit trail, by tickd, with the version it left.
        change = dataclasses.replace(record, action="schedule.auto_pause", version=paused.version)
        await durably(self._log, "audit", lambda: self._store.record_audit([change]), self._metrics)
        await self._notify(client, record)

    async def _notify(self, client: Client, record: AuditRecord) -> None:
        sent = notices.delivery(client, record)  # made once: a retried write writes the same schedule
        await durably(self._log, "notice", lambda: self._store.record_notice(record), self._metrics)
        if sent is not None:
            await durably(
                self._log, "notice_delivery", lambda: self._store.create_schedule(sent, record.at), self._metrics
            )
        self._metrics.notices.labels(record.action).inc()


def _threshold(client: Client, row: Schedule) -> int:
    """Fires in a row that pause ``row``'s schedule: its own setting, else its client's; 0: never. Only a
    recurring schedule's occurrences count (an event is a part of its fire, not a fire)."""
    options = row.options
    if options is None or options.repeat is None or options.event is not None:
        return 0
    if options.pause_after_failures is not None:
        return options.pause_after_failures
    return client.settings.pause_after_failures
