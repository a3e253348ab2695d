"""The one module that talks to Cassandra: the ``Store`` port implemented over cassandra-driver.

Every call goes through ``_execute``, the bridge from the driver's ``execute_async`` callbacks (run on
the driver's I/O thread) to an asyncio future, so nothing blocks the event loop. Statements are
prepared once in ``connect``; paging is explicit.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from uuid import UUID

from cassandra import ConsistencyLevel, DriverException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, ResponseFuture, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, PreparedStatement

from schema import queries, timing
from schema.errors import Conflict, StoreUnavailable
from schema.model import (
    Chain,
    Checkpoint,
    Claim,
    Client,
    DeadLetter,
    FireOutcome,
    HotMark,
    InstanceKey,
    ListCursor,
    Location,
    NodeInfo,
    Page,
    Run,
    Schedule,
    ScheduleRef,
    Status,
    ThrottlePolicy,
    Token,
    decode_callback,
    decode_options,
    encode_callback,
    encode_options,
)
from schema.settings import StoreSettings

Row = Any  # the driver's named tuples


def unset_if_none(value: Any) -> Any:
    """Bind "leave as is" instead of null: a null bound in a write is a tombstone in the partition,
    and schedule partitions must stay tombstone-free for the pollers' reads."""
    return UNSET_VALUE if value is None else value


def utc(moment: datetime) -> datetime:
    """The driver returns naive UTC datetimes; the model only holds aware ones."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def build_cluster(settings: StoreSettings) -> Cluster:
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc))
    profile = ExecutionProfile(
        load_balancing_policy=policy,
        consistency_level=ConsistencyLevel.name_to_value[settings.consistency],
        serial_consistency_level=ConsistencyLevel.name_to_value[settings.serial_consistency],
        request_timeout=settings.request_timeout_s,
    )
    auth = None
    if settings.username:
        auth = PlainTextAuthProvider(settings.username, settings.password or "")
    return Cluster(
        contact_points=list(settings.hosts),
        port=settings.port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        auth_provider=auth,
        connect_timeout=settings.connect_timeout_s,
        protocol_version=settings.protocol_version,
    )


class _Page:
    __slots__ = ("paging_state", "rows")

    def __init__(self, rows: list[Row], paging_state: bytes | None) -> None:
        self.rows = rows
        self.paging_state = paging_state


def _resolve(done: asyncio.Future[_Page], page: _Page) -> None:
    if not done.done():
        done.set_result(page)


def _reject(done: asyncio.Future[_Page], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)


class CassandraStore:
    """``schema.store.Store`` on Cassandra. Create with ``await CassandraStore.connect(settings)``."""

    def __init__(self, settings: StoreSettings, cluster: Cluster, session: Session) -> None:
        self.settings = settings
        self._cluster = cluster
        self._session = session
        self._stmts: dict[str, PreparedStatement] = {}
        # Highest minute this process has written per instance; the horizon write is skipped below it.
        self._horizons: dict[InstanceKey, datetime] = {}

    @classmethod
    async def connect(cls, settings: StoreSettings) -> CassandraStore:
        cluster = build_cluster(settings)
        try:
            session = await asyncio.to_thread(cluster.connect, settings.keyspace)
        except DriverException as exc:
            await asyncio.to_thread(cluster.shutdown)
            raise StoreUnavailable(f"cannot connect to Cassandra at {settings.hosts}: {exc}") from exc
        store = cls(settings, cluster, session)
        await asyncio.to_thread(store._prepare_all)
        return store

    def _prepare_all(self) -> None:
        for query in queries.load().values():
            stmt = self._session.prepare(query.cql)
            stmt.is_idempotent = query.idempotent
            stmt.fetch_size = self.settings.page_size
            self._stmts[query.name] = stmt

    async def close(self) -> None:
        await asyncio.to_thread(self._cluster.shutdown)

    # -- the bridge ---------------------------------------------------------------------------------

    def _execute(
        self, statement: Any, params: Sequence[Any] | None = None, paging_state: bytes | None = None
    ) -> asyncio.Future[_Page]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_Page] = loop.create_future()
        future: ResponseFuture = self._session.execute_async(statement, params, paging_state=paging_state)

        def on_rows(rows: list[Row]) -> None:
            loop.call_soon_threadsafe(_resolve, done, _Page(rows or [], future._paging_state))

        def on_error(exc: BaseException) -> None:
            loop.call_soon_threadsafe(_reject, done, exc)

        future.add_callbacks(on_rows, on_error)
        return done

    async def _run(self, name: str, *params: Any) -> list[Row]:
        try:
            page = await self._execute(self._stmts[name], params)
        except DriverException as exc:
            raise StoreUnavailable(f"{name}: {type(exc).__name__}: {exc}") from exc
        return page.rows

    async def _pages(self, name: str, *params: Any) -> AsyncIterator[list[Row]]:
        paging_state: bytes | None = None
        while True:
            try:
                page = await self._execute(self._stmts[name], params, paging_state)
            except DriverException as exc:
                raise StoreUnavailable(f"{name}: {type(exc).__name__}: {exc}") from exc
            yield page.rows
            if page.paging_state is None:
                return
            paging_state = page.paging_state

    async def _batch(self, items: Sequence[tuple[str, Sequence[Any]]], *, logged: bool) -> None:
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        for name, params in items:
            batch.add(self._stmts[name], params)
        batch.is_idempotent = all(self._stmts[name].is_idempotent for name, _ in items)
        try:
            await self._execute(batch)
        except DriverException as exc:
            raise StoreUnavailable(f"batch: {type(exc).__name__}: {exc}") from exc

    async def _applied(self, name: str, *params: Any) -> tuple[bool, Row]:
        """Run a lightweight transaction; (applied, the row as it now is or was)."""
        rows = await self._run(name, *params)
        return bool(rows[0][0]), rows[0]

    async def ping(self) -> None:
        try:
            await self._execute("SELECT release_version FROM system.local")
        except DriverException as exc:
            raise StoreUnavailable(f"Cassandra does not answer: {exc}") from exc

    # -- clients ------------------------------------------------------------------------------------

    async def create_client(self, client: Client) -> bool:
        applied, _ = await self._applied(
            "insert_client",
            client.client_id,
            client.poller_count,
            client.poller_span,
            client.active,
            client.api_key_hash,
            set(client.kafka_topics),
            client.created_at,
            client.updated_at,
            unset_if_none(client.resized_at),
        )
        return applied

    async def get_client(self, client_id: str) -> Client | None:
        rows = await self._run("get_client", client_id)
        return _client(rows[0]) if rows else None

    async def list_clients(self) -> list[Client]:
        return [_client(row) async for page in self._pages("list_clients") for row in page]

    async def update_client(self, client: Client) -> None:
        await self._run(
            "update_client",
            client.poller_count,
            client.poller_span,
            client.active,
            client.api_key_hash,
            set(client.kafka_topics),
            client.updated_at,
            unset_if_none(client.resized_at),
            client.client_id,
        )

    # -- schedules ----------------------------------------------------------------------------------

    def _ttl(self, due_at: datetime, now: datetime) -> int:
        return timing.row_ttl_s(due_at, now, self.settings.retention_s)

    def _row_insert(self, s: Schedule, now: datetime) -> tuple[str, Sequence[Any]]:
        loc = s.location
        return "insert_schedule", (
            s.client_id,
            loc.poller_id,
            loc.minute,
            loc.due_at,
            s.schedule_id,
            s.fire_at,
            s.version,
            s.payload,
            encode_callback(s.callback),
            s.attempts,
            unset_if_none(s.last_error),
            s.created_at,
            encode_options(s.options) if s.options is not None else UNSET_VALUE,
            s.seq or UNSET_VALUE,
            self._ttl(loc.due_at, now),
        )

    def _hot_mark(self, instance: InstanceKey, loc: Location, now: datetime) -> list[tuple[str, Sequence[Any]]]:
        """The hot mark a write at ``loc`` needs if a poller may already have loaded its minute."""
        if not timing.is_hot(loc.due_at, now, self.settings.hot_window_s):
            return []
        return [("mark_hot", (now, loc.minute, instance.client_id, instance.poller_id))]

    def _raise_horizon(self, instance: InstanceKey, loc: Location) -> list[tuple[str, Sequence[Any]]]:
        """The horizon write a new row at ``loc`` needs, unless this process already wrote a later one."""
        known = self._horizons.get(instance)
        if known is not None and loc.minute <= known:
            return []
        stamp = timing.horizon_timestamp(loc.minute)
        return [("raise_horizon", (stamp, loc.minute, instance.client_id, instance.poller_id))]

    def _new_row_signals(self, instance: InstanceKey, loc: Location, now: datetime) -> list[tuple[str, Sequence[Any]]]:
        return self._hot_mark(instance, loc, now) + self._raise_horizon(instance, loc)

    def _note_horizon(self, instance: InstanceKey, minute: datetime) -> None:
        known = self._horizons.get(instance)
        if known is None or minute > known:
            self._horizons[instance] = minute

    def _creation(self, schedule: Schedule, now: datetime) -> list[tuple[str, Sequence[Any]]]:
        loc = schedule.location
        return [
            self._row_insert(schedule, now),
            (
                "insert_ref",
                (
                    schedule.client_id,
                    schedule.schedule_id,
                    loc.poller_id,
                    loc.due_at,
                    schedule.version,
                    self._ttl(loc.due_at, now),
                ),
            ),
            *self._new_row_signals(schedule.instance, loc, now),
        ]

    async def create_schedule(self, schedule: Schedule, now: datetime) -> None:
        await self.create_schedules([schedule], now)

    async def create_schedules(self, schedules: Sequence[Schedule], now: datetime) -> None:
        # One logged batch for the group: a Cassandra request costs far more than a statement in it
        # (bench-api: 4 schedules per batch cut driver and Cassandra CPU per schedule about in half).
        items = [item for schedule in schedules for item in self._creation(schedule, now)]
        await self._batch(items, logged=True)
        for schedule in schedules:
            self._note_horizon(schedule.instance, schedule.location.minute)

    async def claim_idempotency_key(self, client_id: str, key: str, schedule_id: UUID) -> UUID:
        applied, row = await self._applied("claim_idempotency_key", client_id, key, schedule_id)
        if applied:
            return schedule_id
        existing: UUID = row.schedule_id
        return existing

    async def get_ref(self, client_id: str, schedule_id: UUID) -> ScheduleRef | None:
        rows = await self._run("get_ref", client_id, schedule_id)
        if not rows:
            return None
        row = rows[0]
        previous = None
        if row.prev_poller_id is not None and row.prev_due_at is not None:
            previous = Location(row.prev_poller_id, utc(row.prev_due_at))
        location = Location(row.poller_id, utc(row.due_at))
        return ScheduleRef(client_id, schedule_id, location, row.version, previous, row.changed_version or 0)

    async def _row_at(self, client_id: str, schedule_id: UUID, loc: Location) -> Schedule | None:
        rows = await self._run("get_schedule", client_id, loc.poller_id, loc.minute, loc.due_at, schedule_id)
        return _schedule(rows[0]) if rows else None

    async def get_schedule(self, client_id: str, schedule_id: UUID) -> Schedule | None:
        ref = await self.get_ref(client_id, schedule_id)
        if ref is None:
            return None
        row = await self._row_at(client_id, schedule_id, ref.location)
        if row is None and ref.previous is not None:
            # A move was acknowledged by the pointer but its row write did not land: the old row
            # is still the live one (and still fires), so that is the schedule's truth.
            row = await self._row_at(client_id, schedule_id, ref.previous)
        return row

    async def _bump_ref(
        self, current: Schedule, new_loc: Location, version: int, now: datetime, *, by_client: bool = True
    ) -> None:
        """Move the pointer to ``new_loc`` at ``version`` if it is still at ``current.version``.

        ``by_client``: the change is the client's (it also becomes the last client-changed version);
        a poller's own moves (retries, next occurrences) leave that alone."""
        old = current.location
        prev = old if old != new_loc else None
        head = (
            self._ttl(new_loc.due_at, now),
            new_loc.poller_id,
            new_loc.due_at,
            version,
            prev.poller_id if prev else UNSET_VALUE,
            prev.due_at if prev else UNSET_VALUE,
        )
        tail = (current.client_id, current.schedule_id, current.version)
        if by_client:
            applied, _ = await self._applied("bump_ref", *head, version, *tail)
        else:
            applied, _ = await self._applied("move_ref", *head, *tail)
        if not applied:
            raise Conflict("the schedule was changed concurrently; read it again and retry")

    async def cancel_schedule(self, current: Schedule, now: datetime) -> Schedule:
        version = current.version + 1
        await self._bump_ref(current, current.location, version, now)
        loc = current.location
        items: list[tuple[str, Sequence[Any]]] = [
            (
                "set_status",
                (
                    self.settings.retention_s,
                    Status.CANCELLED.value,
                    current.client_id,
                    loc.poller_id,
                    loc.minute,
                    loc.due_at,
                    current.schedule_id,
                ),
            )
        ]
        items += self._hot_mark(current.instance, loc, now)
        await self._batch(items, logged=len(items) > 1)
        return dataclasses.replace(current, status=Status.CANCELLED, version=version)

    async def replace_schedule(self, current: Schedule, updated: Schedule, now: datetime) -> Schedule:
        new = dataclasses.replace(updated, version=current.version + 1, status=Status.SCHEDULED)
        await self._bump_ref(current, new.location, new.version, now)
        await self._write_replacement(current, new, now)
        return new

    async def _write_replacement(self, current: Schedule, new: Schedule, now: datetime) -> None:
        """The rows of a move whose pointer is already bumped: the new row, its signals, the old row MOVED."""
        items = [self._row_insert(new, now), *self._new_row_signals(new.instance, new.location, now)]
        old = current.location
        if old != new.location:
            items.append(
                (
                    "set_status",
                    (
                        self.settings.retention_s,
                        Status.MOVED.value,
                        current.client_id,
                        old.poller_id,
                        old.minute,
                        old.due_at,
                        current.schedule_id,
                    ),
                )
            )
            items += self._hot_mark(current.instance, old, now)
        await self._batch(items, logged=True)
        self._note_horizon(new.instance, new.location.minute)

    async def requeue_schedule(
        self, current: Schedule, due_at: datetime, attempts: int, last_error: str, now: datetime
    ) -> Schedule:
        """Move a fire whose callback failed to a later due time (a durable retry): same nominal time,
        so the same fire id. Raises ``Conflict`` if the client changed the schedule meanwhile.

        Safe to call again with the same arguments after ``StoreUnavailable``: if the earlier call moved
        the pointer but its rows did not land, this call finds its own move there and writes the rows.
        """
        loc = Location(current.location.poller_id, timing.truncate_ms(due_at))
        retry = dataclasses.replace(current, location=loc, attempts=attempts, last_error=last_error)
        event = current.options.event if current.options is not None else None
        if current.repeat is not None or event is not None:
            # The pointer of a recurring schedule has moved on to its next occurrence (and an event row
            # has none): a retry of this fire is a row of its own, and its run shows it waiting.
            new = dataclasses.replace(retry, status=Status.SCHEDULED)
            await self._write_replacement(current, new, now)
            if event is None:
                await self._run_write(new, Status.SCHEDULED, now, last_error)
            return new
        try:
            new = dataclasses.replace(retry, version=current.version + 1, status=Status.SCHEDULED)
            await self._bump_ref(current, loc, new.version, now, by_client=False)
            await self._write_replacement(current, new, now)
        except Conflict:
            ref = await self.get_ref(current.client_id, current.schedule_id)
            if ref is None or ref.version != current.version + 1 or ref.location != loc:
                raise
            new = dataclasses.replace(retry, version=ref.version, status=Status.SCHEDULED)
            await self._write_replacement(current, new, now)
        await self._run(
            "record_outcome",
            self.settings.retention_s,
            Status.MOVED.value,
            attempts,
            now,
            last_error,
            current.client_id,
            current.location.poller_id,
            current.location.minute,
            current.location.due_at,
            current.schedule_id,
        )
        return new

    async def chain_schedule(self, current: Schedule, following: Schedule | None, now: datetime) -> Chain:
        """Move a recurring schedule on from ``current`` (the occurrence about to fire) to ``following``
        (its next occurrence, or None when the timeline ends), if nobody changed it since ``current``
        was written: the compare-and-set that keeps a changed or cancelled schedule's old occurrences
        from firing. Safe to call again with the same arguments after ``StoreUnavailable``."""
        version = current.version + 1
        target = following.location if following is not None else current.location
        try:
            await self._bump_ref(current, target, version, now, by_client=False)
        except Conflict:
            ref = await self.get_ref(current.client_id, current.schedule_id)
            if ref is None or ref.changed_version > current.version:
                return Chain.CHANGED
            if following is None or ref.version != version or ref.location != target:
                return Chain.ALREADY
            # This call's own earlier try moved the pointer; its row may not have landed.
        if following is not None:
            new = dataclasses.replace(following, version=version, status=Status.SCHEDULED)
            await self._batch(
                [self._row_insert(new, now), *self._new_row_signals(new.instance, target, now)], logged=True
            )
            self._note_horizon(new.instance, target.minute)
        return Chain.CHAINED

    async def _run_write(self, s: Schedule, status: Status, fired_at: datetime | None, error: str | None) -> None:
        await self._run(
            "record_run",
            s.client_id,
            s.schedule_id,
            s.fire_at,
            s.seq or UNSET_VALUE,
            status.value,
            s.attempts,
            fired_at if fired_at is not None else UNSET_VALUE,
            unset_if_none(error),
            *(n or UNSET_VALUE for n in (s.options.expansion if s.options is not None else (0, 0))),
            self.settings.retention_s,
        )

    async def list_runs(self, client_id: str, schedule_id: UUID, before: datetime | None, limit: int) -> list[Run]:
        """A recurring schedule's fires, newest first, with nominal time before ``before`` (exclusive)."""
        upper = before if before is not None else _FAR_FUTURE
        rows = await self._run("list_runs", client_id, schedule_id, upper, limit)
        return list(await asyncio.gather(*(self._run_of(client_id, schedule_id, r) for r in rows)))

    async def _run_of(self, client_id: str, schedule_id: UUID, r: Row) -> Run:
        run = Run(
            utc(r.nominal_at),
            Status(r.status),
            r.attempts or 0,
            utc(r.fired_at) if r.fired_at else None,
            r.last_error,
            r.seq or 0,
        )
        if not r.events:
            return run
        events = await self._run("read_run_events", client_id, schedule_id, r.nominal_at)
        done = [utc(e.fired_at) for e in events if e.status == Status.SUCCEEDED.value and e.fired_at]
        return dataclasses.replace(
            run,
            events=r.events,
            events_done=len(done),
            last_event_at=max(done) if done else None,
            window_end=run.nominal_at + timedelta(milliseconds=r.window_ms or 0),
        )

    async def add_events(self, rows: Sequence[Schedule], now: datetime) -> None:
        """Write the event rows one fire produced: one unlogged batch per partition (and chunk), with the
        partitions' hot marks and horizons. Rewriting the same rows (a fire re-expanded) is harmless."""
        by_partition: dict[tuple[InstanceKey, datetime], list[Schedule]] = defaultdict(list)
        for row in rows:
            by_partition[(row.instance, row.location.minute)].append(row)
        writes = []
        for (instance, _), group in by_partition.items():
            earliest = min((r.location for r in group), key=lambda loc: loc.due_at)
            for chunk in _chunks(group):
                writes.append(self._batch([self._row_insert(r, now) for r in chunk], logged=False))
            signals = self._new_row_signals(instance, earliest, now)
            if signals:
                writes.append(self._batch(signals, logged=False))
        await asyncio.gather(*writes)
        for instance, minute in by_partition:
            self._note_horizon(instance, minute)

    # -- throttle policies -------------------------------------------------------------------------

    async def put_policy(self, policy: ThrottlePolicy) -> None:
        await self._run(
            "put_policy",
            policy.client_id,
            policy.name,
            policy.max_in_flight,
            policy.release_timeout_s,
            policy.created_at,
            policy.updated_at,
        )

    async def get_policy(self, client_id: str, name: str) -> ThrottlePolicy | None:
        rows = await self._run("get_policy", client_id, name)
        return _policy(client_id, rows[0]) if rows else None

    async def list_policies(self, client_id: str) -> list[ThrottlePolicy]:
        return [_policy(client_id, r) for r in await self._run("list_policies", client_id)]

    async def delete_policy(self, client_id: str, name: str) -> None:
        await self._run("delete_policy", client_id, name)

    async def tokens(self, client_id: str, policy: str) -> list[Token]:
        rows = await self._run("read_tokens", client_id, policy)
        return [Token(client_id, policy, r.slot, r.event_id, r.holder, utc(r.taken_at)) for r in rows]

    async def take_token(self, token: Token, ttl_s: int) -> bool:
        """Take ``token.slot`` if nobody holds it (a compare-and-set: two takers never both win)."""
        applied, _ = await self._applied(
            "take_token",
            token.client_id,
            token.policy,
            token.slot,
            token.event_id,
            token.holder,
            token.taken_at,
            ttl_s,
        )
        return applied

    async def release_token(self, client_id: str, policy: str, slot: int, event_id: str) -> bool:
        """Free the slot if ``event_id`` still holds it; False if it was already released (or expired)."""
        applied, _ = await self._applied("release_token", client_id, policy, slot, event_id)
        return applied

    async def read_minute(
        self, instance: InstanceKey, minute: datetime, *, from_due: datetime | None = None
    ) -> AsyncIterator[list[Schedule]]:
        start = from_due if from_due is not None else minute
        async for rows in self._pages("read_minute", instance.client_id, instance.poller_id, minute, start):
            yield [_schedule(row) for row in rows]

    async def list_schedules(
        self,
        client: Client,
        start: datetime,
        end: datetime,
        status: Status | None,
        after: ListCursor | None,
        limit: int,
    ) -> Page:
        begin = max(start, after.due_at) if after is not None else start
        keep = _ListFilter(start, end, status, after)
        step = max(1, _LIST_CONCURRENCY // client.poller_span)
        minute, reads, found = timing.minute_bucket(begin), 0, list[Schedule]()
        while minute < end:
            chunk = [m for i in range(step) if (m := minute + timedelta(minutes=i)) < end]
            found += sorted(await self._list_chunk(client, chunk, begin, keep, limit), key=_list_order)
            minute, reads = chunk[-1] + timedelta(minutes=1), reads + len(chunk) * client.poller_span
            if len(found) >= limit:
                items = found[:limit]
                more = len(found) > limit or minute < end
                last = items[-1]
                return Page(items, ListCursor(last.location.due_at, last.schedule_id).encode() if more else None)
            if reads >= _LIST_READ_BUDGET and minute < end:
                return Page(found, ListCursor(minute).encode())
        return Page(found, None)

    async def _list_chunk(
        self, client: Client, minutes: list[datetime], begin: datetime, keep: _ListFilter, limit: int
    ) -> list[Schedule]:
        gate = asyncio.Semaphore(_LIST_CONCURRENCY)

        async def one(instance: InstanceKey, minute: datetime) -> list[Schedule]:
            async with gate:
                return await self._list_partition(instance, minute, max(minute, begin), keep, limit)

        reads = [
            one(InstanceKey(client.client_id, poller_id), minute)
            for minute in minutes
            for poller_id in range(client.poller_span)
        ]
        return [s for rows in await asyncio.gather(*reads) for s in rows]

    async def _list_partition(
        self, instance: InstanceKey, minute: datetime, from_due: datetime, keep: _ListFilter, limit: int
    ) -> list[Schedule]:
        kept: list[Schedule] = []
        # read_minute is an async generator: close it when stopping early so its query does not dangle.
        pages = cast(AsyncGenerator[list[Schedule], None], self.read_minute(instance, minute, from_due=from_due))
        async with aclosing(pages):
            async for page in pages:
                kept += filter(keep, page)
                if len(kept) >= limit:
                    break
        return kept[:limit]

    async def record_outcomes(self, outcomes: Sequence[FireOutcome]) -> None:
        by_partition: dict[tuple[str, int, datetime], list[tuple[str, Sequence[Any]]]] = defaultdict(list)
        ttl = self.settings.retention_s
        for o in outcomes:
            loc = o.location
            by_partition[(o.client_id, loc.poller_id, loc.minute)].append(
                (
                    "record_outcome",
                    (
                        ttl,
                        o.status.value,
                        o.attempts,
                        o.fired_at,
                        unset_if_none(o.last_error),
                        o.client_id,
                        loc.poller_id,
                        loc.minute,
                        loc.due_at,
                        o.schedule_id,
                    ),
                )
            )
        runs = [
            self._run(
                "record_run",
                o.client_id,
                o.schedule_id,
                o.nominal_at,
                o.seq or UNSET_VALUE,
                o.status.value,
                o.attempts,
                o.fired_at,
                unset_if_none(o.last_error),
                o.events or UNSET_VALUE,
                o.window_ms or UNSET_VALUE,
                ttl,
            )
            for o in outcomes
            if o.nominal_at is not None and o.event is None
        ]
        runs += [
            self._run(
                "record_run_event",
                o.client_id,
                o.event.parent,
                o.nominal_at,
                o.event.index,
                o.status.value,
                o.fired_at,
                ttl,
            )
            for o in outcomes
            if o.event is not None and o.nominal_at is not None
        ]
        await asyncio.gather(*(self._batch(items, logged=False) for items in by_partition.values()), *runs)

    async def add_dead_letter(self, letter: DeadLetter) -> None:
        day = letter.failed_at.astimezone(UTC).date()
        await self._run(
            "insert_dead_letter",
            letter.client_id,
            day,
            letter.failed_at,
            letter.schedule_id,
            letter.fire_id,
            letter.attempts,
            letter.last_error,
            encode_callback(letter.callback),
            letter.payload,
            self.settings.retention_s,
        )

    async def dead_letters(self, client_id: str, day: date) -> list[DeadLetter]:
        return [
            DeadLetter(
                client_id,
                row.schedule_id,
                row.fire_id,
                utc(row.failed_at),
                row.attempts,
                row.last_error,
                decode_callback(row.callback),
                row.payload,
            )
            async for page in self._pages("read_dead_letters", client_id, day)
            for row in page
        ]

    # -- coordination -------------------------------------------------------------------------------

    async def heartbeat(self, node: NodeInfo, ttl_s: int) -> None:
        await self._run(
            "heartbeat",
            self.settings.cluster_name,
            node.node_id,
            node.address,
            node.metrics_port,
            node.started_at,
            node.heartbeat_at,
            ttl_s,
        )

    async def leave(self, node_id: str) -> None:
        await self._run("leave_cluster", self.settings.cluster_name, node_id)

    async def live_nodes(self) -> list[NodeInfo]:
        rows = await self._run("live_nodes", self.settings.cluster_name)
        return [NodeInfo(r.node_id, r.address, r.metrics_port, utc(r.started_at), utc(r.heartbeat_at)) for r in rows]

    async def get_claim(self, instance: InstanceKey) -> Claim | None:
        rows = await self._run("get_claim", instance.client_id, instance.poller_id)
        return Claim(instance, rows[0].owner, rows[0].epoch) if rows else None

    async def claim(self, instance: InstanceKey, node_id: str, seen: Claim | None, now: datetime) -> Claim | None:
        if seen is None:
            applied, _ = await self._applied("first_claim", instance.client_id, instance.poller_id, node_id, now)
            return Claim(instance, node_id, 1) if applied else None
        epoch = seen.epoch + 1
        applied, _ = await self._applied(
            "take_claim", node_id, epoch, now, instance.client_id, instance.poller_id, seen.epoch
        )
        return Claim(instance, node_id, epoch) if applied else None

    async def release(self, claim: Claim) -> bool:
        applied, _ = await self._applied(
            "release_claim", claim.instance.client_id, claim.instance.poller_id, claim.owner, claim.epoch
        )
        return applied

    async def get_checkpoint(self, instance: InstanceKey) -> Checkpoint | None:
        rows = await self._run("get_checkpoint", instance.client_id, instance.poller_id)
        if not rows or rows[0].minute is None:
            return None
        return Checkpoint(instance, utc(rows[0].minute), rows[0].epoch)

    async def write_checkpoint(self, claim: Claim, minute: datetime) -> None:
        instance = claim.instance
        await self._run(
            "write_checkpoint",
            timing.fenced_timestamp(claim.epoch, minute),
            minute,
            claim.epoch,
            instance.client_id,
            instance.poller_id,
        )

    async def hot_marks(self, minute: datetime) -> list[HotMark]:
        rows = await self._run("read_hot_marks", minute)
        return [HotMark(minute, InstanceKey(r.client_id, r.poller_id), utc(r.touched_at)) for r in rows]

    async def get_horizon(self, instance: InstanceKey) -> datetime | None:
        rows = await self._run("get_horizon", instance.client_id, instance.poller_id)
        return utc(rows[0].last_minute) if rows and rows[0].last_minute else None

    async def record_skipped(self, instance: InstanceKey, minute: datetime, reason: str, rows: int) -> None:
        await self._run(
            "record_skipped",
            instance.client_id,
            instance.poller_id,
            minute,
            reason,
            rows,
            self.settings.retention_s,
        )


def _client(row: Row) -> Client:
    return Client(
        client_id=row.client_id,
        poller_count=row.poller_count,
        poller_span=row.poller_span or row.poller_count,
        active=bool(row.active),
        api_key_hash=row.api_key_hash or "",
        kafka_topics=frozenset(row.kafka_topics or ()),
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        resized_at=utc(row.resized_at) if row.resized_at else None,
    )


def _policy(client_id: str, row: Row) -> ThrottlePolicy:
    return ThrottlePolicy(
        client_id, row.name, row.max_in_flight, row.release_timeout_s, utc(row.created_at), utc(row.updated_at)
    )


def _schedule(row: Row) -> Schedule:
    return Schedule(
        client_id=row.client_id,
        schedule_id=row.schedule_id,
        location=Location(row.poller_id, utc(row.due_at)),
        fire_at=utc(row.fire_at),
        payload=row.payload or b"",
        callback=decode_callback(row.callback),
        created_at=utc(row.created_at),
        status=Status(row.status),
        version=row.version or 1,
        attempts=row.attempts or 0,
        fired_at=utc(row.fired_at) if row.fired_at else None,
        last_error=row.last_error,
        options=decode_options(row.options) if row.options else None,
        seq=row.seq or 0,
    )


_FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)
# Event rows per unlogged batch (one partition each): at most this many, and about this many bytes,
# well under Cassandra's batch_size_fail_threshold (50 KiB by default).
_EVENT_CHUNK = 50
_EVENT_CHUNK_BYTES = 16 * 1024
_ROW_OVERHEAD_BYTES = 256


def _chunks(rows: Sequence[Schedule]) -> list[list[Schedule]]:
    out: list[list[Schedule]] = [[]]
    size = 0
    for row in rows:
        cost = len(row.payload) + _ROW_OVERHEAD_BYTES
        if out[-1] and (len(out[-1]) >= _EVENT_CHUNK or size + cost > _EVENT_CHUNK_BYTES):
            out.append([])
            size = 0
        out[-1].append(row)
        size += cost
    return [chunk for chunk in out if chunk]


# Listing: partition reads in flight at once, and per page (a page may end early on the budget).
_LIST_CONCURRENCY = 32
_LIST_READ_BUDGET = 2048


def _list_order(schedule: Schedule) -> tuple[datetime, UUID]:
    return schedule.location.due_at, schedule.schedule_id


@dataclasses.dataclass(frozen=True, slots=True)
class _ListFilter:
    start: datetime
    end: datetime
    status: Status | None
    after: ListCursor | None

    def __call__(self, s: Schedule) -> bool:
        due = s.location.due_at
        if s.status is Status.MOVED or not self.start <= due < self.end:
            return False
        if s.options is not None and s.options.event is not None:
            return False  # an event of a batch trigger: shown in its schedule's runs, not as a schedule
        if self.status is not None and s.status is not self.status:
            return False
        if self.after is None:
            return True
        if self.after.schedule_id is None:
            return due >= self.after.due_at
        return (due, s.schedule_id) > (self.after.due_at, self.after.schedule_id)
