"""Schedules: their rows (in the (client, poller, minute) partitions), the by-id refs, moves, listing,
fire outcomes and dead letters.

The writes of a create are plain functions (``creation``, ``create_statements``) so that whatever else
writes schedules the way the API does (bench-api's raw phases) cannot drift from the store.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import datetime
from uuid import UUID

from cassandra.query import UNSET_VALUE, PreparedStatement

from tickd.schema import aio, batchlog, changes, listing, moves, timing
from tickd.schema.cassandra import runs
from tickd.schema.cassandra.bridge import (
    Part,
    Row,
    Statements,
    Values,
    Write,
    fields_of,
    unset_if_none,
    utc,
    write_bytes,
)
from tickd.schema.cassandra.bulk import tag_writes
from tickd.schema.cassandra.coordination import Horizons, hot_mark, new_row_signals
from tickd.schema.cassandra.dead_letters import dead_letter_key
from tickd.schema.cassandra.runs import run_write
from tickd.schema.errors import BatchNotLogged, Conflict, OutcomeUnknown
from tickd.schema.model import (
    DeadLetter,
    FireOutcome,
    IdempotencyKey,
    InstanceKey,
    ListCursor,
    Location,
    RowStamp,
    Run,
    Schedule,
    ScheduleRef,
    Status,
    Try,
    decode_callback,
    decode_options,
    decode_tries,
    encode_callback,
    encode_options,
    encode_tries,
)
from tickd.schema.settings import StoreSettings

# -- the writes, as plain functions -------------------------------------------------------------------


def event_insert(s: Schedule, now: datetime, retention_s: int) -> Write:
    """An event row: as ``row_insert``, but leaving the status (and attempts) of a row already there."""
    _, values = row_insert(s, now, retention_s)
    unwritten = ("attempts", "ts", "tries", "status")
    return "insert_event", {name: value for name, value in values.items() if name not in unwritten}


def row_insert(s: Schedule, now: datetime, retention_s: int, ts: int | None = None) -> Write:
    """The schedule's row in its minute partition, with its status (scheduled, or paused: a pause
    parked where it ends), written at ``ts``, if given."""
    loc = s.location
    values = {
        **_row_key(s.client_id, s.schedule_id, loc),
        "status": Status.PAUSED.value if s.status is Status.PAUSED else Status.SCHEDULED.value,
        "fire_at": s.fire_at,
        "version": s.version,
        "payload": s.payload,
        "callback": encode_callback(s.callback),
        "attempts": s.attempts,
        "last_error": unset_if_none(s.last_error),
        "created_at": s.created_at,
        "options": encode_options(s.options) if s.options is not None else UNSET_VALUE,
        "seq": s.seq or UNSET_VALUE,
        "tries": tries_value(s.tries),
        "ttl": timing.row_ttl_s(loc.due_at, now, retention_s),
        "ts": unset_if_none(ts),
    }
    return "insert_schedule", values


def cleared(insert: Write, new: Schedule, old: Schedule) -> Write:
    """``insert`` of ``new`` over ``old``'s row (the same location): a column ``new`` leaves empty is
    written null where ``old`` had a value. Unset, it would keep ``old``'s (options removed by a PATCH,
    a cleared error): unset is what every other insert writes, so a plain create makes no tombstone."""
    name, values = insert
    gone = {
        "options": new.options is None and old.options is not None,
        "last_error": new.last_error is None and old.last_error is not None,
        "seq": not new.seq and bool(old.seq),
        "tries": not new.tries and bool(old.tries),
    }
    return name, {**values, **{column: None for column, empty in gone.items() if empty}}


def tries_value(tries: tuple[Try, ...]) -> object:
    """A ``tries`` column's value: unset when there is none (a write keeps what the row had)."""
    return encode_tries(tries) if tries else UNSET_VALUE


def ref_insert(s: Schedule, now: datetime, retention_s: int, clock_us: int | None = None) -> Write:
    """The by-id pointer of a new schedule, below the ballot of any compare-and-set that moves it on
    (``clock_us``: the clients' clock, the real one if not given)."""
    loc = s.location
    clock_us = clock_us if clock_us is not None else time.time_ns() // 1000
    values = {
        "client_id": s.client_id,
        "schedule_id": s.schedule_id,
        "poller_id": loc.poller_id,
        "due_at": loc.due_at,
        "version": s.version,
        "ttl": timing.row_ttl_s(loc.due_at, now, retention_s),
        "ts": timing.below_ballots(clock_us),
    }
    return "insert_ref", values


def status_write(s: Schedule, loc: Location, status: Status, now: datetime, retention_s: int, ts: int | None) -> Write:
    """A row's new status (``s``'s at ``loc``), expiring with the row: a status cell that expired first
    would leave the row reading as scheduled again (a schedule cancelled more than the retention ahead would fire)."""
    ttl = timing.row_ttl_s(loc.due_at, now, retention_s)
    values = {**_row_key(s.client_id, s.schedule_id, loc), "status": status.value, "ttl": ttl, "ts": unset_if_none(ts)}
    return "set_status", values


def outcome_write(o: FireOutcome, retention_s: int) -> Write:
    """What became of a fire, on its row (``record_outcome``)."""
    loc = o.location
    values = {
        **_row_key(o.client_id, o.schedule_id, loc),
        "ttl": timing.row_ttl_s(loc.due_at, o.fired_at, retention_s),  # expires with the row, see status_write
        "status": o.status.value,
        "attempts": o.attempts,
        "fired_at": o.fired_at,
        "last_error": unset_if_none(o.last_error),
        "tries": tries_value(o.tries),
        "ts": unset_if_none(o.write_ts),
    }
    return "record_outcome", values


def creation(
    s: Schedule,
    now: datetime,
    settings: StoreSettings,
    horizons: Horizons,
    clock_us: int | None = None,
    retention_s: int | None = None,
) -> list[Write]:
    """Every write of one create: the row, the pointer, and the signals the pollers need. ``retention_s``:
    the client's (default: the deployment's)."""
    kept = retention_s if retention_s is not None else settings.retention_s
    return [
        row_insert(s, now, kept),
        ref_insert(s, now, kept, clock_us),
        *new_row_signals(horizons, s.instance, s.location, now, settings.hot_window_s),
        *tag_writes(s, now, kept),
    ]


def create_statements(
    statements: Statements, s: Schedule, now: datetime, settings: StoreSettings, horizons: Horizons
) -> list[tuple[PreparedStatement, Values]]:
    """``creation`` as prepared statements with their values, for a caller with its own driver session.
    Call ``horizons.note(s.instance, s.location.minute)`` once they are written."""
    return [statements.bind(name, values) for name, values in creation(s, now, settings, horizons)]


def _row_key(client_id: str, schedule_id: UUID, loc: Location) -> dict[str, object]:
    return {
        "client_id": client_id,
        "poller_id": loc.poller_id,
        "minute": loc.minute,
        "due_at": loc.due_at,
        "schedule_id": schedule_id,
    }


# -- the store ----------------------------------------------------------------------------------------


class Schedules(changes.ClientChanges, moves.PollerMoves, listing.Listing, Part):
    """``schema.store.ScheduleStore`` on Cassandra, but for throttle policies and runs."""

    _horizons: Horizons
    _unlogged: batchlog.Fallbacks

    def _signals(self, instance: InstanceKey, loc: Location, now: datetime) -> list[Write]:
        return new_row_signals(self._horizons, instance, loc, now, self.settings.hot_window_s)

    async def create_schedule(self, schedule: Schedule, now: datetime) -> None:
        await self.create_schedules([schedule], now)

    async def create_schedules(self, schedules: Sequence[Schedule], now: datetime) -> None:
        # One logged batch for the group: a Cassandra request costs far more than a statement in it
        # (bench-api: 4 schedules per batch cut driver and Cassandra CPU per schedule about in half).
        clock_us = self._clock.clock_us()
        each = [
            creation(s, now, self.settings, self._horizons, clock_us, self._retention(s.client_id)) for s in schedules
        ]
        writes = [w for ws in each for w in ws]
        if len(each) > 1 and write_bytes(writes) > self.settings.batch_max_bytes:
            # Callers group creates under the limit (service.creates); should one not, write each alone.
            await aio.gather(*(self._together(ws) for ws in each))
        else:
            await self._together(writes)
        for schedule in schedules:
            self._horizons.note(schedule.instance, schedule.location.minute)

    async def reserve_idempotency_key(self, reservation: IdempotencyKey) -> IdempotencyKey:
        values = fields_of(reservation)
        try:
            applied, row = await self._db.applied("reserve_idempotency_key", values)
        except OutcomeUnknown:
            # Timed out (a replica crashed mid-round, C3): sent again, it applies, or finds the row this
            # one wrote, which names this request's schedule id, so the create goes on as its own. Under
            # an API request it has only what is left of the request's store budget (schema.deadline).
            applied, row = await self._db.applied("reserve_idempotency_key", values)
        if applied:
            return reservation
        created_at = utc(row.created_at) if row.created_at else None
        return dataclasses.replace(
            reservation, schedule_id=row.schedule_id, request_digest=row.request_digest, created_at=created_at
        )

    async def get_ref(self, client_id: str, schedule_id: UUID) -> ScheduleRef | None:
        rows = await self._db.rows("get_ref", {"client_id": client_id, "schedule_id": schedule_id})
        if not rows:
            return None
        row = rows[0]
        previous = None
        if row.prev_poller_id is not None and row.prev_due_at is not None:
            previous = Location(row.prev_poller_id, utc(row.prev_due_at))
        location = Location(row.poller_id, utc(row.due_at))
        stale = tuple(Location(p, utc(d)) for p, d in row.stale or ())
        return ScheduleRef(
            client_id, schedule_id, location, row.version, previous, row.changed_version or 0, row.write_ts, stale
        )

    async def _row_at(self, client_id: str, schedule_id: UUID, loc: Location) -> Schedule | None:
        rows = await self._db.rows("get_schedule", _row_key(client_id, schedule_id, loc))
        return _schedule(rows[0]) if rows and rows[0].fire_at is not None else None

    async def _bump_ref(
        self,
        current: Schedule,
        new_loc: Location,
        version: int,
        now: datetime,
        *,
        by_client: bool = True,
        base: changes.Base | None = None,
        stale: tuple[Location, ...] | None = None,
    ) -> None:
        """Move the pointer to ``new_loc`` at ``version`` if it is still at ``current.version`` (a client
        change: at ``base.version``, recording its write timestamp and the stale targets it fences).

        ``by_client``: the change is the client's (it also becomes the last client-changed version);
        a poller's own moves (retries, next occurrences) leave that alone, and rewrite the stale targets
        only when given ``stale`` (``changes.kept_stale``)."""
        prev = current.location if current.location != new_loc else None
        values = {
            "ttl": timing.row_ttl_s(new_loc.due_at, now, self._retention(current.client_id)),
            "poller_id": new_loc.poller_id,
            "due_at": new_loc.due_at,
            "version": version,
            "prev_poller_id": prev.poller_id if prev else UNSET_VALUE,
            "prev_due_at": prev.due_at if prev else UNSET_VALUE,
            "client_id": current.client_id,
            "schedule_id": current.schedule_id,
            "seen_version": base.version if base is not None else current.version,
        }
        if by_client:
            values["write_ts"] = base.write_ts if base is not None else UNSET_VALUE
            values["stale"] = [(loc.poller_id, loc.due_at) for loc in base.stale] if base is not None else UNSET_VALUE
        else:
            values["stale"] = [(loc.poller_id, loc.due_at) for loc in stale] if stale is not None else UNSET_VALUE
        applied, _ = await self._db.applied("bump_ref" if by_client else "move_ref", values)
        if not applied:
            raise Conflict("the schedule was changed concurrently; read it again and retry")

    def _write_clock(self) -> int:
        return self._clock.write_timestamp()  # as the connection's client-side timestamps

    async def _write_status(
        self, current: Schedule, status: Status, version: int, now: datetime, base: changes.Base
    ) -> None:
        write = status_write(current, current.location, status, now, self._retention(current.client_id), base.write_ts)
        if status is Status.PAUSED:  # a paused row carries its pause's version (see changes.abandoned)
            write = ("set_status_version", {**write[1], "version": version})
        writes = [write, *hot_mark(current.instance, current.location, now, self.settings.hot_window_s)]
        writes += self._moved(current, changes.fenced(base.stale, current.location), now, base.write_ts)
        await self._together(writes)

    def _moved(self, current: Schedule, targets: list[Location], now: datetime, ts: int | None) -> list[Write]:
        """``current``'s rows at ``targets`` marked moved (at ``ts``, if given), with their hot marks: the row
        a move retires, or abandoned changes' targets (a late copy of their rows never fires)."""
        writes = []
        for loc in targets:
            writes.append(status_write(current, loc, Status.MOVED, now, self._retention(current.client_id), ts))
            writes += hot_mark(InstanceKey(current.client_id, loc.poller_id), loc, now, self.settings.hot_window_s)
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
        """The rows of a move whose pointer is already bumped: the new row, its signals, the old row MOVED
        (a client change's at its write timestamp, with its fences)."""
        ts = base.write_ts if base is not None else None
        insert = row_insert(new, now, self._retention(current.client_id), ts)
        if new.location == current.location and new.schedule_id == current.schedule_id:
            insert = cleared(insert, new, current)
        if keep_status:  # see insert_retry in queries.cql
            insert = ("insert_retry", {k: v for k, v in insert[1].items() if k not in ("ts", "status")})
        writes = [insert, *self._signals(new.instance, new.location, now)]
        if base is not None:  # a client's change may set tags, or move a one-time schedule's expiry
            writes += tag_writes(new, now, self._retention(current.client_id))
        if current.location != new.location or new.schedule_id != current.schedule_id:
            writes += self._moved(current, [current.location], now, ts)
        if base is not None:
            writes += self._moved(current, changes.fenced(base.stale, new.location), now, base.write_ts)
        # A poller's move (no base) goes whole or not at all: cut short between its new row and retiring
        # the old, it would leave two live rows of one fire, and the next owner would send both.
        await self._together(writes, unlogged_ok=base is not None)
        self._horizons.note(new.instance, new.location.minute)

    async def _together(self, writes: list[Write], *, unlogged_ok: bool = True) -> None:
        """Writes that belong together, in one logged batch while it holds at most ``batch_max_bytes``.

        Cassandra refuses a multi-partition batch over its batch_size_fail_threshold (50 KiB by default),
        and cannot log one while a node it picked to hold the log is down but not yet convicted
        (``BatchNotLogged``). Either way the writes go in ``schema.batchlog``'s phases instead, unlogged,
        each row on its own (one partition: not subject to the threshold); for the second, only if
        ``unlogged_ok``, else ``BatchNotLogged`` is raised (a poller's move: see ``_write_replacement``)."""
        if len(writes) == 1:
            await self._db.batch(writes, logged=False)
            return
        if write_bytes(writes) <= self.settings.batch_max_bytes:
            try:
                await self._db.batch(writes, logged=True)
                return
            except BatchNotLogged as exc:
                if not unlogged_ok:
                    raise
                self._unlogged.note(str(exc))
        await batchlog.send_in_phases(writes, [name for name, _ in writes], self._db.batch)

    async def requeue_schedule(
        self, current: Schedule, due_at: datetime, attempts: int, last_error: str, now: datetime
    ) -> Schedule:
        """Move a fire whose callback failed to a later due time (a durable retry): same nominal time,
        so the same fire id. Raises ``Conflict`` if the client changed the schedule meanwhile.

        Safe to call again with the same arguments after ``StoreUnavailable``: if the earlier call moved
        the pointer but its rows did not land, this call finds its own move there and writes the rows.
        """
        retry = moves.retry_row(current, due_at, attempts, last_error)
        event = current.options.event if current.options is not None else None
        if current.repeat is not None or event is not None:
            # The pointer of a recurring schedule has moved on to its next occurrence (and an event row
            # has none): a retry of this fire is a row of its own, and its run shows it waiting.
            new = dataclasses.replace(retry, status=Status.SCHEDULED)
            await self._write_replacement(current, new, now, keep_status=True)
            if event is None:
                run = runs.waiting_run(new, Status.SCHEDULED, now, last_error, self._retention(new.client_id))
                await self._db.write(*run)
            return new
        new = await self._move_for_retry(current, retry, now)
        moved = FireOutcome(
            current.client_id, current.schedule_id, current.location, Status.MOVED, attempts, now, last_error
        )
        await self._db.write(*outcome_write(moved, self._retention(moved.client_id)))
        return new

    async def _write_following(self, following: Schedule, at: Location, version: int, now: datetime) -> None:
        new = dataclasses.replace(following, location=at, version=version, status=Status.SCHEDULED)
        writes = [row_insert(new, now, self._retention(new.client_id)), *self._signals(new.instance, at, now)]
        await self._together(writes)
        self._horizons.note(new.instance, at.minute)

    async def add_events(self, rows: Sequence[Schedule], now: datetime) -> None:
        """Write the event rows one fire produced: one unlogged batch per partition (and chunk), with the
        partitions' hot marks and horizons. Rewriting the same rows (a fire re-expanded) keeps the status
        of events already delivered."""
        by_partition: dict[tuple[InstanceKey, datetime], list[Schedule]] = defaultdict(list)
        for row in rows:
            by_partition[(row.instance, row.location.minute)].append(row)
        writes = []
        for (instance, _), group in by_partition.items():
            earliest = min((r.location for r in group), key=lambda loc: loc.due_at)
            for chunk in listing.chunks(group):
                inserts = [event_insert(r, now, self._retention(r.client_id)) for r in chunk]
                writes.append(functools.partial(self._db.batch, inserts, logged=False))
            signals = self._signals(instance, earliest, now)
            if signals:
                writes.append(functools.partial(self._db.batch, signals, logged=False))
        await aio.gather_limited(writes, listing.EVENT_WRITES_IN_FLIGHT)
        for instance, minute in by_partition:
            self._horizons.note(instance, minute)

    async def read_minute(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncIterator[list[Schedule]]:
        query, values = _minute_range("read_minute", instance, minute, from_due, until_due)
        async for rows in self._db.pages(query, values):
            # A row without fire_at is a fence of a client change that never landed (schema.changes).
            yield [_schedule(row) for row in rows if row.fire_at is not None]

    async def list_minute(
        self, instance: InstanceKey, minute: datetime, start: ListCursor, max_rows: int
    ) -> tuple[list[Schedule], int, ListCursor | None]:
        values = {**fields_of(instance), "minute": minute, "max_rows": max_rows}
        if start.schedule_id is None:
            rows = await self._db.rows("list_minute", {**values, "from_due": start.due_at})
        else:
            rows = await self._db.rows("list_minute_after", {**values, **fields_of(start)})
        last = ListCursor(utc(rows[-1].due_at), rows[-1].schedule_id) if rows else None
        return [_schedule(row) for row in rows if row.fire_at is not None], len(rows), last

    async def read_minute_stamps(
        self,
        instance: InstanceKey,
        minute: datetime,
        *,
        from_due: datetime | None = None,
        until_due: datetime | None = None,
    ) -> AsyncGenerator[list[RowStamp], None]:
        query, values = _minute_range("read_minute_stamps", instance, minute, from_due, until_due)
        async for rows in self._db.pages(query, values):
            yield [_stamp(row) for row in rows if row.fire_at is not None]

    async def record_outcomes(self, outcomes: Sequence[FireOutcome]) -> None:
        """The fires' runs, then their rows' outcomes: a row no longer scheduled is fired by nobody again,
        so what its run says must be stored first. Written together, a run lost beside a row that landed
        left the occurrence with no record (simulation seed 440269 at aa45d95: an occurrence skipped past
        its start deadline, its row marked skipped, its run write failing until the node lost its lease;
        the next owner had no scheduled row to redo it from). A run written and a row outcome lost leaves
        the row scheduled: its next owner fires it again (across a crash) and writes its run again."""
        by_partition: dict[tuple[str, int, datetime], list[Write]] = defaultdict(list)
        for o in outcomes:
            write = outcome_write(o, self._retention(o.client_id))
            by_partition[(o.client_id, o.location.poller_id, o.location.minute)].append(write)
        await aio.gather(*(self._db.write(*w) for w in runs.run_writes(outcomes, self._retention)))
        await aio.gather(*(self._db.batch(writes, logged=False) for writes in by_partition.values()))

    async def add_dead_letter(self, letter: DeadLetter) -> None:
        values = {
            **dead_letter_key(letter.client_id, letter.failed_at, letter.schedule_id),
            "fire_id": letter.fire_id,
            "attempts": letter.attempts,
            "last_error": letter.last_error,
            "callback": encode_callback(letter.callback),
            "payload": letter.payload,
            "tries": tries_value(letter.tries),
            "ttl": self._retention(letter.client_id),
        }
        await self._db.write("insert_dead_letter", values)

    async def add_redrive(self, row: Schedule, now: datetime) -> None:
        """A redriven recurring fire's row: as a retry row (``insert_retry``: a second write keeps the
        status of one that fired), and its run waiting again."""
        await self._write_replacement(row, row, now, keep_status=True)
        if row.options is not None and row.options.in_runs:
            retention_s = self._retention(row.client_id)
            await self._db.write(*runs.waiting_run(row, Status.SCHEDULED, None, row.last_error, retention_s))

    async def add_runs(self, client_id: str, schedule_id: UUID, runs: Sequence[Run]) -> None:
        """Runs as given, in one single-partition batch (the runs of one schedule share a partition)."""
        writes = [run_write(client_id, schedule_id, r, 0, self._retention(client_id)) for r in runs]
        if writes:
            await self._db.batch(writes, logged=False)


def _minute_range(
    query: str, instance: InstanceKey, minute: datetime, from_due: datetime | None, until_due: datetime | None
) -> tuple[str, dict[str, object]]:
    """The query (``query``, or its ``_until`` form with an upper bound) and values of a minute read."""
    values = {**fields_of(instance), "minute": minute, "from_due": from_due if from_due is not None else minute}
    if until_due is None:
        return query, values
    return f"{query}_until", {**values, "until_due": until_due}


def _stamp(row: Row) -> RowStamp:
    status = Status(row.status) if row.status else Status.SCHEDULED
    return RowStamp(utc(row.due_at), row.schedule_id, row.version or 1, status, row.attempts or 0)


def _schedule(row: Row) -> Schedule:
    return Schedule(
        client_id=row.client_id,
        schedule_id=row.schedule_id,
        location=Location(row.poller_id, utc(row.due_at)),
        fire_at=utc(row.fire_at),
        payload=getattr(row, "payload", None) or b"",  # a listing's read has none (list_minute)
        callback=decode_callback(row.callback),
        created_at=utc(row.created_at),
        status=Status(row.status) if row.status else Status.SCHEDULED,
        version=row.version or 1,
        attempts=row.attempts or 0,
        fired_at=utc(row.fired_at) if row.fired_at else None,
        last_error=row.last_error,
        options=decode_options(row.options) if row.options else None,
        seq=row.seq or 0,
        tries=decode_tries(getattr(row, "tries", None)),  # a listing's read has none (list_minute)
    )
