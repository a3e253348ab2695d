"""``schema.store.Store`` in memory, with the Cassandra adapter's semantics statement by statement.

Each method sends the requests ``schema.cassandra`` sends, in the same order and grouping (so a fault
between two of them leaves what Cassandra would be left with), and each request does to the tables
what its CQL does (``engine`` models cells, TTLs, write timestamps and lightweight transactions).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from tickd.schema import aio, batchlog, changes, moves, stats, timing
from tickd.schema.errors import BatchNotLogged, Conflict, StoreUnavailable
from tickd.schema.listing import Listing, chunks, in_turn
from tickd.schema.memory import rows as to
from tickd.schema.memory import tables as t
from tickd.schema.memory.engine import Table, Tables, Values, Write, micros, norm
from tickd.schema.memory.faults import StoreFaults
from tickd.schema.memory.session import Select, Session
from tickd.schema.model import (
    BusinessKey,
    Checkpoint,
    Claim,
    Client,
    DeadLetter,
    FireOutcome,
    HotMark,
    IdempotencyKey,
    InstanceKey,
    ListCursor,
    Location,
    NodeInfo,
    RowStamp,
    Run,
    Schedule,
    ScheduleRef,
    Status,
    ThrottlePolicy,
    Token,
    encode_callback,
    encode_options,
)
from tickd.schema.settings import StoreSettings
from tickd.schema.stats import MinuteStats

_FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)
_DEFAULTS = StoreSettings()


def _set(**values: Any) -> dict[str, Any]:
    """The columns a write sets: None means "leave as is" (the Cassandra adapter binds UNSET)."""
    return {column: value for column, value in values.items() if value is not None}


def _rows(tables: Tables, table: Table, key: Mapping[str, Any]) -> Select:
    return lambda: tables.partition(table, key)


def _one(tables: Tables, table: Table, key: Mapping[str, Any]) -> Select:
    def select() -> list[tuple[Any, Values]]:
        row = tables.row(table, key)
        return [((), row)] if row is not None else []

    return select


class MemoryStore(changes.ClientChanges, moves.PollerMoves, Listing):
    """The store in memory. ``clock`` is the server's (and the clients') time: it drives TTL expiry and
    write timestamps; the ``now`` arguments of the methods stay the callers', as with Cassandra."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        *,
        page_size: int = _DEFAULTS.page_size,
        retention_s: int = _DEFAULTS.retention_s,
        hot_window_s: float = _DEFAULTS.hot_window_s,
        cluster_name: str = _DEFAULTS.cluster_name,
        faults: StoreFaults | None = None,
        tables: Tables | None = None,
    ) -> None:
        self.settings = StoreSettings(
            page_size=page_size, retention_s=retention_s, hot_window_s=hot_window_s, cluster_name=cluster_name
        )
        self.clock = clock
        self.tables = tables if tables is not None else Tables(clock)
        self._db = Session(self.tables, page_size, faults)
        # As the Cassandra adapter: the highest minute this process wrote per instance (horizon writes
        # at or below it are skipped).
        self._horizons: dict[InstanceKey, datetime] = {}

    @classmethod
    def from_settings(
        cls,
        settings: StoreSettings,
        clock: Callable[[], datetime],
        *,
        faults: StoreFaults | None = None,
        tables: Tables | None = None,
    ) -> MemoryStore:
        """The store with the settings the Cassandra adapter reads (the connection ones are ignored)."""
        return cls(
            clock,
            page_size=settings.page_size,
            retention_s=settings.retention_s,
            hot_window_s=settings.hot_window_s,
            cluster_name=settings.cluster_name,
            faults=faults,
            tables=tables,
        )

    def peer(self, *, faults: StoreFaults | None = None) -> MemoryStore:
        """Another process's adapter on the same data: its own faults and its own horizon memory."""
        return MemoryStore.from_settings(self.settings, self.clock, faults=faults, tables=self.tables)

    @property
    def faults(self) -> StoreFaults:
        return self._db.faults

    @faults.setter
    def faults(self, faults: StoreFaults) -> None:
        self._db.faults = faults

    async def ping(self) -> None:
        await self._db.request("ping", lambda _: None)

    async def close(self) -> None:
        return None

    # -- clients ------------------------------------------------------------------------------------

    def _client_values(self, c: Client) -> dict[str, Any]:
        return _set(
            poller_count=c.poller_count,
            poller_span=c.poller_span,
            active=c.active,
            api_key_hash=c.api_key_hash,
            kafka_topics=frozenset(c.kafka_topics),  # an empty set is written, as null
            updated_at=c.updated_at,
            resized_at=c.resized_at,
        )

    async def create_client(self, client: Client) -> bool:
        secrets = _set(ack_secret=client.ack_secret or None, signing_secret=client.signing_secret or None)
        values = self._client_values(client) | _set(created_at=client.created_at) | secrets
        write = Write("insert_client", t.CLIENTS, {"client_id": client.client_id}, values, insert=True)
        applied, _ = await self._db.lwt(write, None)
        return applied

    async def get_client(self, client_id: str) -> Client | None:
        rows = await self._db.rows("get_client", _one(self.tables, t.CLIENTS, {"client_id": client_id}))
        return to.client(rows[0]) if rows else None

    async def list_clients(self) -> list[Client]:
        return [
            to.client(r)
            async for page in self._db.pages("list_clients", lambda: self.tables.scan(t.CLIENTS))
            for r in page
        ]

    async def update_client(self, client: Client) -> None:
        key = {"client_id": client.client_id}
        await self._db.write(Write("update_client", t.CLIENTS, key, self._client_values(client)))

    async def ensure_ack_secret(self, client_id: str, candidate: str) -> str | None:
        return await self._ensure_secret(client_id, "ack_secret", candidate)

    async def ensure_signing_secret(self, client_id: str, candidate: str) -> str | None:
        return await self._ensure_secret(client_id, "signing_secret", candidate)

    async def _ensure_secret(self, client_id: str, column: str, candidate: str) -> str | None:
        client = await self.get_client(client_id)
        if client is None or getattr(client, column):
            return getattr(client, column) if client is not None else None
        write = Write(f"set_{column}", t.CLIENTS, {"client_id": client_id}, {column: candidate})
        applied, row = await self._db.lwt(write, {column: None})
        return candidate if applied else str(getattr(row, column))

    async def rotate_signing_secret(self, client_id: str, current: str, new: str, previous_until: datetime) -> bool:
        values = {"signing_secret": new, "signing_secret_previous": current, "signing_previous_until": previous_until}
        write = Write("rotate_signing_secret", t.CLIENTS, {"client_id": client_id}, values)
        applied, _ = await self._db.lwt(write, {"signing_secret": current})
        return applied

    # -- schedules: statements ----------------------------------------------------------------------

    def _ttl(self, due_at: datetime, now: datetime) -> int:
        return timing.row_ttl_s(due_at, now, self.settings.retention_s)

    def _row_insert(
        self, s: Schedule, now: datetime, *, event: bool = False, retry: bool = False, ts: int | None = None
    ) -> Write:
        """``insert_schedule``; ``insert_event`` (no status, no attempts) or ``insert_retry`` (no status):
        see queries.cql."""
        values = _set(
            fire_at=s.fire_at,
            version=s.version,
            payload=s.payload,
            callback=encode_callback(s.callback),
            status=None if event or retry else Status.SCHEDULED.value,
            attempts=None if event else s.attempts,
            last_error=s.last_error,
            created_at=s.created_at,
            options=encode_options(s.options) if s.options is not None else None,
            seq=s.seq or None,
        )
        key = _row_key(s.client_id, s.schedule_id, s.location)
        name = "insert_event" if event else "insert_retry" if retry else "insert_schedule"
        ttl = self._ttl(s.location.due_at, now)
        return Write(name, t.SCHEDULES, key, values, ttl_s=ttl, insert=True, timestamp=ts)

    def _ref_insert(self, s: Schedule, now: datetime) -> Write:
        loc = s.location
        key = {"client_id": s.client_id, "schedule_id": s.schedule_id}
        values = {"poller_id": loc.poller_id, "due_at": loc.due_at, "version": s.version}
        ts = timing.below_ballots(micros(self.clock()))
        return Write("insert_ref", t.REFS, key, values, ttl_s=self._ttl(loc.due_at, now), insert=True, timestamp=ts)

    def _status(self, s: Schedule, loc: Location, status: Status, now: datetime, ts: int | None = None) -> Write:
        key = _row_key(s.client_id, s.schedule_id, loc)  # expiring with the row (see the Cassandra adapter)
        ttl = self._ttl(loc.due_at, now)
        return Write("set_status", t.SCHEDULES, key, {"status": status.value}, ttl_s=ttl, timestamp=ts)

    def _hot_mark(self, instance: InstanceKey, loc: Location, now: datetime) -> list[Write]:
        if not timing.is_hot(loc.due_at, now, self.settings.hot_window_s):
            return []
        key = {"minute": loc.minute, "client_id": instance.client_id, "poller_id": instance.poller_id}
        return [Write("mark_hot", t.HOT_MARKS, key, {"touched_at": now})]

    def _raise_horizon(self, instance: InstanceKey, loc: Location) -> list[Write]:
        known = self._horizons.get(instance)
        if known is not None and loc.minute <= known:
            return []
        key = {"client_id": instance.client_id, "poller_id": instance.poller_id}
        stamp = timing.horizon_timestamp(loc.minute)
        return [Write("raise_horizon", t.HORIZONS, key, {"last_minute": loc.minute}, timestamp=stamp)]

    def _signals(self, instance: InstanceKey, loc: Location, now: datetime) -> list[Write]:
        return self._hot_mark(instance, loc, now) + self._raise_horizon(instance, loc)

    def _note_horizon(self, instance: InstanceKey, minute: datetime) -> None:
        known = self._horizons.get(instance)
        if known is None or minute > known:
            self._horizons[instance] = minute

    # -- schedules ----------------------------------------------------------------------------------

    async def create_schedule(self, schedule: Schedule, now: datetime) -> None:
        await self.create_schedules([schedule], now)

    async def create_schedules(self, schedules: Sequence[Schedule], now: datetime) -> None:
        writes = [
            w
            for s in schedules
            for w in (self._row_insert(s, now), self._ref_insert(s, now), *self._signals(s.instance, s.location, now))
        ]
        await self._together(writes)
        for s in schedules:
            self._note_horizon(s.instance, s.location.minute)

    async def reserve_idempotency_key(self, reservation: IdempotencyKey) -> IdempotencyKey:
        write = Write(
            "reserve_idempotency_key",
            t.IDEMPOTENCY_KEYS,
            {"client_id": reservation.client_id, "key": reservation.key},
            {
                "schedule_id": reservation.schedule_id,
                "request_digest": reservation.request_digest,
                "created_at": reservation.created_at,
            },
            insert=True,
        )
        applied, row = await self._db.lwt(write, None)
        if applied:
            return reservation
        return dataclasses.replace(
            reservation, schedule_id=row.schedule_id, request_digest=row.request_digest, created_at=row.created_at
        )

    async def get_ref(self, client_id: str, schedule_id: UUID) -> ScheduleRef | None:
        key = {"client_id": client_id, "schedule_id": schedule_id}
        rows = await self._db.rows("get_ref", _one(self.tables, t.REFS, key))
        if not rows:
            return None
        row = rows[0]
        previous = None
        if row.prev_poller_id is not None and row.prev_due_at is not None:
            previous = Location(row["prev_poller_id"], row["prev_due_at"])
        location = Location(row["poller_id"], row["due_at"])
        stale = tuple(Location(p, d) for p, d in row.stale or ())
        return ScheduleRef(
            client_id, schedule_id, location, row["version"], previous, row.changed_version or 0, row.write_ts, stale
        )

    async def _row_at(self, client_id: str, schedule_id: UUID, loc: Location) -> Schedule | None:
        key = _row_key(client_id, schedule_id, loc)
        rows = await self._db.rows("get_schedule", _one(self.tables, t.SCHEDULES, key))
        return to.schedule(rows[0]) if rows and not to.is_fence(rows[0]) else None

    async def _bump_ref(
        self,
        current: Schedule,
        new_loc: Location,
        version: int,
        now: datetime,
        *,
        by_client: bool = True,
        base: changes.Base | None = None,
    ) -> None:
        old = current.location
        prev = old if old != new_loc else None
        values = _set(
            poller_id=new_loc.poller_id,
            due_at=new_loc.due_at,
            version=version,
            prev_poller_id=prev.poller_id if prev else None,
            prev_due_at=prev.due_at if prev else None,
            changed_version=version if by_client else None,
        )
        if by_client and base is not None:
            values["write_ts"] = base.write_ts
            values["stale"] = tuple((loc.poller_id, loc.due_at) for loc in base.stale)
        key = {"client_id": current.client_id, "schedule_id": current.schedule_id}
        name = "bump_ref" if by_client else "move_ref"
        write = Write(name, t.REFS, key, values, ttl_s=self._ttl(new_loc.due_at, now))
        seen = base.version if base is not None else current.version
        applied, _ = await self._db.lwt(write, {"version": seen})
        if not applied:
            raise Conflict("the schedule was changed concurrently; read it again and retry")

    def _write_clock(self) -> int:
        return self.tables.timestamp()

    async def _write_cancel(self, current: Schedule, now: datetime, base: changes.Base) -> None:
        writes = [self._status(current, current.location, Status.CANCELLED, now, base.write_ts)]
        writes += self._hot_mark(current.instance, current.location, now)
        writes += self._fences(current, changes.fenced(base.stale), now, base.write_ts)
        await self._together(writes)

    async def _write_pause(self, current: Schedule, version: int, now: datetime, base: changes.Base) -> None:
        loc = current.location
        key = _row_key(current.client_id, current.schedule_id, loc)
        values = {"status": Status.PAUSED.value, "version": version}
        ttl = self._ttl(loc.due_at, now)
        writes = [Write("set_status_version", t.SCHEDULES, key, values, ttl_s=ttl, timestamp=base.write_ts)]
        writes += self._hot_mark(current.instance, loc, now)
        writes += self._fences(current, changes.fenced(base.stale), now, base.write_ts)
        await self._together(writes)

    def _fences(self, current: Schedule, targets: list[Location], now: datetime, ts: int) -> list[Write]:
        """Abandoned changes' targets marked moved at ``ts``: a late copy of their rows never fires."""
        writes = []
        for loc in targets:
            writes.append(self._status(current, loc, Status.MOVED, now, ts))
            writes += self._hot_mark(InstanceKey(current.client_id, loc.poller_id), loc, now)
        return writes

    async def _write_replacement(
        self,
        current: Schedule,
        new: Schedule,
        now: datetime,
        *,
        keep_status: bool = False,
        base: changes.Base | None = None,
    ) -> None:
        ts = base.write_ts if base is not None else None
        writes = [self._row_insert(new, now, retry=keep_status, ts=ts), *self._signals(new.instance, new.location, now)]
        old = current.location
        if old != new.location or new.schedule_id != current.schedule_id:
            writes.append(self._status(current, old, Status.MOVED, now, ts))
            writes += self._hot_mark(current.instance, old, now)
        if base is not None:
            writes += self._fences(current, changes.fenced(base.stale, new.location), now, base.write_ts)
        # A poller's move (no base) goes whole or not at all: cut short between its new row and retiring
        # the old, it would leave two live rows of one fire, and the next owner would send both.
        await self._together(writes, unlogged_ok=base is not None)
        self._note_horizon(new.instance, new.location.minute)

    async def _together(self, writes: list[Write], *, unlogged_ok: bool = True) -> None:
        """One logged batch, or, if Cassandra could not log it, ``schema.batchlog``'s phases (as the
        Cassandra adapter's ``_together``; batches too big for one are not modelled)."""
        if len(writes) == 1:
            await self._db.batch(writes, logged=False)
            return
        try:
            await self._db.batch(writes, logged=True)
            return
        except BatchNotLogged:
            if not unlogged_ok:
                raise
        await batchlog.send_in_phases(writes, [w.name for w in writes], self._db.batch)

    async def requeue_schedule(
        self, current: Schedule, due_at: datetime, attempts: int, last_error: str, now: datetime
    ) -> Schedule:
        retry = moves.retry_row(current, due_at, attempts, last_error)
        event = current.options.event if current.options is not None else None
        if current.repeat is not None or event is not None:
            new = dataclasses.replace(retry, status=Status.SCHEDULED)
            await self._write_replacement(current, new, now, keep_status=True)
            if event is None:
                await self._db.write(self._run_write(new, Status.SCHEDULED, now, last_error))
            return new
        new = await self._move_for_retry(current, retry, now)
        moved = _set(status=Status.MOVED.value, attempts=attempts, fired_at=now, last_error=last_error)
        key = _row_key(current.client_id, current.schedule_id, current.location)
        ttl_s = self._ttl(current.location.due_at, now)
        await self._db.write(Write("record_outcome", t.SCHEDULES, key, moved, ttl_s=ttl_s))
        return new

    async def _write_following(self, following: Schedule, at: Location, version: int, now: datetime) -> None:
        new = dataclasses.replace(following, location=at, version=version, status=Status.SCHEDULED)
        await self._together([self._row_insert(new, now), *self._signals(new.instance, at, now)])
        self._note_horizon(new.instance, at.minute)

    async def add_events(self, rows: Sequence[Schedule], now: datetime) -> None:
        by_partition: dict[tuple[InstanceKey, datetime], list[Schedule]] = defaultdict(list)
        for row in rows:
            by_partition[(row.instance, row.location.minute)].append(row)
        writes = []
        for (instance, _), group in by_partition.items():
            earliest = min((r.location for r in group), key=lambda loc: loc.due_at)
            for chunk in chunks(group):
                writes.append(self._db.batch([self._row_insert(r, now, event=True) for r in chunk], logged=False))
            signals = self._signals(instance, earliest, now)
            if signals:
                writes.append(self._db.batch(signals, logged=False))
        await in_turn(writes)
        for instance, minute in by_partition:
            self._note_horizon(instance, minute)

    def read_minute(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncIterator[list[Schedule]]:
        return self._read_minute(instance, minute, *_due_range(minute, from_due, until_due))

    async def _read_minute(
        self, instance: InstanceKey, minute: datetime, start: datetime, until: datetime | None
    ) -> AsyncIterator[list[Schedule]]:
        async for rows in self._db.pages("read_minute", self._minute_rows(instance, minute, start, until)):
            yield [to.schedule(r) for r in rows if not to.is_fence(r)]

    async def list_minute(
        self, instance: InstanceKey, minute: datetime, start: ListCursor, max_rows: int
    ) -> tuple[list[Schedule], int, ListCursor | None]:
        rows_from = self._minute_rows(instance, minute, norm(start.due_at), None)
        after = (norm(start.due_at), start.schedule_id)

        def select() -> list[tuple[Any, Values]]:
            rows = rows_from()
            return [(o, r) for o, r in rows if start.schedule_id is None or (r["due_at"], r["schedule_id"]) > after]

        rows = await self._db.rows(
            "list_minute_after" if start.schedule_id else "list_minute", select, max(max_rows, 1)
        )
        last = ListCursor(rows[-1]["due_at"], rows[-1]["schedule_id"]) if rows else None
        listed = [dataclasses.replace(to.schedule(r), payload=b"") for r in rows if not to.is_fence(r)]
        return listed, len(rows), last

    def read_minute_stamps(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncGenerator[list[RowStamp], None]:
        return self._read_minute_stamps(instance, minute, *_due_range(minute, from_due, until_due))

    async def _read_minute_stamps(
        self, instance: InstanceKey, minute: datetime, start: datetime, until: datetime | None
    ) -> AsyncGenerator[list[RowStamp], None]:
        async for rows in self._db.pages("read_minute_stamps", self._minute_rows(instance, minute, start, until)):
            yield [to.stamp(r) for r in rows if not to.is_fence(r)]

    def _minute_rows(self, instance: InstanceKey, minute: datetime, start: datetime, until: datetime | None) -> Select:
        """The select of a minute read: the partition's rows due in ``[start, until)``."""
        key = {"client_id": instance.client_id, "poller_id": instance.poller_id, "minute": minute}

        def select() -> list[tuple[Any, Values]]:
            return [
                (o, r)
                for o, r in self.tables.partition(t.SCHEDULES, key)
                if r["due_at"] >= start and (until is None or r["due_at"] < until)
            ]

        return select

    async def record_outcomes(self, outcomes: Sequence[FireOutcome]) -> None:
        by_partition: dict[tuple[str, int, datetime], list[Write]] = defaultdict(list)
        for o in outcomes:
            values = _set(status=o.status.value, attempts=o.attempts, fired_at=o.fired_at, last_error=o.last_error)
            key = _row_key(o.client_id, o.schedule_id, o.location)
            write = Write("record_outcome", t.SCHEDULES, key, values, ttl_s=self._ttl(o.location.due_at, o.fired_at))
            by_partition[(o.client_id, o.location.poller_id, o.location.minute)].append(write)
        runs = [
            self._db.write(self._outcome_run(o) if o.event is None else self._event_run(o))
            for o in outcomes
            if o.nominal_at is not None
        ]
        await aio.gather(*(self._db.batch(ws, logged=False) for ws in by_partition.values()), *runs)

    # -- runs ---------------------------------------------------------------------------------------

    def _run(self, client_id: str, schedule_id: UUID, nominal_at: datetime | None, values: dict[str, Any]) -> Write:
        key = {"client_id": client_id, "schedule_id": schedule_id, "nominal_at": nominal_at}
        return Write("record_run", t.RUNS, key, values, ttl_s=self.settings.retention_s, insert=True)

    def _outcome_run(self, o: FireOutcome) -> Write:
        values = _set(
            seq=o.seq or None,
            status=o.status.value,
            attempts=o.attempts,
            fired_at=o.fired_at,
            last_error=o.last_error,
            events=o.events or None,
            window_ms=o.window_ms or None,
        )
        return self._run(o.client_id, o.run_id, o.nominal_at, values)

    def _event_run(self, o: FireOutcome) -> Write:
        assert o.event is not None
        key = {
            "client_id": o.client_id,
            "schedule_id": o.event.parent,
            "nominal_at": o.nominal_at,
            "idx": o.event.index,
        }
        values = {"status": o.status.value, "fired_at": o.fired_at}
        return Write("record_run_event", t.RUN_EVENTS, key, values, ttl_s=self.settings.retention_s, insert=True)

    def _run_write(self, s: Schedule, status: Status, fired_at: datetime | None, error: str | None) -> Write:
        events, window_ms = s.options.expansion if s.options is not None else (0, 0)
        values = _set(
            seq=s.seq or None,
            status=status.value,
            attempts=s.attempts,
            fired_at=fired_at,
            last_error=error,
            events=events or None,
            window_ms=window_ms or None,
        )
        return self._run(s.client_id, s.public_id, s.fire_at, values)

    async def add_runs(self, client_id: str, schedule_id: UUID, runs: Sequence[Run]) -> None:
        writes = [
            self._run(
                client_id,
                schedule_id,
                r.nominal_at,
                _set(seq=r.seq or None, status=r.status.value, attempts=r.attempts, fired_at=r.fired_at),
            )
            for r in runs
        ]
        if writes:
            await self._db.batch(writes, logged=False)

    async def list_runs(self, client_id: str, schedule_id: UUID, before: datetime | None, limit: int) -> list[Run]:
        upper = norm(before if before is not None else _FAR_FUTURE)
        key = {"client_id": client_id, "schedule_id": schedule_id}

        def select() -> list[tuple[Any, Values]]:
            if limit <= 0:
                raise StoreUnavailable("list_runs: InvalidRequest: LIMIT must be strictly positive")
            return [(o, r) for o, r in self.tables.partition(t.RUNS, key) if r["nominal_at"] < upper]

        rows = await self._db.rows("list_runs", select, limit=max(limit, 1))
        return await aio.gather(*(self._run_of(client_id, schedule_id, r) for r in rows))

    async def _run_of(self, client_id: str, schedule_id: UUID, r: Values) -> Run:
        run = Run(
            r["nominal_at"],
            Status(r.status),
            r.attempts or 0,
            r.fired_at,
            r.last_error,
            r.seq or 0,
        )
        if not r.events:
            return run
        key = {"client_id": client_id, "schedule_id": schedule_id, "nominal_at": r["nominal_at"]}
        events = await self._db.rows("read_run_events", _rows(self.tables, t.RUN_EVENTS, key))
        done = [e["fired_at"] for e in events if e.status == Status.SUCCEEDED.value and e.fired_at]
        return dataclasses.replace(
            run,
            events=r["events"],
            events_done=len(done),
            last_event_at=max(done) if done else None,
            window_end=run.nominal_at + timedelta(milliseconds=r.window_ms or 0),
        )

    # -- dead letters -------------------------------------------------------------------------------

    async def add_dead_letter(self, letter: DeadLetter) -> None:
        day = letter.failed_at.astimezone(UTC).date()
        key = {
            "client_id": letter.client_id,
            "day": day,
            "failed_at": letter.failed_at,
            "schedule_id": letter.schedule_id,
        }
        values = {
            "fire_id": letter.fire_id,
            "attempts": letter.attempts,
            "last_error": letter.last_error,
            "callback": encode_callback(letter.callback),
            "payload": letter.payload,
        }
        ttl = self.settings.retention_s
        await self._db.write(Write("insert_dead_letter", t.DEAD_LETTERS, key, values, ttl_s=ttl, insert=True))

    async def dead_letters(self, client_id: str, day: date) -> list[DeadLetter]:
        key = {"client_id": client_id, "day": day}
        select = _rows(self.tables, t.DEAD_LETTERS, key)
        return [to.dead_letter(r) async for page in self._db.pages("read_dead_letters", select) for r in page]

    async def list_dead_letters(self, client_id: str, day: date) -> list[DeadLetter]:
        select = _rows(self.tables, t.DEAD_LETTERS, {"client_id": client_id, "day": day})
        return [_letter(r) async for page in self._db.pages("list_dead_letters", select) for r in page]

    async def page_dead_letters(
        self, client_id: str, day: date, since: datetime, until: datetime, max_rows: int
    ) -> list[DeadLetter]:
        key = {"client_id": client_id, "day": day}
        low, high = norm(since), norm(until)

        def select() -> list[tuple[Any, Values]]:
            if max_rows <= 0:
                raise StoreUnavailable("page_dead_letters: InvalidRequest: LIMIT must be strictly positive")
            return [(o, r) for o, r in self.tables.partition(t.DEAD_LETTERS, key) if low <= r["failed_at"] <= high]

        rows = await self._db.rows("page_dead_letters", select, limit=max(max_rows, 1))
        return [dataclasses.replace(_letter(r), payload=b"") for r in rows]

    async def get_dead_letter(self, client_id: str, failed_at: datetime, schedule_id: UUID) -> DeadLetter | None:
        key = _letter_key(client_id, failed_at, schedule_id)
        rows = await self._db.rows("get_dead_letter", _one(self.tables, t.DEAD_LETTERS, key))
        return _letter(rows[0]) if rows else None

    async def mark_redriven(self, letter: DeadLetter, at: datetime, due_at: datetime) -> DeadLetter | None:
        key = _letter_key(letter.client_id, letter.failed_at, letter.schedule_id)
        ttl = _letter_ttl_s(letter, at, self.settings.retention_s)
        values = {"redriven_at": at, "redriven_due_at": due_at}
        write = Write("mark_dead_letter_redriven", t.DEAD_LETTERS, key, values, ttl_s=ttl)
        await self._db.lwt(write, {"fire_id": letter.fire_id, "redriven_at": None})
        return await self.get_dead_letter(letter.client_id, letter.failed_at, letter.schedule_id)

    async def add_redrive(self, row: Schedule, now: datetime) -> None:
        await self._write_replacement(row, row, now, keep_status=True)
        if row.options is not None and row.options.in_runs:
            await self._db.write(self._run_write(row, Status.SCHEDULED, None, row.last_error))

    # -- business keys ------------------------------------------------------------------------------

    async def get_business_key(self, client_id: str, key: str) -> BusinessKey | None:
        rows = await self._db.rows("get_business_key", _one(self.tables, t.SCHEDULE_KEYS, _bkey(client_id, key)))
        return BusinessKey(client_id, key, rows[0]["schedule_id"], rows[0]["claimed_at"]) if rows else None

    async def claim_business_key(self, claim: BusinessKey) -> BusinessKey | None:
        values = {"schedule_id": claim.schedule_id, "claimed_at": claim.claimed_at}
        write = Write("claim_business_key", t.SCHEDULE_KEYS, _bkey(claim.client_id, claim.key), values, insert=True)
        applied, _ = await self._db.lwt(write, None)
        return claim if applied else await self.get_business_key(claim.client_id, claim.key)

    async def move_business_key(self, seen: BusinessKey, claim: BusinessKey) -> BusinessKey | None:
        values = {"schedule_id": claim.schedule_id, "claimed_at": claim.claimed_at}
        write = Write("move_business_key", t.SCHEDULE_KEYS, _bkey(claim.client_id, claim.key), values)
        applied, _ = await self._db.lwt(write, {"schedule_id": seen.schedule_id})
        return claim if applied else await self.get_business_key(claim.client_id, claim.key)

    # -- delivery statistics ------------------------------------------------------------------------

    async def write_stats(self, rows: Sequence[MinuteStats]) -> None:
        await aio.gather(*(self._db.write(_stats_write(row)) for row in rows))

    async def read_stats(self, client_id: str, since: datetime, until: datetime) -> list[MinuteStats]:
        found: list[MinuteStats] = []
        for day in stats.days(since, until):
            select = _rows(self.tables, t.CLIENT_STATS, {"client_id": client_id, "day": day})

            def within(select: Select = select) -> list[tuple[Any, Values]]:
                return [(k, row) for k, row in select() if since <= row["minute"] <= until]

            async for page in self._db.pages("read_stats", within):
                found.extend(_stats_of(client_id, row) for row in page)
        return found

    # -- throttle policies and tokens ---------------------------------------------------------------

    async def put_policy(self, policy: ThrottlePolicy) -> None:
        key = {"client_id": policy.client_id, "name": policy.name}
        values = {
            "max_in_flight": policy.max_in_flight,
            "release_timeout_s": policy.release_timeout_s,
            "created_at": policy.created_at,
            "updated_at": policy.updated_at,
        }
        await self._db.write(Write("put_policy", t.POLICIES, key, values, insert=True))

    async def get_policy(self, client_id: str, name: str) -> ThrottlePolicy | None:
        key = {"client_id": client_id, "name": name}
        rows = await self._db.rows("get_policy", _one(self.tables, t.POLICIES, key))
        return to.policy(rows[0]) if rows else None

    async def list_policies(self, client_id: str) -> list[ThrottlePolicy]:
        select = _rows(self.tables, t.POLICIES, {"client_id": client_id})
        return [to.policy(r) for r in await self._db.rows("list_policies", select)]

    async def delete_policy(self, client_id: str, name: str) -> None:
        await self._db.write(Write("delete_policy", t.POLICIES, {"client_id": client_id, "name": name}, delete=True))

    async def tokens(self, client_id: str, policy: str) -> list[Token]:
        select = _rows(self.tables, t.TOKENS, {"client_id": client_id, "policy": policy})
        return [to.token(r) for r in await self._db.rows("read_tokens", select)]

    async def take_token(self, token: Token, ttl_s: int) -> bool:
        key = {"client_id": token.client_id, "policy": token.policy, "slot": token.slot}
        values = {"event_id": token.event_id, "holder": token.holder, "taken_at": token.taken_at}
        applied, _ = await self._db.lwt(Write("take_token", t.TOKENS, key, values, ttl_s=ttl_s, insert=True), None)
        return applied

    async def release_token(self, client_id: str, policy: str, slot: int, event_id: str) -> bool:
        key = {"client_id": client_id, "policy": policy, "slot": slot}
        applied, _ = await self._db.lwt(Write("release_token", t.TOKENS, key, delete=True), {"event_id": event_id})
        return applied

    # -- coordination -------------------------------------------------------------------------------

    async def heartbeat(self, node: NodeInfo, ttl_s: int) -> None:
        key = {"cluster": self.settings.cluster_name, "node_id": node.node_id}
        values = {
            "address": node.address,
            "metrics_port": node.metrics_port,
            "started_at": node.started_at,
            "heartbeat_at": node.heartbeat_at,
        }
        await self._db.write(Write("heartbeat", t.NODES, key, values, ttl_s=ttl_s, insert=True))

    async def leave(self, node_id: str) -> None:
        key = {"cluster": self.settings.cluster_name, "node_id": node_id}
        await self._db.write(Write("leave_cluster", t.NODES, key, delete=True))

    async def live_nodes(self) -> list[NodeInfo]:
        select = _rows(self.tables, t.NODES, {"cluster": self.settings.cluster_name})
        return [to.node(r) for r in await self._db.rows("live_nodes", select)]

    # -- for checkers (the simulation): read at once, no request, no fault, no yield to the loop ----------

    def peek_claim(self, instance: InstanceKey) -> Claim | None:
        row = self.tables.row(t.CLAIMS, _instance_key(instance))
        return Claim(instance, row.owner, row.epoch) if row is not None else None

    def peek_tokens(self, client_id: str, policy: str) -> list[Token]:
        select = _rows(self.tables, t.TOKENS, {"client_id": client_id, "policy": policy})
        return [to.token(values) for _, values in select()]

    async def get_claim(self, instance: InstanceKey) -> Claim | None:
        rows = await self._db.rows("get_claim", _one(self.tables, t.CLAIMS, _instance_key(instance)))
        return Claim(instance, rows[0].owner, rows[0].epoch) if rows else None

    async def list_claims(self) -> list[Claim]:
        return [
            Claim(InstanceKey(r.client_id, r.poller_id), r.owner, r.epoch)
            async for page in self._db.pages("list_claims", lambda: self.tables.scan(t.CLAIMS))
            for r in page
        ]

    async def claim(self, instance: InstanceKey, node_id: str, seen: Claim | None, now: datetime) -> Claim | None:
        key = _instance_key(instance)
        if seen is None:
            values = {"owner": node_id, "epoch": 1, "claimed_at": now}
            applied, _ = await self._db.lwt(Write("first_claim", t.CLAIMS, key, values, insert=True), None)
            return Claim(instance, node_id, 1) if applied else None
        epoch = seen.epoch + 1
        values = {"owner": node_id, "epoch": epoch, "claimed_at": now}
        applied, _ = await self._db.lwt(Write("take_claim", t.CLAIMS, key, values), {"epoch": seen.epoch})
        return Claim(instance, node_id, epoch) if applied else None

    async def release(self, claim: Claim) -> bool:
        write = Write("release_claim", t.CLAIMS, _instance_key(claim.instance), {"owner": None})
        applied, _ = await self._db.lwt(write, {"owner": claim.owner, "epoch": claim.epoch})
        return applied

    async def get_checkpoint(self, instance: InstanceKey) -> Checkpoint | None:
        rows = await self._db.rows("get_checkpoint", _one(self.tables, t.CHECKPOINTS, _instance_key(instance)))
        if not rows or rows[0].minute is None:
            return None
        return Checkpoint(instance, rows[0]["minute"], rows[0].epoch)

    async def write_checkpoint(self, claim: Claim, minute: datetime) -> None:
        stamp = timing.fenced_timestamp(claim.epoch, minute)
        values = {"minute": minute, "epoch": claim.epoch}
        write = Write("write_checkpoint", t.CHECKPOINTS, _instance_key(claim.instance), values, timestamp=stamp)
        await self._db.write(write)

    async def hot_marks(self, minute: datetime) -> list[HotMark]:
        select = _rows(self.tables, t.HOT_MARKS, {"minute": minute})
        rows = await self._db.rows("read_hot_marks", select)
        return [HotMark(minute, InstanceKey(r["client_id"], r["poller_id"]), r["touched_at"]) for r in rows]

    async def get_horizon(self, instance: InstanceKey) -> datetime | None:
        rows = await self._db.rows("get_horizon", _one(self.tables, t.HORIZONS, _instance_key(instance)))
        return cast(datetime, rows[0]["last_minute"]) if rows and rows[0].last_minute else None

    async def record_skipped(self, instance: InstanceKey, minute: datetime, reason: str, rows: int) -> None:
        key = _instance_key(instance) | {"minute": minute}
        ttl = self.settings.retention_s
        await self._db.write(
            Write("record_skipped", t.SKIPPED, key, {"reason": reason, "rows": rows}, ttl_s=ttl, insert=True)
        )


def _row_key(client_id: str, schedule_id: UUID, loc: Location) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "poller_id": loc.poller_id,
        "minute": loc.minute,
        "due_at": loc.due_at,
        "schedule_id": schedule_id,
    }


def _stats_write(row: MinuteStats) -> Write:
    key = {
        "client_id": row.client_id,
        "day": row.minute.astimezone(UTC).date(),
        "minute": row.minute,
        "writer": row.writer,
    }
    values = {
        "delivered": row.delivered,
        "retried": row.retried,
        "failed": row.failed,
        "lateness": tuple(row.lateness),
        "lateness_max": row.lateness_max_s,
    }
    return Write("write_stats", t.CLIENT_STATS, key, values, ttl_s=stats.RETENTION_S, insert=True)


def _stats_of(client_id: str, row: Values) -> MinuteStats:
    lateness = tuple(row["lateness"] or ())
    return MinuteStats(
        client_id,
        row["minute"],
        row["writer"],
        row["delivered"],
        row["retried"],
        row["failed"],
        lateness,
        row["lateness_max"],
    )


def _bkey(client_id: str, key: str) -> dict[str, Any]:
    return {"client_id": client_id, "key": key}


def _letter(row: Values) -> DeadLetter:
    """A dead letter with its redrive marks (``rows.dead_letter`` reads the columns it always had)."""
    return dataclasses.replace(to.dead_letter(row), redriven_at=row.redriven_at, redriven_due_at=row.redriven_due_at)


def _letter_ttl_s(letter: DeadLetter, at: datetime, retention_s: int) -> int:
    """What is left of the dead letter's own TTL: a mark expires with the row it marks."""
    return max(1, retention_s - int((at - letter.failed_at).total_seconds()))


def _letter_key(client_id: str, failed_at: datetime, schedule_id: UUID) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "day": failed_at.astimezone(UTC).date(),
        "failed_at": failed_at,
        "schedule_id": schedule_id,
    }


def _instance_key(instance: InstanceKey) -> dict[str, Any]:
    return {"client_id": instance.client_id, "poller_id": instance.poller_id}


def _due_range(
    minute: datetime, from_due: datetime | None, until_due: datetime | None
) -> tuple[datetime, datetime | None]:
    """A minute read's due-time bounds: from ``from_due`` (the minute's start), before ``until_due``."""
    return norm(from_due if from_due is not None else minute), None if until_due is None else norm(until_due)
