"""The store port: what the API and the pollers need from storage, independent of Cassandra.

The Cassandra adapter (``schema.cassandra.CassandraStore``) is the one implementation today; tests of
code that is not about storage may pass a fake that satisfies this protocol.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import date, datetime
from typing import Protocol
from uuid import UUID

from tickd.schema.calendars import Calendar, StoredCalendar
from tickd.schema.model import (
    AuditRecord,
    BulkJob,
    BulkState,
    BusinessKey,
    Chained,
    Checkpoint,
    Claim,
    Client,
    ClientSettings,
    DeadLetter,
    FireOutcome,
    HotMark,
    IdempotencyKey,
    InstanceKey,
    ListCursor,
    NodeInfo,
    Page,
    RowStamp,
    Run,
    Schedule,
    ScheduleRef,
    SkippedMinute,
    Status,
    ThrottlePolicy,
    Token,
)
from tickd.schema.stats import MinuteStats


class ClientStore(Protocol):
    async def create_client(self, client: Client) -> bool:
        """Insert a new client; False (and nothing written) if the id is taken."""

    async def get_client(self, client_id: str) -> Client | None: ...

    async def list_clients(self) -> list[Client]: ...

    async def update_client(self, client: Client) -> None:
        """Overwrite a client's mutable fields with those of ``client`` (not its ack or signing secrets)."""

    async def set_client_settings(self, client_id: str, settings: ClientSettings) -> None:
        """Replace the client's own settings (``update_client`` leaves them as they are)."""

    async def ensure_ack_secret(self, client_id: str, candidate: str) -> str | None:
        """The client's ack secret; a client without one gets ``candidate`` unless another writer's
        landed first (compare-and-set). None for an unknown client."""

    async def ensure_signing_secret(self, client_id: str, candidate: str) -> str | None:
        """The client's current signing secret, made the way ``ensure_ack_secret`` makes an ack secret."""

    async def rotate_signing_secret(self, client_id: str, current: str, new: str, previous_until: datetime) -> bool:
        """Make ``new`` the signing secret and ``current`` the previous one, valid until ``previous_until``
        (compare-and-set: False, and nothing written, unless ``current`` is still the secret)."""


class ScheduleStore(Protocol):
    async def create_schedule(self, schedule: Schedule, now: datetime) -> None:
        """Write a schedule's row and by-id pointer atomically; signal pollers if it is due soon."""

    async def create_schedules(self, schedules: Sequence[Schedule], now: datetime) -> None:
        """``create_schedule`` for a few schedules in one atomic write (all or none): cheaper per
        schedule. Keep groups small (the write is one Cassandra batch)."""

    async def reserve_idempotency_key(self, reservation: IdempotencyKey) -> IdempotencyKey:
        """Reserve the key for ``reservation`` unless it is reserved already (compare-and-set); the
        reservation the key holds: ``reservation`` itself (the same object) if it was free, else a new one
        with the holder's id, digest and time. Kept 24 h."""

    async def get_ref(self, client_id: str, schedule_id: UUID) -> ScheduleRef | None: ...

    async def get_schedule(self, client_id: str, schedule_id: UUID) -> Schedule | None:
        """The schedule's current row, or None if unknown to this client."""

    async def cancel_schedule(self, current: Schedule, now: datetime) -> Schedule:
        """Mark ``current`` cancelled. Raises ``Conflict`` if it changed since it was read."""

    async def replace_schedule(self, current: Schedule, updated: Schedule, now: datetime) -> Schedule:
        """Move/modify ``current`` into ``updated`` (a new version). Raises ``Conflict`` if it changed."""

    async def pause_schedule(self, current: Schedule, now: datetime, parked: Schedule | None = None) -> Schedule:
        """Mark ``current`` paused (a client change: a new version), or move it to ``parked`` (paused, with
        its pause note, where a timed pause ends). ``Conflict`` if it changed."""

    async def resume_schedule(self, current: Schedule, resumed: Schedule, now: datetime) -> Schedule:
        """Replace paused ``current`` by ``resumed`` (scheduled). ``Conflict`` if not paused or changed."""

    async def add_runs(self, client_id: str, schedule_id: UUID, runs: Sequence[Run]) -> None:
        """Write runs of a schedule as given (e.g. the occurrences a pause skipped), with the retention TTL."""

    async def requeue_schedule(
        self, current: Schedule, due_at: datetime, attempts: int, last_error: str, now: datetime
    ) -> Schedule:
        """Durable retry: the fire moves to ``due_at`` keeping its fire id. ``Conflict`` if changed meanwhile."""

    async def chain_schedule(self, current: Schedule, following: Schedule | None, now: datetime) -> Chained:
        """Move a recurring schedule on from ``current`` to its next occurrence ``following`` (None: the
        timeline ends) unless the client changed it since; see ``Chain`` for the outcomes."""

    async def add_events(self, rows: Sequence[Schedule], now: datetime) -> None:
        """Write the event rows a fire produced (no by-id pointers: they belong to their schedule)."""

    async def put_policy(self, policy: ThrottlePolicy) -> None: ...

    async def get_policy(self, client_id: str, name: str) -> ThrottlePolicy | None: ...

    async def list_policies(self, client_id: str) -> list[ThrottlePolicy]: ...

    async def delete_policy(self, client_id: str, name: str) -> None: ...

    async def tokens(self, client_id: str, policy: str) -> list[Token]:
        """The slots of a policy held now."""

    async def take_token(self, token: Token, ttl_s: int) -> bool:
        """Take ``token.slot`` if free (compare-and-set); the row expires after ``ttl_s``."""

    async def release_token(self, client_id: str, policy: str, slot: int, event_id: str) -> bool:
        """Free the slot if ``event_id`` holds it."""

    async def list_runs(self, client_id: str, schedule_id: UUID, before: datetime | None, limit: int) -> list[Run]:
        """A recurring schedule's fires, newest first, nominal time before ``before``."""

    def read_minute(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncIterator[list[Schedule]]:
        """The rows of one partition in due-time order, a page at a time: those due at or after
        ``from_due`` and, given ``until_due``, before it (a poller reads a minute in such slices)."""

    def read_minute_stamps(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncGenerator[list[RowStamp], None]:
        """The same rows as ``read_minute``, each as its ``RowStamp`` only: what a poller's re-reads of an
        open minute compare with what it holds, at a fraction of the cost of whole rows."""

    async def list_minute(
        self, instance: InstanceKey, minute: datetime, start: ListCursor, max_rows: int
    ) -> tuple[list[Schedule], int, ListCursor | None]:
        """A listing's read of one minute partition: at most ``max_rows`` rows in (due time, id) order from
        ``start`` (due at or after its time; after its row if it names one), **without payloads**
        (``payload`` empty); the number of rows read and the last one (fences of changes that never
        landed are read but not returned). One bounded read."""

    async def list_schedules(
        self,
        client: Client,
        start: datetime,
        end: datetime,
        status: Status | None,
        after: ListCursor | None,
        limit: int,
        tag: tuple[str, str] | None = None,
        target: str | None = None,
    ) -> Page:
        """A client's schedules due in [start, end), in (due_at, schedule_id) order, ``limit`` at a time
        (of ``status``, carrying the (key, value) ``tag`` and calling ``target``, if given).

        Reads the minute partitions of every poller id below ``client.poller_span``. A page may hold
        fewer than ``limit`` items (even none) and still carry a cursor: each page reads a bounded
        number of partitions. Rows superseded by a move are never listed.
        """

    async def record_outcomes(self, outcomes: Sequence[FireOutcome]) -> None:
        """Write fire results, one single-partition batch per partition, with the retention TTL."""

    async def get_business_key(self, client_id: str, key: str) -> BusinessKey | None:
        """The schedule a client's business key names, or None if the key is new."""

    async def claim_business_key(self, claim: BusinessKey) -> BusinessKey | None:
        """Point a new key at ``claim.schedule_id`` unless it exists (compare-and-set): the key as it
        stands after the call (``claim`` itself if it was free)."""

    async def move_business_key(self, seen: BusinessKey, claim: BusinessKey) -> BusinessKey | None:
        """Point the key at ``claim.schedule_id`` if it still names ``seen.schedule_id`` (compare-and-set):
        the key as it stands after the call."""

    async def write_stats(self, rows: Sequence[MinuteStats]) -> None:
        """Write each row of delivery statistics (overwriting the same client, minute and writer), one
        request per row, expiring after ``schema.stats.RETENTION_S``."""

    async def read_stats(self, client_id: str, since: datetime, until: datetime) -> list[MinuteStats]:
        """A client's statistics rows whose minute lies in [since, until], every writer's."""

    async def add_dead_letter(self, letter: DeadLetter) -> None: ...

    async def list_dead_letters(self, client_id: str, day: date) -> list[DeadLetter]:
        """The client's dead letters of one UTC day (``failed_at``'s), newest first, with their redrive
        marks (``redriven_at``, ``redriven_due_at``)."""

    async def page_dead_letters(
        self, client_id: str, day: date, since: datetime, until: datetime, max_rows: int
    ) -> list[DeadLetter]:
        """At most ``max_rows`` of the client's dead letters of one UTC day that failed in [since, until],
        newest first (then by schedule id), with their redrive marks but **without their payloads**
        (``payload`` is empty: a listing shows none; ``get_dead_letter`` reads it). One bounded read."""

    async def get_dead_letter(self, client_id: str, failed_at: datetime, schedule_id: UUID) -> DeadLetter | None:
        """One dead letter by its key, with its redrive marks; None if unknown (or expired)."""

    async def mark_redriven(self, letter: DeadLetter, at: datetime, due_at: datetime) -> DeadLetter | None:
        """Mark ``letter`` redriven at ``at`` to a fire due at ``due_at`` unless it is already marked
        (compare-and-set): the dead letter as stored after the call (the earlier mark if there was one);
        None if it is gone."""

    async def move_redrive(self, letter: DeadLetter, at: datetime, due_at: datetime) -> DeadLetter | None:
        """Move the marked redrive of ``letter`` to ``due_at`` if its mark still reads
        ``letter.redriven_due_at`` (compare-and-set): the dead letter as stored after the call (another
        call's move if it won); None if it is gone."""

    async def add_redrive(self, row: Schedule, now: datetime) -> None:
        """Write a redriven fire's own row (a recurring occurrence's: no pointer, like a retry row's),
        with the signals pollers need. Written again, it keeps the status of a row already there."""


class CoordinationStore(Protocol):
    async def heartbeat(self, node: NodeInfo, ttl_s: int) -> None: ...

    async def leave(self, node_id: str) -> None: ...

    async def live_nodes(self) -> list[NodeInfo]: ...

    async def get_claim(self, instance: InstanceKey) -> Claim | None: ...

    async def list_claims(self) -> list[Claim]:
        """Every instance's claim (one paged read of the whole claims table, for the admin view)."""

    async def claim(self, instance: InstanceKey, node_id: str, seen: Claim | None, now: datetime) -> Claim | None:
        """Take ownership if the claim is still ``seen``; the new claim (epoch + 1) or None if lost."""

    async def release(self, claim: Claim) -> bool:
        """Give up ownership if still held at this epoch."""

    async def get_checkpoint(self, instance: InstanceKey) -> Checkpoint | None: ...

    async def write_checkpoint(self, claim: Claim, minute: datetime) -> None:
        """Record ``minute`` as finished; ignored by storage if a newer epoch has written since."""

    async def hot_marks(self, minute: datetime) -> list[HotMark]: ...

    async def get_horizon(self, instance: InstanceKey) -> datetime | None: ...

    async def record_skipped(self, instance: InstanceKey, minute: datetime, reason: str, rows: int) -> None: ...

    async def skipped_minutes(self, instance: InstanceKey, limit: int) -> list[SkippedMinute]:
        """The instance's skipped minutes, newest first, at most ``limit`` (kept for the retention TTL)."""


class AuditStore(Protocol):
    async def record_audit(self, records: Sequence[AuditRecord], ttl_s: int | None = None) -> None:
        """Write each record to its tenant's trail (and its schedule's, if it has one), kept ``ttl_s`` (by
        default the client's audit retention)."""

    async def page_client_audit(
        self, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        """A client-day's records, newest first, strictly before ``before`` (at, audit_id), at most ``max_rows``."""

    async def page_schedule_audit(
        self, client_id: str, schedule_id: UUID, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        """A schedule's records, newest first, strictly before ``before``, at most ``max_rows``."""

    async def record_notice(self, notice: AuditRecord) -> None:
        """Write a notice to its client's feed (by day), kept the client's retention, as its runs are."""

    async def page_notices(
        self, client_id: str, day: date, before: tuple[datetime, str] | None, max_rows: int
    ) -> list[AuditRecord]:
        """A client-day's notices, as ``page_client_audit`` pages records."""


class BulkStore(Protocol):
    async def tagged(
        self, client_id: str, tag: tuple[str, str], shard: int, after: UUID | None, max_rows: int
    ) -> list[UUID]:
        """Ids of schedules indexed under ``tag`` in one shard (of ``TAG_SHARDS``), after ``after``. An
        entry may be stale (the tag removed, the schedule finished or gone): check the schedule."""

    async def forget_tagged(self, client_id: str, tag: tuple[str, str], schedule_id: UUID) -> None:
        """Drop an index entry whose schedule is gone."""

    async def create_bulk_job(self, job: BulkJob) -> BulkJob:
        """Store a new job (queued) and list it as open; the job already stored under its id if one is."""

    async def get_bulk_job(self, client_id: str, job_id: UUID) -> BulkJob | None: ...

    async def list_bulk_jobs(self, client_id: str, before: UUID | None, max_rows: int) -> list[BulkJob]:
        """A client's jobs, newest first, strictly before ``before``."""

    async def open_bulk_jobs(self, max_rows: int) -> list[tuple[str, UUID]]:
        """(client id, job id) of the jobs not finished (a finished one may linger: check its state)."""

    async def take_bulk_job(self, job: BulkJob, owner: str, lease_until: datetime, now: datetime) -> BulkJob | None:
        """Take the job's lease (compare-and-set on the owner and lease it was read with), running it;
        None if another replica moved them since."""

    async def save_bulk_job(self, job: BulkJob, seen_state: BulkState) -> bool:
        """Save progress under ``job.owner``'s lease while the job is in ``seen_state``; False if not."""

    async def stop_bulk_job(self, job: BulkJob, now: datetime) -> bool:
        """Cancel the job if still in the state it was read in; False if it moved on meanwhile."""

    async def close_bulk_job(self, client_id: str, job_id: UUID) -> None:
        """No longer list the job as open."""


class CalendarStore(Protocol):
    async def save_calendar(self, client_id: str, calendar: Calendar, now: datetime) -> bool:
        """Store ``calendar`` at its version: 1 only if the name is free, a later one only over the one
        before it. False (nothing written) otherwise; safe to call again after ``StoreUnavailable``."""

    async def get_calendar(self, client_id: str, name: str) -> StoredCalendar | None: ...

    async def list_calendars(self, client_id: str) -> list[StoredCalendar]:
        """The client's calendars, by name."""

    async def delete_calendar(self, client_id: str, name: str, version: int) -> bool:
        """Remove the calendar if it is still at ``version``."""


class Store(ClientStore, ScheduleStore, CoordinationStore, AuditStore, BulkStore, CalendarStore, Protocol):
    """Everything tickd stores."""

    async def ping(self) -> None:
        """Raise ``StoreUnavailable`` unless storage answers a trivial query."""

    async def close(self) -> None: ...
