"""``AsyncTickd``: ``Tickd``'s surface, awaited (list methods are async iterators); the same ``Call``s
and the same shared core, sent with ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterable
from datetime import date
from typing import Any, Self, TypeVar, Unpack

import httpx

from tickd_client import calls
from tickd_client._core import DEFAULT_URL, Core, Settings, env_settings, http_options, transport_error
from tickd_client.calls import Call, KeyedFields, RangeSpec, RuleFields, ScheduleChanges, ScheduleFields, Time
from tickd_client.errors import TickdError
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
    Notice,
    Occurrence,
    Page,
    Policy,
    Redrive,
    RedriveError,
    Release,
    Run,
    Schedule,
    SigningSecret,
    Stats,
)
from tickd_client.retry import RetryPolicy

T = TypeVar("T")


class AsyncTickd:
    """The asyncio client of one tickd API (see ``Tickd``); ``async with`` it, or ``await aclose()``.
    ``http``: an ``httpx.AsyncClient`` of your own whose ``base_url`` is the API; the client closes it."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        admin_token: str | None = None,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        settings = Settings(url, api_key, admin_token, timeout_s, retry or RetryPolicy())
        self._core = Core(settings)
        self._http = http or httpx.AsyncClient(**http_options(settings))

    @classmethod
    def from_env(cls, **given: Any) -> Self:
        """Settings from ``TICKD_URL``, ``TICKD_API_KEY``, ``TICKD_ADMIN_TOKEN``; keyword arguments win."""
        return cls(**env_settings(**given))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send ``call``, retrying as the retry policy and the call's safety allow."""
        for attempt in itertools.count(1):
            try:
                return self._core.result(call, await self._http.request(**self._core.request(call)))
            except httpx.TransportError as exc:
                error = transport_error(exc)
            except TickdError as exc:
                error = exc
            wait_s = self._core.retry_delay(call, attempt, error)
            if wait_s is None:
                raise error
            await asyncio.sleep(wait_s)
        raise AssertionError("unreachable")

    async def _pages(self, call: Call[Page[T]]) -> AsyncIterator[T]:
        while True:
            page = await self.send(call)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            call = call.at_cursor(page.next_cursor)

    # Clients (admin token)

    async def create_client(self, client_id: str, poller_count: int, kafka_topics: Iterable[str] = ()) -> Client:
        return await self.send(calls.create_client(client_id, poller_count, kafka_topics))

    async def list_clients(self) -> list[Client]:
        return await self.send(calls.list_clients())

    async def get_client(self, client_id: str) -> Client:
        return await self.send(calls.get_client(client_id))

    async def update_client(
        self,
        client_id: str,
        *,
        poller_count: int | None = None,
        active: bool | None = None,
        kafka_topics: Iterable[str] | None = None,
    ) -> Client:
        return await self.send(
            calls.update_client(client_id, poller_count=poller_count, active=active, kafka_topics=kafka_topics)
        )

    async def resize_client(self, client_id: str, poller_count: int) -> Client:
        return await self.update_client(client_id, poller_count=poller_count)

    async def deactivate_client(self, client_id: str) -> Client:
        return await self.update_client(client_id, active=False)

    async def activate_client(self, client_id: str) -> Client:
        return await self.update_client(client_id, active=True)

    async def rotate_key(self, client_id: str) -> ApiKey:
        return await self.send(calls.rotate_key(client_id))

    async def rotate_signing_secret(self, client_id: str) -> SigningSecret:
        """A new secret for signed callbacks; the old one keeps signing for the API's overlap."""
        return await self.send(calls.rotate_signing_secret(client_id))

    async def cluster(self) -> Cluster:
        """The live poller nodes with the instances each has claimed, and the instances none holds."""
        return await self.send(calls.cluster())

    async def admin_stats(self, client_id: str | None = None) -> Stats:
        """Delivery statistics over the last 5 minutes, hour and day for every client together
        (``client_id`` None in the answer), or for one client's when ``client_id`` is given."""
        return await self.send(calls.admin_stats(client_id))

    # Schedules (API key)

    async def create_schedule(
        self, *, idempotency_key: str | None = None, **fields: Unpack[ScheduleFields]
    ) -> Schedule:
        return await self.send(self._core.schedule_call(fields, idempotency_key))

    async def create_schedules(self, schedules: Iterable[ScheduleFields]) -> list[BatchItem]:
        return await self.send(calls.create_schedules(schedules))

    async def preview(
        self, *, count: int = 10, after: Time | None = None, **rule: Unpack[RuleFields]
    ) -> list[Occurrence]:
        return await self.send(calls.preview(rule, count, after))

    def list_schedules(
        self,
        start: Time | None = None,
        end: Time | None = None,
        *,
        status: str | None = None,
        tag: str | None = None,
        target: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Schedule]:
        """Every schedule due in ``[start, end)``, page after page (pages can be short; this follows them);
        or, with ``tag`` (``key=value``) and no range, every schedule with the tag, whatever its due time.
        ``status`` and ``target`` (a callback's host, or a Kafka topic) narrow either."""
        call = calls.list_schedules(start, end, status=status, tag=tag, target=target, page_size=page_size)
        return self._pages(call)

    async def create_bulk_job(
        self,
        action: str,
        *,
        tag: str,
        status: str | None = None,
        due_from: Time | None = None,
        due_to: Time | None = None,
        target: str | None = None,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> BulkJob:
        """Start ``action`` (cancel, pause, resume, trigger) on every schedule with ``tag`` (narrowed by
        ``status``, due range and ``target``), in the background; ``dry_run`` only counts them. ``redrive``
        redrives their dead letters not yet redriven, ``due_from``/``due_to`` being when the fires failed
        (default the last 7 days). Follow it with ``get_bulk_job`` (or ``wait_bulk_job``)."""
        wanted = calls.bulk_filter(tag, status, due_from, due_to, target)
        return await self.send(calls.create_bulk_job(action, wanted, dry_run=dry_run, idempotency_key=idempotency_key))

    async def backfill_schedule(
        self,
        schedule_id: str,
        *,
        start: Time,
        end: Time,
        rate_per_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> BulkJob:
        """Fire each occurrence of a recurring schedule in [``start``, ``end``) (``end`` no later than now)
        once, oldest first, ``rate_per_s`` a second (default the server's), in the background: a bulk job
        of action ``backfill`` (follow it with ``wait_bulk_job``, stop it with ``cancel_bulk_job``).
        Occurrences its runs show sent, by its timeline or an earlier backfill, are left alone; each fire
        has a fire id of its own (``<schedule_id>:<nominal ms>:backfill``) and is its occurrence's run."""
        return await self.send(calls.backfill_schedule(schedule_id, start, end, rate_per_s, idempotency_key))

    async def get_bulk_job(self, job_id: str) -> BulkJob:
        return await self.send(calls.get_bulk_job(job_id))

    def list_bulk_jobs(self, *, page_size: int = 100) -> AsyncIterator[BulkJob]:
        """Your bulk jobs, newest first, page after page."""
        return self._pages(calls.list_bulk_jobs(page_size=page_size))

    async def cancel_bulk_job(self, job_id: str) -> BulkJob:
        """Stop a bulk job: what it did stands, the rest is left."""
        return await self.send(calls.cancel_bulk_job(job_id))

    async def wait_bulk_job(self, job_id: str, *, poll_s: float = 1.0, timeout_s: float = 3600.0) -> BulkJob:
        """The job once it is done or cancelled; ``TimeoutError`` if it is not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.get_bulk_job(job_id)
            if job.finished:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"bulk job {job_id} not finished within {timeout_s:g} s (it is {job.state})")
            await asyncio.sleep(poll_s)

    async def get_schedule(self, schedule_id: str) -> Schedule:
        return await self.send(calls.get_schedule(schedule_id))

    def audit(
        self, start: calls.Time | None = None, end: calls.Time | None = None, *, page_size: int = 100
    ) -> AsyncIterator[AuditRecord]:
        """The client's audit trail (every change by its key or the admin), newest first, page after page."""
        return self._pages(calls.audit(start, end, page_size=page_size))

    def notices(
        self, start: calls.Time | None = None, end: calls.Time | None = None, *, page_size: int = 100
    ) -> AsyncIterator[Notice]:
        """Your notifications (auto-pauses, dead letters, resumes), newest first, page after page."""
        return self._pages(calls.notices(start, end, page_size=page_size))

    async def get_settings(self) -> ClientSettings:
        """Your own settings: ``pause_after_failures`` and ``missed`` (your recurring schedules' defaults),
        ``notify`` and the retentions."""
        return await self.send(calls.get_settings())

    async def patch_settings(
        self,
        *,
        pause_after_failures: int | None = None,
        notify: Any = calls._UNCHANGED,
        retention_s: int | None = None,
        audit_retention_s: int | None = None,
        missed: calls.MissedSpec | None = calls._UNCHANGED,
    ) -> ClientSettings:
        """Change your settings: ``pause_after_failures`` (0: never), ``notify`` (a callback dict, e.g.
        ``{"type": "http", "url": ...}``; None removes it), ``retention_s`` and ``audit_retention_s``
        (seconds; 0: the deployment's default), ``missed`` (your recurring schedules' default missed-fire
        policy, e.g. ``{"policy": "skip", "deadline": "5m"}``; None: back to ``fire_all``). Only what is
        given changes."""
        call = calls.patch_settings(
            pause_after_failures=pause_after_failures,
            notify=notify,
            retention_s=retention_s,
            audit_retention_s=audit_retention_s,
            missed=missed,
        )
        return await self.send(call)

    def schedule_audit(self, schedule_id: str, *, page_size: int = 100) -> AsyncIterator[AuditRecord]:
        """One schedule's changes, newest first (also after it ended)."""
        return self._pages(calls.schedule_audit(schedule_id, page_size=page_size))

    def runs(self, schedule_id: str, *, page_size: int = 100) -> AsyncIterator[Run]:
        """The schedule's fires, newest first, page after page."""
        return self._pages(calls.runs(schedule_id, page_size=page_size))

    async def update_schedule(
        self, schedule_id: str, *, if_match: calls.IfMatch = None, **changes: Unpack[ScheduleChanges]
    ) -> Schedule:
        """``if_match``: change only that version (``Schedule.version``); else ``PreconditionFailed``."""
        return await self.send(calls.update_schedule(schedule_id, changes, if_match))

    async def cancel_schedule(self, schedule_id: str, *, if_match: calls.IfMatch = None) -> Schedule:
        return await self.send(calls.cancel_schedule(schedule_id, if_match))

    async def pause_schedule(
        self,
        schedule_id: str,
        *,
        until: Time | None = None,
        note: str | None = None,
        if_match: calls.IfMatch = None,
    ) -> Schedule:
        """It fires nothing until resumed (status ``paused``); pausing a paused schedule is no error.
        ``until`` (a datetime with a timezone, epoch seconds or an RFC 3339 string): it resumes by itself
        then (its ``due_at`` until then); ``note``: shown with the pause (at most 500 characters). Either
        makes the pause exactly that one (``Schedule.pause``), replacing the one it has; with neither, a
        paused schedule is left as it is. A naive datetime is a ``ValueError``; an ``until`` not ahead of
        now or beyond the horizon is ``Invalid`` with ``field`` ``until``."""
        return await self.send(calls.pause_schedule(schedule_id, if_match, until=until, note=note))

    async def resume_schedule(self, schedule_id: str, *, if_match: calls.IfMatch = None) -> Schedule:
        """``scheduled`` again; a recurring schedule goes on from now (``Conflict`` if it is not paused)."""
        return await self.send(calls.resume_schedule(schedule_id, if_match))

    async def trigger_schedule(self, schedule_id: str, *, idempotency_key: str | None = None) -> Schedule:
        """One extra fire now: the trigger, a one-time schedule of its own (``trigger_of``, its own ``fire_id``)."""
        return await self.send(self._core.trigger_call(schedule_id, idempotency_key))

    # Schedules by business key (API key)

    async def put_schedule_by_key(
        self, key: str, *, if_match: calls.IfMatch = None, **fields: Unpack[KeyedFields]
    ) -> Schedule:
        """Create the key's schedule, or replace its time, payload and callback (the same schedule id).
        ``debounce={"window_s": ...}`` instead of a time: a burst of PUTs of the key makes one fire,
        ``window_s`` after the latest (``Schedule.debounce``); such a PUT is not repeatable (as one with
        ``delay_s``): a connection lost once it was sent, or a 502/503/504, is raised rather than retried."""
        return await self.send(calls.put_schedule_by_key(key, fields, if_match))

    async def get_schedule_by_key(self, key: str) -> Schedule:
        return await self.send(calls.get_schedule_by_key(key))

    async def cancel_schedule_by_key(self, key: str, *, if_match: calls.IfMatch = None) -> Schedule:
        """Cancel the key's schedule; the next put creates a new one."""
        return await self.send(calls.cancel_schedule_by_key(key, if_match))

    # Dead letters (API key)

    def list_dead_letters(
        self,
        start: Time | None = None,
        end: Time | None = None,
        *,
        schedule_id: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[DeadLetter]:
        """Dead letters that failed in ``[start, end)`` (default: the last 7 days), newest first, every page."""
        return self._pages(calls.list_dead_letters(start, end, schedule_id=schedule_id, page_size=page_size))

    async def get_dead_letter(self, dead_letter_id: str) -> DeadLetter:
        return await self.send(calls.get_dead_letter(dead_letter_id))

    async def redrive_dead_letter(self, dead_letter_id: str, *, at: Time | None = None) -> DeadLetter:
        """Fire it again (same fire id), due ``at`` or now; once only: a repeat answers the first redrive."""
        return await self.send(calls.redrive_dead_letter(dead_letter_id, at))

    async def redrive_dead_letters(
        self,
        start: Time | None = None,
        end: Time | None = None,
        *,
        schedule_id: str | None = None,
        at: Time | None = None,
        page_size: int = 100,
    ) -> Redrive:
        """Redrive every matching dead letter not yet redriven, ``page_size`` per request until none is left."""
        call = calls.redrive_dead_letters(start, end, schedule_id=schedule_id, at=at, page_size=page_size)
        redriven: list[DeadLetter] = []
        errors: list[RedriveError] = []
        while True:
            page = await self.send(call)
            redriven += page.redriven
            errors += page.errors
            if page.next_cursor is None:
                return Redrive(redriven, errors)
            call = call.at_cursor(page.next_cursor)

    # Throttle policies and events (API key)

    async def put_policy(self, name: str, *, max_in_flight: int, release_timeout_s: int) -> Policy:
        return await self.send(calls.put_policy(name, max_in_flight, release_timeout_s))

    async def get_policy(self, name: str) -> Policy:
        return await self.send(calls.get_policy(name))

    async def list_policies(self) -> list[Policy]:
        return await self.send(calls.list_policies())

    async def delete_policy(self, name: str) -> Policy:
        return await self.send(calls.delete_policy(name))

    async def release_event(self, event_id: str) -> Release:
        return await self.send(calls.release_event(event_id))

    # Calendars (API key)

    async def put_calendar(
        self,
        name: str,
        *,
        timezone: str | None = None,
        dates: Iterable[date | str] = (),
        ranges: Iterable[RangeSpec] = (),
        weekdays: Iterable[str] = (),
        business_days: bool = False,
        if_match: calls.IfMatch = None,
    ) -> Calendar:
        """Create the calendar (version 1) or replace the whole of it (the next version). The recurring
        schedules naming it (``calendars=[name]``) skip the occurrences that fall, on ``timezone``'s wall
        clock (default UTC), on one of ``dates``, inside one of ``ranges`` (``(from, to)`` local wall times,
        ``to`` excluded) or on one of ``weekdays`` (``business_days``: Saturdays and Sundays).
        ``if_match``: replace only that version (``Calendar.version``); else ``PreconditionFailed``."""
        call = calls.put_calendar(
            name,
            timezone=timezone,
            dates=dates,
            ranges=ranges,
            weekdays=weekdays,
            business_days=business_days,
            if_match=if_match,
        )
        return await self.send(call)

    async def get_calendar(self, name: str) -> Calendar:
        return await self.send(calls.get_calendar(name))

    async def list_calendars(self) -> list[Calendar]:
        """Your calendars, by name."""
        return await self.send(calls.list_calendars())

    async def delete_calendar(self, name: str, *, if_match: calls.IfMatch = None) -> Calendar:
        """Delete it (``if_match``: only that version); the calendar as it was. The schedules naming it
        go on as if it excluded nothing."""
        return await self.send(calls.delete_calendar(name, if_match))

    # Delivery statistics (API key)

    async def stats(self) -> Stats:
        """Your delivery statistics over the last 5 minutes, hour and day (``Stats.window(300)``...)."""
        return await self.send(calls.stats())
