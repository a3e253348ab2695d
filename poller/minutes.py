"""Pure minute arithmetic for poller instances: where to start, what catch-up skips, when a minute closes."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickd.schema.timing import minute_bucket

MINUTE = timedelta(minutes=1)
_GOLDEN = 0.6180339887498949


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Minutes ``[skip_from, start)`` are beyond the catch-up window; firing resumes at ``start``."""

    start: datetime
    skip_from: datetime | None = None


def plan_start(checkpoint: datetime | None, client_created: datetime, now: datetime, window_s: int) -> StartPlan:
    """Where a new owner resumes: after the checkpoint, else at the client's first minute, never
    further back than the catch-up window (older minutes are skipped and recorded)."""
    first = checkpoint + MINUTE if checkpoint is not None else minute_bucket(client_created)
    oldest = minute_bucket(now - timedelta(seconds=window_s))
    if first >= oldest:
        return StartPlan(first)
    return StartPlan(oldest, skip_from=first if checkpoint is not None else None)


def minutes_between(start: datetime, end: datetime) -> list[datetime]:
    """Whole minutes in ``[start, end)``."""
    out = []
    m = minute_bucket(start)
    while m < end:
        out.append(m)
        m += MINUTE
    return out


def opens_at(minute: datetime, preload_s: float) -> datetime:
    return minute - timedelta(seconds=preload_s)


def closes_at(minute: datetime, close_s: float) -> datetime:
    """After this no late write can still land in ``minute``: its checkpoint may be written."""
    return minute + MINUTE + timedelta(seconds=close_s)


def sweep_offset_s(client_id: str, poller_id: int, spread_s: float) -> float:
    """How long after its minutes close this instance reads each one a last time, in ``[0, spread_s)``:
    a client's instances evenly apart (golden-ratio steps by poller id), clients shifted by their id, so
    that the instances of a node do not all read a whole minute at the same moment."""
    shift = zlib.crc32(client_id.encode()) / 2**32
    return (shift + poller_id * _GOLDEN) % 1.0 * spread_s


def reread_from(minute: datetime, first_touch: datetime, now: datetime, lag_s: float) -> datetime:
    """Where a re-read after a hot mark starts: early enough for rows written with a skewed clock and
    for every row not yet fired, never before the minute itself."""
    return max(minute, min(first_touch, now) - timedelta(seconds=lag_s))
