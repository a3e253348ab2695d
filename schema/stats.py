"""Per-tenant delivery statistics (``GET /v1/stats``): what the pollers count and how the API sums it.

Each poller node counts, per client and per minute of the attempt's time, the attempts that were
delivered, retried and failed for good, and the lateness of first attempts as a histogram over fixed
buckets (the same buckets as the node's Prometheus histogram). It writes those counts as one row per
(client, minute, writer) — the writer is the node and its process start, so a restarted node never
overwrites what its earlier run counted — and rewrites the row as the minute's counts grow. Each node
also writes the same counts summed over all its clients under the client id ``CLUSTER``. The API
reads a tenant's rows (or, for an admin, the cluster's) for a window and adds them up; percentiles
come from the buckets, so a p99 reads "at most this late" (the bucket's upper edge, never above the
largest lateness seen).

Counts are statistics, not a ledger: an attempt counted by a node that is then cut off mid-fire may be
counted again by the next owner, and a node killed before its next write loses up to one flush interval.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

# Upper edges of the lateness buckets, seconds; one more bucket counts everything above the last edge.
LATENESS_EDGES_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
BUCKETS = len(LATENESS_EDGES_S) + 1
# The windows GET /v1/stats answers, seconds: the last 5 minutes, hour and day.
WINDOWS_S = (300, 3600, 86_400)
# How long a minute's row is kept: the longest window plus a week for whoever reads the table by hand.
RETENTION_S = 8 * 86_400
# The client id the rows of every client's attempts together are written under (GET /v1/admin/stats);
# never a client's (client ids are not empty).
CLUSTER = ""


@dataclass(frozen=True, slots=True)
class MinuteStats:
    """One writer's counts of one client's attempts in one minute (UTC, whole minute)."""

    client_id: str
    minute: datetime
    writer: str
    delivered: int
    retried: int
    failed: int
    lateness: tuple[int, ...]  # first attempts per bucket of LATENESS_EDGES_S, BUCKETS long
    lateness_max_s: float


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A tenant's attempts in the last ``window_s`` seconds, summed over every writer."""

    window_s: int
    fired: int  # first attempts (the ones lateness is measured on)
    delivered: int
    retried: int
    failed: int
    lateness_p50_s: float | None  # None when nothing fired in the window
    lateness_p99_s: float | None
    lateness_max_s: float | None


def days(since: datetime, until: datetime) -> list[date]:
    """The UTC days (the table's partitions) a read of [since, until] covers."""
    first, last = since.astimezone(UTC).date(), until.astimezone(UTC).date()
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def bucket(lateness_s: float) -> int:
    """The bucket a first attempt this many seconds late is counted in."""
    return bisect.bisect_left(LATENESS_EDGES_S, max(0.0, lateness_s))


def quantile(counts: Iterable[int], q: float, largest_s: float) -> float | None:
    """The upper edge of the bucket holding the ``q`` quantile, capped at the largest lateness seen
    (which is also the answer for the open-ended last bucket); None for no counts."""
    counts = list(counts)
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            edge = LATENESS_EDGES_S[index] if index < len(LATENESS_EDGES_S) else largest_s
            return min(edge, largest_s)
    return largest_s  # unreachable: the last bucket completes the total


def summarize(rows: Iterable[MinuteStats], now: datetime, window_s: int) -> WindowStats:
    """Sum the rows whose minute lies in the window ending at ``now`` (the minute ``now`` is in counts)."""
    since = now - timedelta(seconds=window_s)
    start = since.replace(second=0, microsecond=0)
    delivered = retried = failed = 0
    lateness = [0] * BUCKETS
    largest = 0.0
    for row in rows:
        if not start <= row.minute <= now:
            continue
        delivered += row.delivered
        retried += row.retried
        failed += row.failed
        for index, count in enumerate(row.lateness[:BUCKETS]):
            lateness[index] += count
        largest = max(largest, row.lateness_max_s)
    fired = sum(lateness)
    return WindowStats(
        window_s,
        fired,
        delivered,
        retried,
        failed,
        quantile(lateness, 0.5, largest),
        quantile(lateness, 0.99, largest),
        largest if fired else None,
    )
