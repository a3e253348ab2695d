"""Pure time math shared by the API and the pollers. No clock is read here: callers pass ``now``.

A schedule lives in the partition ``(client_id, poller_id, minute)`` where ``minute`` is its *due*
time truncated to the minute. The due time is the nominal fire time, except that a time already past
is due "now": storing it under a minute a poller has already finished would lose it.
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from tickd.schema.model import Options

# Cassandra refuses TTLs above 20 years.
MAX_TTL_S = 20 * 365 * 24 * 3600
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def minute_bucket(moment: datetime) -> datetime:
    """The start of the UTC minute holding ``moment``; time zones do not change the bucket."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: tickd only handles aware times")
    utc = moment.astimezone(UTC)
    return utc.replace(second=0, microsecond=0)


def due_time(fire_at: datetime, now: datetime) -> datetime:
    """When a schedule is stored to fire: its nominal time, or ``now`` if that is already past."""
    return fire_at if fire_at > now else now


def stored_due_at(schedule_id: UUID, fire_at: datetime, options: Options | None, now: datetime) -> datetime:
    """Where a fire's row is stored: the nominal time plus its jitter, or now if that is past."""
    offset = jitter(schedule_id, fire_at, options.jitter_ms) if options else timedelta(0)
    return truncate_ms(due_time(fire_at + offset, now))


def poller_id_for(schedule_id: UUID, poller_count: int) -> int:
    """The poller a schedule is assigned to: uniform over ``0..poller_count-1`` for random ids."""
    if poller_count < 1:
        raise ValueError(f"poller_count must be >= 1, got {poller_count}")
    return schedule_id.int % poller_count


def fire_id(schedule_id: UUID, nominal: datetime, *, backfill: bool = False) -> str:
    """The id a subscriber deduplicates on: the same for every retry of one nominal fire. A backfill's fire
    of an occurrence (``schema.backfills``) has one of its own: ``<schedule_id>:<nominal ms>:backfill``."""
    own = f"{schedule_id}:{to_epoch_ms(nominal)}"
    return f"{own}:{BACKFILL_SUFFIX}" if backfill else own


BACKFILL_SUFFIX = "backfill"


def to_epoch_ms(moment: datetime) -> int:
    """Milliseconds since the Unix epoch (Cassandra's timestamp precision)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def jitter(schedule_id: UUID, nominal: datetime, jitter_ms: int) -> timedelta:
    """How much later than ``nominal`` a jittered fire is due: in ``[0, jitter_ms)`` ms, fixed by the fire
    id (every node, every retry and every re-read agree), spread evenly across fires."""
    if jitter_ms <= 0:
        return timedelta(0)
    return timedelta(milliseconds=_hash64(fire_id(schedule_id, nominal)) % jitter_ms)


def event_offset(event_id: str, index: int, count: int, window_ms: int) -> timedelta:
    """When event ``index`` of ``count`` is due after its fire: the window cut into ``count`` equal slots,
    the event at a point of its own slot fixed by its event id. Deterministic (every node and every
    re-expansion agree) and evenly spread (no slot holds two events)."""
    if window_ms <= 0 or count <= 0:
        return timedelta(0)
    within = _hash64(event_id) / 2**64  # [0, 1)
    return timedelta(milliseconds=int((index + within) * window_ms / count))


def _hash64(text: str) -> int:
    """A stable 64-bit hash of ``text`` (the same on every node and every Python run)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def truncate_ms(moment: datetime) -> datetime:
    """``moment`` as Cassandra stores it: sub-millisecond digits dropped."""
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def minute_index(minute: datetime) -> int:
    """Whole minutes since the Unix epoch."""
    return (minute_bucket(minute) - _EPOCH) // timedelta(minutes=1)


def row_ttl_s(due_at: datetime, now: datetime, retention_s: int) -> int:
    """TTL for a stored schedule row: it outlives its due time by the retention, capped to Cassandra's max."""
    ahead = max(0.0, (due_at - now).total_seconds())
    return min(MAX_TTL_S, math.ceil(ahead) + retention_s)


def below_ballots(clock_us: int) -> int:
    """A plain write's timestamp that every later lightweight transaction's write beats: the start of
    the clock's millisecond, less one microsecond.

    Cassandra stamps a transaction's writes with its Paxos ballot, taken from a millisecond clock, while
    the driver stamps a plain write with microseconds. A transaction made in the same millisecond as a
    plain write to the same cell would apply (its condition read the plain write) and yet lose to it:
    on a real node 13% of compare-and-sets issued right after an insert were lost this way."""
    return clock_us // 1000 * 1000 - 1


def is_hot(due_at: datetime, now: datetime, hot_window_s: float) -> bool:
    """Whether a write may land in a minute a poller has already loaded, so it must be signalled."""
    return (due_at - now).total_seconds() < hot_window_s


def fenced_timestamp(epoch: int, minute: datetime) -> int:
    """A write timestamp ordering checkpoints by (epoch, minute): a lower epoch never overwrites a higher.

    Cassandra keeps the cell with the largest write timestamp, so a stale owner's late write loses
    against anything the current owner wrote, without a lightweight transaction per checkpoint.
    """
    if not 0 <= epoch < 2**30:
        raise ValueError(f"epoch out of range: {epoch}")
    return (epoch << 32) | minute_index(minute)


def horizon_timestamp(minute: datetime) -> int:
    """Write timestamp for an instance's horizon: the latest minute ever written wins (microseconds)."""
    return to_epoch_ms(minute_bucket(minute)) * 1000
