"""Bulk jobs: cancel, pause, resume or trigger every schedule with a tag (narrowed by status, due range and
target), or redrive their dead letters (those that failed in a range, walked newest first as the listing
does), or only count them (a dry run), in the background, on whichever API replica holds the job.

A job is a row (``schema.cassandra.bulk``): created queued by ``POST /v1/bulk-jobs`` and listed as open;
every replica's ``BulkRunner`` polls the open jobs and takes one whose lease is free or ran out (a
compare-and-set), then walks the tag index (``schema.tagged``) a page at a time, applies the action to
each schedule the filter selects (``service.actions``: the same rules and writes as the schedule's own
endpoint, audited as the job's creator with request id ``bulk:<job id>``), and saves the page's progress
(cursor, counts) under its lease, renewing it. A replica that dies mid-job leaves the job to the next
taker once the lease runs out, from its last saved page: the schedules of the page it was on are acted on
again, which changes nothing (a cancel or pause of one already so, a resume of one not paused, a trigger
under the idempotency key ``bulk:<job id>:<schedule id>``), so each schedule is changed once.

A tenant's jobs on a replica share one rate (``TICKD_BULK_RATE_PER_S`` schedules a second): a job never
crowds out fires or the tenant's own requests. A client cancels a job with ``POST .../cancel``: its
runner stops at its next save (what it did stands).

A backfill (``POST /v1/schedules/{id}/backfill``) is a job of its own kind: it walks the occurrences of one
recurring schedule in a past range, oldest first, and writes each one the schedule's runs do not show sent
as a fire due when it is written (``schema.backfills``), at the job's own rate (and within the tenant's),
so the fires go out in order at that rate and a cancelled job leaves at most the last few written to fire.
Its cursor is the last occurrence handled; ``matched`` counts occurrences, ``changed`` those it fired,
``unchanged`` those left alone (sent already, by the timeline or a backfill; excluded by a calendar; at or
after the schedule's pending occurrence, which the timeline fires)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import socket
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from aiohttp import web

from tickd.schema import backfills, notices, tagged, timing, triggers
from tickd.schema import calendars as cal
from tickd.schema.errors import Conflict, NotFound, StoreUnavailable
from tickd.schema.model import (
    BulkJob,
    BulkState,
    Client,
    DeadLetter,
    IdempotencyKey,
    ListCursor,
    Run,
    Schedule,
    Status,
)
from tickd.schema.store import Store
from tickd.schema.tagged import TagCursor
from tickd.service import actions, audit, dead_letters, idempotency, keys, recurring

log = structlog.get_logger("tickd.api")

# Failures a job keeps (schedule id, reason), besides counting them all.
FAILURES_KEPT = 20
# Index entries one page may read, per schedule it may hold (stale entries cost reads, not pages).
ENTRIES_PER_SCHEDULE = 10
# A change that raced another change of the same schedule is tried again on a fresh read, this often.
_RACE_RETRIES = 3
# What a change ended as.
CHANGED, UNCHANGED, FAILED = "changed", "unchanged", "failed"
_ONE_MS = timedelta(milliseconds=1)
# A backfill saves its progress (and sees a cancel) after about this many seconds of its fires.
_BACKFILL_PAGE_S = 2.0


class Rate:
    """A token bucket per client: ``wait`` returns once the client may act on one more schedule."""

    def __init__(self, per_s: float, burst: float) -> None:
        self.per_s, self.burst = per_s, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # client id: (tokens, when counted)

    async def wait(self, client_id: str) -> None:
        """Take a token now, owing it if there is none, and wait out what is owed. Waiting in a loop until
        a whole token had built up could spin for ever: a sleep of the exact shortfall can leave the count
        a rounding error short of 1, and the next sleep be too short to move a clock of this size (the
        simulation's virtual one stood still)."""
        clock = asyncio.get_running_loop().time()
        tokens, at = self._buckets.get(client_id, (self.burst, clock))
        tokens = min(self.burst, tokens + (clock - at) * self.per_s) - 1
        self._buckets[client_id] = (tokens, clock)
        if tokens < 0:
            await asyncio.sleep(-tokens / self.per_s)


def replica_id() -> str:
    """This API process, as a job's owner."""
    return f"{socket.gethostname()}:{os.getpid()}"


class BulkRunner:
    """Runs the open bulk jobs whose lease this replica takes (at most ``bulk_jobs_parallel`` at once)."""

    def __init__(self, app: web.Application, owner: str | None = None) -> None:
        self._app = app
        self._s = app[keys.SETTINGS]
        self.owner = owner or replica_id()
        self._rate = Rate(self._s.bulk_rate_per_s, max(1.0, self._s.bulk_rate_per_s))
        self._running: dict[tuple[str, object], asyncio.Task[None]] = {}

    def _now(self) -> datetime:
        return audit.app_now(self._app)

    def page_size(self, job: BulkJob) -> int:
        """Items per saved page: small enough that a page at the job's rate ends well inside the lease. A
        backfill's, about two seconds of its fires: a cancel (seen at the next save) stops it that soon."""
        rate = min(self._s.bulk_rate_per_s, job.filter.rate_per_s or self._s.bulk_rate_per_s)
        seconds = _BACKFILL_PAGE_S if job.action == backfills.ACTION else self._s.bulk_lease_s / 3
        return max(1, min(self._s.bulk_page, int(rate * min(seconds, self._s.bulk_lease_s / 3))))

    async def run(self) -> None:
        """Poll the open jobs until cancelled; a store hiccup is logged and the next poll tries again."""
        try:
            while True:
                try:
                    await self.poll()
                except StoreUnavailable as exc:
                    log.warning("bulk_poll_failed", error=str(exc))
                await asyncio.sleep(self._s.bulk_poll_s)
        finally:
            for task in self._running.values():
                task.cancel()
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def poll(self) -> None:
        """Take the open jobs free to take, while this replica has room for more."""
        store = self._app[keys.STORE]
        for client_id, job_id in await store.open_bulk_jobs(1000):
            if len(self._running) >= self._s.bulk_jobs_parallel:
                return
            if (client_id, job_id) in self._running:
                continue
            job = await store.get_bulk_job(client_id, job_id)
            if job is None:
                # Not stored yet (its create's write is on its way: simulation seed 500082, where dropping
                # the entry here left the job never run), or never (its create failed): the entry expires
                # with the job it lists.
                continue
            if job.state in (BulkState.DONE, BulkState.CANCELLED):
                await store.close_bulk_job(client_id, job_id)  # finished, and not unlisted yet
                continue
            at = self._now()
            if job.owner and job.owner != self.owner and job.lease_until is not None and job.lease_until > at:
                continue  # another replica runs it
            taken = await store.take_bulk_job(job, self.owner, at + timedelta(seconds=self._s.bulk_lease_s), at)
            if taken is None:
                continue
            log.info("bulk_job_taken", client_id=client_id, job_id=str(job_id), cursor=taken.cursor, previous=job.owner)
            task = asyncio.create_task(self._run_logged(taken))
            self._running[(client_id, job_id)] = task
            task.add_done_callback(functools.partial(self._forget, (client_id, job_id)))

    def _forget(self, key: tuple[str, object], _: asyncio.Task[None]) -> None:
        self._running.pop(key, None)

    async def _run_logged(self, job: BulkJob) -> None:
        try:
            await self.run_job(job)
        except StoreUnavailable as exc:  # the lease runs out and a replica takes it on from the last page
            log.warning("bulk_job_interrupted", client_id=job.client_id, job_id=str(job.job_id), error=str(exc))
        except Exception:
            log.exception("bulk_job_crashed", client_id=job.client_id, job_id=str(job.job_id))

    async def run_job(self, job: BulkJob) -> BulkJob:
        """Run ``job`` (its lease held) page by page until done, cancelled or taken over; the job as saved last."""
        store = self._app[keys.STORE]
        client = await store.get_client(job.client_id)
        caller = actions.JobCaller(self._app, f"bulk:{job.job_id}", job.actor)
        cursor = job.cursor
        pace = Rate(job.filter.rate_per_s, 1.0) if job.filter.rate_per_s else None
        while True:
            size = self.page_size(job)
            # A page's calendars are read once (a backfill's occurrences all check the same ones).
            work = recurring.RuleWork(self._s.request_scan_steps, job.client_id)
            found: list[Schedule] | list[DeadLetter] | list[datetime]
            if job.action == "redrive":
                found, cursor = await self._letters(job, cursor, size)
            elif job.action == backfills.ACTION:
                found, cursor = await self._occurrences(job, client, cursor, size)
            else:
                found, cursor = await self._schedules(job, cursor, size)
            counts = {CHANGED: 0, UNCHANGED: 0, FAILED: 0}
            failures = list(job.failures)
            for item in found:
                if isinstance(item, datetime):
                    outcome, reason = await self._backfill(caller, client, job, item, pace, work)
                    subject = item.isoformat()
                else:
                    await self._rate.wait(job.client_id)
                    if isinstance(item, DeadLetter):
                        outcome, reason = await self._redrive(caller, client, job, item)
                    else:
                        outcome, reason = await self._apply(caller, client, job, item)
                    subject = str(item.schedule_id)
                counts[outcome] += 1
                if reason and len(failures) < FAILURES_KEPT:
                    failures.append((subject, reason))
            at = self._now()
            done = cursor is None
            saved = dataclasses.replace(
                job,
                cursor=cursor if cursor is not None else job.cursor,
                matched=job.matched + len(found),
                changed=job.changed + counts[CHANGED],
                unchanged=job.unchanged + counts[UNCHANGED],
                failed=job.failed + counts[FAILED],
                failures=tuple(failures),
                updated_at=at,
                lease_until=at + timedelta(seconds=self._s.bulk_lease_s),
                state=BulkState.DONE if done else BulkState.RUNNING,
                finished_at=at if done else None,
            )
            if not await store.save_bulk_job(saved, BulkState.RUNNING):
                log.info(
                    "bulk_job_stopped", client_id=job.client_id, job_id=str(job.job_id), reason="cancelled_or_taken"
                )
                return job
            job = saved
            if done:
                log.info(
                    "bulk_job_done",
                    client_id=job.client_id,
                    job_id=str(job.job_id),
                    action=job.action,
                    matched=job.matched,
                    changed=job.changed,
                    failed=job.failed,
                )
                await self._notify_done(client, job)
                return job

    async def _occurrences(
        self, job: BulkJob, client: Client | None, cursor: str | None, size: int
    ) -> tuple[list[datetime], str | None]:
        """A backfill's page: the next ``size`` occurrences of its schedule's rule in its range, after the
        last one handled (``cursor``, epoch ms); the next page's cursor (None: the range is done). A schedule
        gone or no longer recurring ends the job (each occurrence it meets then fails, naming why)."""
        f = job.filter
        assert f.schedule_id is not None and f.due_from is not None and f.due_to is not None
        start = timing.from_epoch_ms(int(cursor)) + _ONE_MS if cursor else f.due_from
        left = self._s.backfill_max_fires - job.matched
        parent = await self._app[keys.STORE].get_schedule(job.client_id, f.schedule_id) if client else None
        if left <= 0 or start >= f.due_to:
            return [], None
        if parent is None or parent.repeat is None:
            return [start], None  # the one occurrence handled next fails, saying why; the job ends
        found = backfills.occurrences(parent.repeat, start, f.due_to, min(size, left))
        page = found[: min(size, left)]
        more = len(found) > len(page) and len(page) < left
        return page, (str(timing.to_epoch_ms(page[-1])) if more else None)

    async def _backfill(
        self,
        caller: actions.JobCaller,
        client: Client | None,
        job: BulkJob,
        nominal: datetime,
        pace: Rate | None,
        work: recurring.RuleWork,
    ) -> tuple[str, str | None]:
        """Fire one occurrence for a backfill, unless it was sent (by the timeline or a backfill), a calendar
        excludes it, or it is the timeline's to fire: what it ended as."""
        store, f = self._app[keys.STORE], job.filter
        assert f.schedule_id is not None
        if client is None or not client.active:
            return FAILED, "client_inactive" if client is not None else "client_gone"
        parent = await store.get_schedule(job.client_id, f.schedule_id)
        if parent is None or parent.repeat is None:
            return FAILED, "gone"
        if parent.status is Status.CANCELLED:
            return FAILED, "already_cancelled"
        if nominal >= parent.fire_at:
            return UNCHANGED, None  # the pending occurrence, or later: the timeline's to fire (or skip)
        named = await recurring.named_calendars(store, job.client_id, parent.repeat.calendars, work, missing_ok=True)
        if cal.excluded_by(named, nominal) is not None:
            return UNCHANGED, None
        if not backfills.wanted(await _run_at(store, parent, nominal), nominal, parent.created_at):
            return UNCHANGED, None
        if pace is not None:
            await pace.wait(job.client_id)
        await self._rate.wait(job.client_id)
        at = self._now()
        row_id = backfills.backfill_id(parent.schedule_id, nominal)
        key = backfills.reservation_key(parent.schedule_id, nominal)
        reservation = IdempotencyKey(job.client_id, key, row_id, None, at)
        bound = await self._unwritten(reservation)
        if bound is None:  # another backfill, or this one before a takeover, wrote it
            return UNCHANGED, None
        if bound is not reservation:
            # Its write never landed: written now, due now (a row due long ago could land in a minute its
            # poller has closed). The same id and fire id: at worst a subscriber sees the fire twice.
            at = self._now()
        row = backfills.backfill_row(client, parent, nominal, at)
        await actions.confirmed_change(caller, at, [row.location.due_at], None, store.create_schedule(row, at))
        return CHANGED, None

    async def _schedules(self, job: BulkJob, cursor: str | None, size: int) -> tuple[list[Schedule], str | None]:
        """A page of the schedules the job's filter selects, from ``cursor``; the next page's cursor."""
        found, after = await tagged.page(
            self._app[keys.STORE],
            job.client_id,
            job.filter,
            TagCursor.decode(cursor) if cursor else None,
            size,
            size * ENTRIES_PER_SCHEDULE,
        )
        return found, after.encode() if after is not None else None

    async def _letters(self, job: BulkJob, cursor: str | None, size: int) -> tuple[list[DeadLetter], str | None]:
        """A redrive's page: the dead letters not yet redriven that failed in the filter's range (newest
        first), of schedules the rest of the filter selects as they are now; the next page's cursor."""
        store, f = self._app[keys.STORE], job.filter
        assert f.due_from is not None and f.due_to is not None  # fixed when the job was made
        after = ListCursor.decode(cursor) if cursor else None
        wanted = dead_letters.Filter(f.due_from, f.due_to, None, after, unredriven=True)
        letters, after_text = await dead_letters.page(store, job.client_id, wanted, size)
        selects = dataclasses.replace(f, due_from=None, due_to=None)  # the range was the failures'
        owners: dict[UUID, Schedule | None] = {}
        for letter in letters:
            if letter.schedule_id not in owners:
                owners[letter.schedule_id] = await store.get_schedule(job.client_id, letter.schedule_id)
        found = [
            letter
            for letter in letters
            if (owner := owners[letter.schedule_id]) is not None and tagged.selects(selects, owner)
        ]
        return found, after_text

    async def _redrive(
        self, caller: actions.JobCaller, client: Client | None, job: BulkJob, letter: DeadLetter
    ) -> tuple[str, str | None]:
        """Redrive one dead letter, due now: changed, or unchanged if an earlier run of the job (before a
        takeover) or anyone else redrove it already."""
        if job.dry_run:
            return UNCHANGED, None
        if client is None or not client.active:
            return FAILED, "client_inactive" if client is not None else "client_gone"
        at = self._now()
        try:
            # Its own reading of the clock for both: a second reading inside could differ by a
            # millisecond, and a letter this job redrove would count as one redriven before.
            marked = await actions.redrive(caller, client, letter, at, at)
        except NotFound:
            return FAILED, "gone"
        except Conflict as exc:
            return FAILED, exc.code
        return (CHANGED if marked.redriven_at == at else UNCHANGED), None

    async def _apply(
        self, caller: actions.JobCaller, client: Client | None, job: BulkJob, schedule: Schedule
    ) -> tuple[str, str | None]:
        """Act on one schedule: (what it ended as, the failure's reason if it failed)."""
        if job.dry_run:
            return UNCHANGED, None
        if client is None or (job.action == "trigger" and not client.active):
            return FAILED, "client_inactive" if client is not None else "client_gone"
        current: Schedule | None = schedule
        for _ in range(_RACE_RETRIES):
            if current is None:
                return FAILED, "gone"
            try:
                return await self._change(caller, client, job, current)
            except NotFound:
                return FAILED, "gone"
            except Conflict as exc:
                if exc.code != Conflict.code:  # a rule refused it (fire_imminent, already_fired ...)
                    return FAILED, exc.code
            current = await self._app[keys.STORE].get_schedule(client.client_id, schedule.schedule_id)
        return FAILED, "changed_concurrently"

    async def _change(
        self, caller: actions.JobCaller, client: Client, job: BulkJob, current: Schedule
    ) -> tuple[str, None]:
        action = job.action
        if action == "cancel":
            if current.status is Status.CANCELLED:
                return UNCHANGED, None
            await actions.cancel(caller, client, current)
        elif action == "pause":
            if current.status is Status.PAUSED:
                return UNCHANGED, None
            await actions.pause(caller, client, current)
        elif action == "resume":
            if current.status is not Status.PAUSED:
                return UNCHANGED, None
            await actions.resume(caller, client, current)
        elif action == "trigger":
            if current.status is Status.CANCELLED:
                return UNCHANGED, None
            if not await self._trigger(caller, client, job, current):
                return UNCHANGED, None
        else:
            raise AssertionError(f"unknown bulk action {action!r}")
        return CHANGED, None

    async def _unwritten(self, reservation: IdempotencyKey) -> IdempotencyKey | None:
        """Reserve ``reservation``'s key for a write of the schedule it names: the reservation to write
        under (this one, or an earlier writer's whose write never landed), or None when an earlier
        writer's write is stored. An earlier reservation's write may still be in flight: it is waited out
        (``TICKD_IDEMPOTENCY_TAKEOVER_S`` from when it was made) before it is taken for never landed."""
        store = self._app[keys.STORE]
        bound = await store.reserve_idempotency_key(reservation)
        if bound is reservation:
            return bound
        if await idempotency.written(store, bound, 0.0) is not None:
            return None
        takeover_s, at = self._s.idempotency_takeover_s, reservation.created_at or self._now()
        if not idempotency.abandoned(bound, at, takeover_s) and bound.created_at is not None:
            await asyncio.sleep(takeover_s - (at - bound.created_at).total_seconds())
            if await idempotency.written(store, bound, 0.0) is not None:
                return None
        return bound

    async def _trigger(self, caller: actions.JobCaller, client: Client, job: BulkJob, parent: Schedule) -> bool:
        """Trigger ``parent`` once for this job; False if the job already did (before a takeover)."""
        at = self._now()
        key = f"bulk:{job.job_id}:{parent.schedule_id}"
        reservation = IdempotencyKey(client.client_id, key, triggers.trigger_id(parent.schedule_id, at), None, at)
        bound = await self._unwritten(reservation)
        if bound is None:  # an earlier run of this job wrote it
            return False
        at = bound.created_at or at  # the first attempt's trigger, rebuilt (the same id) if it was another's
        await actions.write_trigger(caller, client, parent, at)
        return True

    async def _notify_done(self, client: Client | None, job: BulkJob) -> None:
        if client is None:
            return
        detail = {
            "job_id": str(job.job_id),
            "action": job.action,
            "dry_run": job.dry_run,
            **({"schedule_id": str(job.filter.schedule_id)} if job.filter.schedule_id is not None else {}),
            "matched": job.matched,
            "changed": job.changed,
            "unchanged": job.unchanged,
            "failed": job.failed,
        }
        record = notices.notice(
            client.client_id, notices.BULK_DONE, str(job.job_id), self._now(), detail, None, job.request_id
        )
        try:
            await notices.notify(self._app[keys.STORE], client, record)
        except StoreUnavailable as exc:
            log.warning("notice_write_failed", kind=notices.BULK_DONE, job_id=str(job.job_id), error=str(exc))


async def _run_at(store: Store, parent: Schedule, nominal: datetime) -> Run | None:
    """The run of ``parent``'s occurrence at ``nominal``, if its runs keep one."""
    found = await store.list_runs(parent.client_id, parent.schedule_id, nominal + _ONE_MS, 1)
    return found[0] if found and found[0].nominal_at == nominal else None
