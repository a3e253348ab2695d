"""A timed pause ends by itself. A pause given ``until`` moves the schedule's row to that time, paused
(``Schedule.wakes``); the instance owning that minute takes the row when it comes due, as it takes a fire,
and resumes the schedule as the client's resume would (``schema.pauses``): the missed-fire policy decides
about the occurrences that fell while it was paused, its calendars about the next one.

The resume is a client change made by tickd: a compare-and-set on the schedule's version. A change the
client made meanwhile (a resume, a pause to another time, a cancel) moved the pointer off this row, and
the wake does nothing; a wake repeated after a crash (it landed, the minute was not checkpointed) finds
the row retired and does nothing either. One that landed but whose answer was lost is recognised by the
version it left, as an auto-pause's is (``poller.fire.FailureNotices``).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from tickd.poller.calendars import CalendarBook
from tickd.poller.fire import FireContext, durably, notify_durably
from tickd.schema import notices, pauses
from tickd.schema.errors import Conflict
from tickd.schema.model import Schedule, Status
from tickd.schema.store import Store

_ONE_MS = timedelta(milliseconds=1)
# The audit action of a timed pause's end (the client's own resume records ``schedule.resume``).
RESUME_AT_UNTIL = "schedule.resume_at_until"
ENDED_AT_UNTIL = "schedule.resume_ended"


class Waker:
    """One instance's: resumes the schedules whose timed pause ends in its minutes."""

    def __init__(self, ctx: FireContext, store: Store, calendars: CalendarBook) -> None:
        self._ctx = ctx
        self._store = store
        self._calendars = calendars

    async def wake(self, row: Schedule) -> Schedule | None:
        """Resume the schedule paused as ``row`` (due: its pause's ``until``), unless it changed since.
        Returns the resumed schedule's row (for the plan), None if there is none."""
        ctx, store, log, metrics = self._ctx, self._store, self._ctx.log, self._ctx.metrics
        schedule_id = row.public_id
        found = await durably(log, "read_schedule", lambda: store.get_schedule(row.client_id, schedule_id), metrics)
        # A change that landed after the pause (a resume, another pause, a cancel) left a row at a newer
        # version; the pointer naming an older row is a change that moved it and lost its rows (this wake
        # itself, cut short on an earlier owner: simulation seed 530044), which the resume takes over.
        if found is None or found.version > row.version or (found.location == row.location and not found.wakes):
            log.info("pause_end_dropped_schedule_changed", schedule_id=str(schedule_id))
            return None
        current = row
        # Not before its own row's time: a fire due now is placed at now, and the resumed row must not
        # land on this one's key (the plan holds it as fired: it would never fire).
        client, at = ctx.client(), max(ctx.clock(), row.location.due_at + _ONE_MS)
        names = current.repeat.calendars if current.repeat is not None else ()
        calendars = await durably(log, "read_calendars", lambda: self._calendars.named(row.client_id, names), metrics)
        # As of the pause's end: a wake that comes late (its node was down) leaves what fell due since then
        # to be fired late, as after an outage (its missed-fire policy decides), not skipped as paused.
        pause = current.pause
        assert pause is not None and pause.until is not None
        plan = pauses.resume(current, client, min(pause.until, at), calendars, now=at)
        if plan.skipped:
            runs = plan.skipped
            await durably(log, "add_runs", lambda: store.add_runs(row.client_id, schedule_id, runs), metrics)
        try:
            if plan.resumed is None:  # the rule has nothing left: it ends, as a client's resume ends it
                resumed = plan.resumed
                done = await durably(log, "resume", lambda: store.cancel_schedule(current, at), metrics)
            else:
                resumed = plan.resumed
                done = await durably(log, "resume", lambda: store.resume_schedule(current, resumed, at), metrics)
        except Conflict:
            # The client changed it in between, or this resume landed and its answer was lost (then retried).
            landed = await durably(
                log, "read_schedule", lambda: store.get_schedule(row.client_id, schedule_id), metrics
            )
            wanted = Status.CANCELLED if resumed is None else Status.SCHEDULED
            if landed is None or landed.status is not wanted or landed.version <= current.version:
                log.info("pause_end_dropped_schedule_changed", schedule_id=str(schedule_id))
                return None
            done = landed
        action = ENDED_AT_UNTIL if resumed is None else RESUME_AT_UNTIL
        log.info(
            "schedule_resumed_at_until",
            client_id=row.client_id,
            schedule_id=str(schedule_id),
            until=pause.until.isoformat(),
            ended=resumed is None,
        )
        detail = {"until": pause.until.isoformat(), "version": done.version, "skipped": len(plan.skipped)}
        record = notices.notice(row.client_id, notices.RESUMED, str(schedule_id), at, detail, schedule_id)
        change = dataclasses.replace(record, action=action, version=done.version)
        await durably(log, "audit", lambda: store.record_audit([change]), metrics)
        if resumed is not None:
            await notify_durably(store, log, metrics, client, record)
        return done if done.status is Status.SCHEDULED else None
