"""Runs (a schedule's fire history, kept for recurring and batch schedules) and their events' outcomes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

from cassandra.query import UNSET_VALUE

from tickd.schema import aio
from tickd.schema.cassandra.bridge import Part, Row, Write, unset_if_none, utc
from tickd.schema.model import FireOutcome, Run, Schedule, Status, decode_tries, encode_tries

_FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)


def run_write(client_id: str, schedule_id: UUID, run: Run, window_ms: int, ttl_s: int) -> Write:
    """A run's row (``record_run``): what is none, zero or empty is left unset (a write keeps what the row had)."""
    values = {
        "client_id": client_id,
        "schedule_id": schedule_id,
        "nominal_at": run.nominal_at,
        "seq": run.seq or UNSET_VALUE,
        "status": run.status.value,
        "attempts": run.attempts,
        "fired_at": unset_if_none(run.fired_at),
        "last_error": unset_if_none(run.last_error),
        "events": run.events or UNSET_VALUE,
        "window_ms": window_ms or UNSET_VALUE,
        "tries": encode_tries(run.tries) if run.tries else UNSET_VALUE,
        "backfill": True if run.backfill else UNSET_VALUE,
        "ttl": ttl_s,
    }
    return "record_run", values


def waiting_run(s: Schedule, status: Status, fired_at: datetime | None, error: str | None, ttl_s: int) -> Write:
    """The run of the fire ``s`` (its nominal time is ``s.fire_at``) as it stands now."""
    events, window_ms = s.options.expansion if s.options is not None else (0, 0)
    backfill = s.options is not None and s.options.backfill
    run = Run(s.fire_at, status, s.attempts, fired_at, error, s.seq, events, tries=s.tries, backfill=backfill)
    return run_write(s.client_id, s.public_id, run, window_ms, ttl_s)


def run_writes(outcomes: Sequence[FireOutcome], ttl_of: Callable[[str], int]) -> list[Write]:
    """What outcomes add to runs: a fire kept in the history records its run, an event its part of one;
    each kept its client's retention (``ttl_of``)."""
    writes: list[Write] = []
    for o in outcomes:
        if o.nominal_at is None:
            continue
        ttl_s = ttl_of(o.client_id)
        if o.event is None:  # the run the fire's outcome ends in
            fired_at = None if o.status is Status.SKIPPED else o.fired_at  # a calendar's: never sent
            run = Run(
                o.nominal_at,
                o.status,
                o.attempts,
                fired_at,
                o.last_error,
                o.seq,
                o.events,
                tries=o.tries,
                backfill=o.backfill,
            )
            writes.append(run_write(o.client_id, o.run_id, run, o.window_ms, ttl_s))
            continue
        values = {
            "client_id": o.client_id,
            "schedule_id": o.event.parent,
            "nominal_at": o.nominal_at,
            "idx": o.event.index,
            "status": o.status.value,
            "fired_at": o.fired_at,
            "ttl": ttl_s,
        }
        writes.append(("record_run_event", values))
    return writes


class Runs(Part):
    """Reading a schedule's runs."""

    async def list_runs(self, client_id: str, schedule_id: UUID, before: datetime | None, limit: int) -> list[Run]:
        """A recurring schedule's fires, newest first, with nominal time before ``before`` (exclusive)."""
        upper = before if before is not None else _FAR_FUTURE
        values = {"client_id": client_id, "schedule_id": schedule_id, "before": upper, "max_rows": limit}
        rows = await self._db.rows("list_runs", values)
        return await aio.gather(*(self._run_of(client_id, schedule_id, r) for r in rows))

    async def _run_of(self, client_id: str, schedule_id: UUID, r: Row) -> Run:
        run = Run(
            utc(r.nominal_at),
            Status(r.status),
            r.attempts or 0,
            utc(r.fired_at) if r.fired_at else None,
            r.last_error,
            r.seq or 0,
            tries=decode_tries(r.tries),
            backfill=bool(r.backfill),
        )
        if not r.events:
            return run
        values = {"client_id": client_id, "schedule_id": schedule_id, "nominal_at": r.nominal_at}
        events = await self._db.rows("read_run_events", values)
        done = [utc(e.fired_at) for e in events if e.status == Status.SUCCEEDED.value and e.fired_at]
        return dataclasses.replace(
            run,
            events=r.events,
            events_done=len(done),
            last_event_at=max(done) if done else None,
            window_end=run.nominal_at + timedelta(milliseconds=r.window_ms or 0),
        )
