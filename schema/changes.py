"""A client's changes of a schedule (reschedule, cancel, pause, resume), over the adapter's row requests.

A change is two requests: the pointer's compare-and-set, then one logged batch with its rows. When the
batch is lost (the API process dies, or the request times out and the API answers 503), the pointer is
a version ahead of the live row, and the batch may still land much later (a coordinator replays its
batchlog). Every later change used to compare-and-set against the live row's version, fail, and answer
409 for good while the old version went on firing.

Now every client change
- writes its rows at one timestamp, taken above the previous client change's (kept in the pointer), so
  whatever it writes wins over a late copy of any earlier change's batch, whatever the clocks say;
- finding the pointer ahead of the live row because an earlier client change never landed, adopts that
  change's version (compares-and-sets against the pointer, not the row) and fences the abandoned target:
  status moved, written at its own timestamp, so a late copy of that batch lands as a moved row and
  never fires. The pointer lists such targets (``stale``) until a change that lands fences them.
A poller's move that stopped half-way is not adopted: its own instance finishes it (``schema.moves``),
so a client change meanwhile still answers 409 until then.

A change whose rows are merely slow looks, to a concurrent change that reads between its two requests,
just like one whose rows were lost: the concurrent change adopts and fences it, and answers 200. So every
change, once its rows are written, reads the pointer again and answers ``Conflict`` if a client change
came after it (acceptance O5): of two concurrent changes, only the one that is live answers 2xx last.
"""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from datetime import datetime
from uuid import UUID

from tickd.schema.errors import Conflict
from tickd.schema.model import Location, Schedule, ScheduleRef, Status


@dataclasses.dataclass(frozen=True)
class Base:
    """What a client change builds on: the pointer version it compares-and-sets against, the timestamp
    its rows are written at, and the targets of abandoned changes it fences."""

    version: int
    write_ts: int
    stale: tuple[Location, ...] = ()


# The statuses of a row a client change can move on from (a paused row is resumed by one).
_LIVE = (Status.SCHEDULED, Status.MOVED, Status.PAUSED)


def abandoned(current: Schedule, ref: ScheduleRef, live: Schedule | None, target: Schedule | None) -> bool:
    """Whether ``ref`` is ahead of ``current`` because a client change moved the pointer and its rows
    never landed. ``live``: the row stored at ``current``'s location; ``target``: the one at the
    pointer's (the same row when the change kept the location; None: not there)."""
    if ref.version <= current.version or ref.changed_version != ref.version:
        return False  # not ahead, or ahead by a poller's move (finished by its instance)
    if live is None or live.version != current.version or live.status not in _LIVE:
        return False  # the caller's row is not the stored one, or it fired, failed or was cancelled
    if ref.location == current.location:
        # A cancel (or a change keeping the due time) whose writes did not land: landed, the row would
        # carry its status or its version. A paused row carries its pause's version, so one still at
        # ``current``'s is a change after the pause (a resume in place, a cancel) that did not land. A row
        # marked moved at ``current``'s version and place is one a poller found superseded by this very
        # change, its write not landed (the mark is written below the change's, poller.fire: seed 200181).
        return live.status in (Status.SCHEDULED, Status.PAUSED, Status.MOVED)
    # Landed, the change's row at the pointer's place carries its version. A row there at an older one,
    # marked moved, is the schedule's own from before it moved away (a change moving it back where it was:
    # a timed pause resumed to its original time, simulation seed 1000 at the branch timed-pause), not the
    # change's. One at an older version and another status is a later change made in place there (a
    # cancel keeps its row's version: seed 530119 took a landed cancel for lost and undid it).
    if target is None:
        return ref.previous == current.location
    return ref.previous == current.location and target.version < ref.version and target.status is Status.MOVED


def change_base(
    current: Schedule, ref: ScheduleRef | None, live: Schedule | None, target: Schedule | None, clock_ts: int
) -> Base:
    """The base of a client change of ``current`` at ``clock_ts`` (µs, the writer's clock); ``Conflict``
    if someone else changed the schedule meanwhile."""
    if ref is None:
        raise Conflict("the schedule was changed concurrently; read it again and retry")
    write_ts = max(clock_ts, (ref.write_ts or 0) + 1)
    if ref.version == current.version:
        # A client move cut short between its new row and retiring the old (written without a batchlog,
        # schema.batchlog) left the old row live beside the new: this change fences it too. So does it
        # the targets the pointer still lists as stale: the change that listed them may itself not have
        # landed (seed 93769: two changes lost in a row, the first one's row left live, forgotten by the
        # third change, which fenced only the second's target; it fired after the third was answered).
        moved_from = ref.previous if ref.changed_version == ref.version else None
        stale = tuple(ref.stale)
        if moved_from is not None and moved_from != current.location:
            stale = (*stale, moved_from)
        return Base(current.version, write_ts, stale)
    if not abandoned(current, ref, live, target):
        raise Conflict("the schedule was changed concurrently; read it again and retry")
    stale = ref.stale if ref.location == current.location else (*ref.stale, ref.location)
    return Base(ref.version, write_ts, stale)


# Set for a client change that must apply to the version it read or not at all (If-Match,
# ``service.preconditions``): finding the pointer ahead of that version (another change in flight, or one
# lost unfinished), it answers ``Conflict`` instead of taking the other change over and fencing it. Without
# it, two changes of one version could both be answered: the first, and the second that fenced it (CI at
# 96c1b95, 2 of 20 concurrent PATCHes with one If-Match on Cassandra). A context variable, so the store's
# change methods keep their signatures; set it around the call (a task made meanwhile inherits it).
CONDITIONAL: ContextVar[bool] = ContextVar("tickd_conditional_change", default=False)


class ScheduleRows:
    """The requests on a schedule's pointer and rows that the client changes (here) and the poller's
    moves (``schema.moves``) are written over: the adapter provides them (``cassandra.schedules``)."""

    async def get_ref(self, client_id: str, schedule_id: UUID) -> ScheduleRef | None:
        raise NotImplementedError

    async def _row_at(self, client_id: str, schedule_id: UUID, loc: Location) -> Schedule | None:
        raise NotImplementedError

    async def _bump_ref(
        self,
        current: Schedule,
        new_loc: Location,
        version: int,
        now: datetime,
        *,
        by_client: bool = True,
        base: Base | None = None,
        stale: tuple[Location, ...] | None = None,
    ) -> None:
        raise NotImplementedError

    async def _write_replacement(
        self,
        current: Schedule,
        new: Schedule,
        now: datetime,
        *,
        keep_status: bool = False,
        base: Base | None = None,
    ) -> None:
        raise NotImplementedError


class ClientChanges(ScheduleRows):
    """``cancel_schedule``, ``replace_schedule``, ``pause_schedule`` and ``resume_schedule`` (mixed in)."""

    async def _write_status(self, current: Schedule, status: Status, version: int, now: datetime, base: Base) -> None:
        """``current``'s row cancelled, or paused at ``version`` (status and version), at ``base.write_ts``,
        with its hot mark and the fences of ``base``."""
        raise NotImplementedError

    def _write_clock(self) -> int:
        """A write timestamp (µs) as this process's requests get them."""
        raise NotImplementedError

    async def _change_base(self, current: Schedule) -> Base:
        ref = await self.get_ref(current.client_id, current.schedule_id)
        if CONDITIONAL.get() and ref is not None and ref.version != current.version:
            raise Conflict("another change of the schedule is in flight (or was left unfinished); read it again")
        live = target = None
        if ref is not None and ref.version != current.version:
            live = await self._row_at(current.client_id, current.schedule_id, current.location)
            target = live
            if ref.location != current.location:
                target = await self._row_at(current.client_id, current.schedule_id, ref.location)
        return change_base(current, ref, live, target, self._write_clock())

    async def _still_last(self, current: Schedule, version: int) -> None:
        """After a change's rows are written: ``Conflict`` if a client change came after it (one that
        took it for lost and fenced it, or one that simply followed it before this answer)."""
        ref = await self.get_ref(current.client_id, current.schedule_id)
        if ref is not None and ref.changed_version > version:
            raise Conflict("the schedule was changed concurrently, by a change after this one; read it again")

    async def cancel_schedule(self, current: Schedule, now: datetime) -> Schedule:
        return await self._change_status(current, Status.CANCELLED, now)

    async def pause_schedule(self, current: Schedule, now: datetime, parked: Schedule | None = None) -> Schedule:
        """Pause ``current`` where it is: its row stays, status paused, at a new version (so a poller's
        chain from it, or a move, loses its compare-and-set). ``Conflict`` if it changed meanwhile.
        With ``parked`` (``current`` with a pause note, at the location its pause ends, if it has a time),
        the pause moves the schedule there as a change does: the new row paused, the old one retired."""
        if parked is None:
            return await self._change_status(current, Status.PAUSED, now)
        return await self.replace_schedule(current, dataclasses.replace(parked, status=Status.PAUSED), now)

    async def _change_status(self, current: Schedule, status: Status, now: datetime) -> Schedule:
        base = await self._change_base(current)
        version = base.version + 1
        await self._bump_ref(current, current.location, version, now, base=base)
        await self._write_status(current, status, version, now, base)
        await self._still_last(current, version)
        return dataclasses.replace(current, status=status, version=version)

    async def resume_schedule(self, current: Schedule, resumed: Schedule, now: datetime) -> Schedule:
        """Resume paused ``current`` as ``resumed`` (its next fire: a new row, or the same one scheduled
        again), as a client change. ``Conflict`` if it is not paused or changed meanwhile."""
        if current.status is not Status.PAUSED:
            raise Conflict("the schedule is not paused")
        return await self.replace_schedule(current, resumed, now)

    async def replace_schedule(self, current: Schedule, updated: Schedule, now: datetime) -> Schedule:
        base = await self._change_base(current)
        status = Status.PAUSED if updated.status is Status.PAUSED else Status.SCHEDULED
        new = dataclasses.replace(updated, version=base.version + 1, status=status)
        await self._bump_ref(current, new.location, new.version, now, base=base)
        await self._write_replacement(current, new, now, base=base)
        await self._still_last(current, new.version)
        return new


def kept_stale(current: Schedule, ref: ScheduleRef | None) -> tuple[Location, ...] | None:
    """The stale targets a poller's move on from ``current`` must record in the pointer (None: leave
    them as they are). The move overwrites the pointer's ``previous``; when ``current`` is where the last
    client change moved the schedule to, that ``previous`` is the row the change retired, and its retiring
    write may have been lost: the next client change fences it only if the pointer still names it
    (simulation seed 401111: a change answered 503 left the old row live, a durable retry of the new row
    forgot it, and the old row fired after a later change was answered)."""
    if ref is None or ref.version != current.version or ref.changed_version != ref.version:
        return None
    moved_from = ref.previous
    if moved_from is None or moved_from == current.location or moved_from in ref.stale:
        return None
    return (*ref.stale, moved_from)


def fenced(stale: tuple[Location, ...], *live: Location) -> list[Location]:
    """The stale targets a change fences: all but those it writes live rows at."""
    return [loc for loc in dict.fromkeys(stale) if loc not in live]
