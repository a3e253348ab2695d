"""A poller's moves of a schedule (a durable retry, a recurring schedule's next occurrence), over the few
row requests the adapter provides (``changes.ScheduleRows``).

A move is two requests: the pointer's compare-and-set, then the rows. If the process dies between them,
whoever handles the same row next (the same poller retrying, or the instance's next owner) finds the
pointer one version ahead and no row where it points. It must finish the move rather than drop the
fire or end the timeline. A row due in the past is written only into the caller's own partition (its
instance plans the row it gets back); into another instance's partition it could land behind that
instance's re-reads, or in a minute it has closed, and never fire, so such a move is made again from
where the pointer stopped, to now.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta
from uuid import UUID

import msgspec

from tickd.schema import changes, timing
from tickd.schema.changes import ScheduleRows
from tickd.schema.errors import Conflict
from tickd.schema.model import Chain, Chained, Location, Schedule, ScheduleRef, Status


def moved_on_by_poller(current: Schedule, ref: ScheduleRef) -> bool:
    """A poller (this call's earlier try, or an owner that crashed) moved the pointer on from this very
    row and no client changed the schedule since: the pointer is past ``current``'s version and still
    names ``current`` as where it moved from. Usually one version past; more when a move whose row did
    not land was made again to now (``_resume_move``) and that row did not land either (simulation
    seed 11393: the next try took the pointer for someone else's finished move and ended the timeline).
    A later occurrence's move names its own row as where it moved from, so it is never taken for this."""
    return ref.version > current.version and ref.changed_version <= current.version and ref.previous == current.location


def from_now(loc: Location, now: datetime, after: Location) -> Location:
    """``loc``, or, if it is already past, the same partition due now; never at or before ``after``
    (the row being moved on from: a row written on its key would overwrite it)."""
    if loc.due_at >= now and loc.due_at > after.due_at:
        return loc
    return Location(loc.poller_id, max(timing.truncate_ms(now), after.due_at + timedelta(milliseconds=1)))


# A poller's move found after a lost compare-and-set: the pointer, and its row (None: not landed).
PollerMove = tuple[ScheduleRef, Schedule | None]


def retry_row(current: Schedule, due_at: datetime, attempts: int, last_error: str) -> Schedule:
    """A durable retry of ``current``'s fire, due at ``due_at`` (same nominal time: same fire id). A
    recurring occurrence's retry is a row with an id of its own, derived from its fire id, since two
    occurrences' retries can come due in the same millisecond; events already have their own ids."""
    loc = Location(current.location.poller_id, timing.truncate_ms(due_at))
    retry = dataclasses.replace(current, location=loc, attempts=attempts, last_error=last_error)
    options = current.options
    if options is None or options.repeat is None or options.event is not None or options.retry_of is not None:
        return retry
    own_id = uuid.uuid5(current.schedule_id, f"retry:{current.fire_id}")
    return dataclasses.replace(
        retry, schedule_id=own_id, options=msgspec.structs.replace(options, retry_of=current.schedule_id)
    )


class PollerMoves(ScheduleRows):
    """``requeue``'s pointer move and ``chain_schedule`` (mixed in)."""

    async def get_schedule(self, client_id: str, schedule_id: UUID) -> Schedule | None:
        """The schedule's current row, through its pointer. If a move's pointer landed but its row did
        not, the old row is still the live one (and still fires), so that is the schedule's truth."""
        ref = await self.get_ref(client_id, schedule_id)
        if ref is None:
            return None
        row = await self._row_at(client_id, schedule_id, ref.location)
        if row is None and ref.previous is not None:
            row = await self._row_at(client_id, schedule_id, ref.previous)
        return row

    async def _write_following(self, following: Schedule, at: Location, version: int, now: datetime) -> None:
        raise NotImplementedError

    async def _poller_move(self, current: Schedule, ref: ScheduleRef | None) -> PollerMove | None:
        """After a lost compare-and-set: if a poller moved the schedule on from ``current``, the pointer
        and the row it points at (None: that move stopped before its row landed)."""
        if ref is None or not moved_on_by_poller(current, ref):
            return None
        return ref, await self._row_at(current.client_id, current.schedule_id, ref.location)

    async def _resume_move(self, current: Schedule, stopped: ScheduleRef, now: datetime) -> tuple[Location, int]:
        """Where, at which version, to finish a poller's move that stopped before its row: where the
        pointer says, or, if that time is past by now, moved again from there to now."""
        at = from_now(stopped.location, now, current.location)
        if at == stopped.location or stopped.location.poller_id == current.location.poller_id:
            # In the caller's own partition a past row is fine: its instance (the caller) plans the row it
            # is handed back. Moving again would bump the version past what the next owner recognises.
            return stopped.location, stopped.version
        await self._bump_ref(
            dataclasses.replace(current, version=stopped.version), at, stopped.version + 1, now, by_client=False
        )
        return at, stopped.version + 1

    async def _move_for_retry(self, current: Schedule, retry: Schedule, now: datetime) -> Schedule:
        """Point the schedule at its retry row and write it (the old row becomes MOVED). ``Conflict`` if
        the client changed the schedule meanwhile, or another retry of this fire completed."""
        at, version = retry.location, current.version + 1
        stale = changes.kept_stale(current, await self.get_ref(current.client_id, current.schedule_id))
        try:
            await self._bump_ref(current, at, version, now, by_client=False, stale=stale)
        except Conflict:
            moved = await self._poller_move(current, await self.get_ref(current.client_id, current.schedule_id))
            if moved is None:
                raise
            stopped, landed = moved
            if landed is not None:
                return landed  # an earlier try of this retry completed (its answer was lost)
            at, version = await self._resume_move(current, stopped, now)
        new = dataclasses.replace(retry, location=at, version=version, status=Status.SCHEDULED)
        await self._write_replacement(current, new, now)
        return new

    async def chain_schedule(self, current: Schedule, following: Schedule | None, now: datetime) -> Chained:
        """Move a recurring schedule on from ``current`` (the occurrence about to fire) to ``following``
        (its next occurrence, or None when the timeline ends), if nobody changed it since ``current``
        was written: the compare-and-set that keeps a changed or cancelled schedule's old occurrences
        from firing. Safe to call again with the same arguments after ``StoreUnavailable``."""
        target = following.location if following is not None else current.location
        version = current.version + 1
        try:
            await self._bump_ref(current, target, version, now, by_client=False)
        except Conflict:
            ref = await self.get_ref(current.client_id, current.schedule_id)
            if ref is None or ref.changed_version > current.version:
                return Chained(Chain.CHANGED)
            moved = await self._poller_move(current, ref) if following is not None else None
            if moved is None:
                return Chained(Chain.ALREADY)
            if moved[1] is not None:
                # An earlier try landed (its answer was lost): hand its row back, so the caller plans it.
                # Its due time may be past by now, before any re-read of hot marks would look again.
                return Chained(Chain.ALREADY, moved[1])
            try:
                target, version = await self._resume_move(current, moved[0], now)
            except Conflict:
                return Chained(Chain.ALREADY)  # another owner finished it meanwhile
        if following is None:
            return Chained(Chain.CHAINED)
        await self._write_following(following, target, version, now)
        return Chained(Chain.CHAINED, dataclasses.replace(following, location=target, version=version))
