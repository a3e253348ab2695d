"""A node's per-tenant delivery statistics (``schema.stats``): counted per attempt in memory, written
every ``TICKD_STATS_FLUSH_S`` as one row per client and minute that changed since the last write, plus
one row per minute for all its clients together (client id ``schema.stats.CLUSTER``).

Counting is a dictionary update on the fire path; the store sees one write per (client, minute) per
flush, whatever the fire rate. Statistics never hold a fire up: a write that fails is tried again at the
next flush, and the loop that writes them logs and carries on through anything but its cancellation.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from tickd.schema import stats
from tickd.schema.stats import MinuteStats
from tickd.schema.store import Store

DELIVERED, RETRIED, FAILED = "delivered", "retried", "failed"
Key = tuple[str, datetime]  # (client id, minute)


class _Counts:
    __slots__ = ("delivered", "failed", "lateness", "lateness_max_s", "retried")

    def __init__(self) -> None:
        self.delivered = self.retried = self.failed = 0
        self.lateness = [0] * stats.BUCKETS
        self.lateness_max_s = 0.0


class TenantStats:
    def __init__(self, store: Store, node_id: str, clock: Callable[[], datetime], log: FilteringBoundLogger) -> None:
        self._store = store
        # The node and this process: a restarted node writes new rows instead of overwriting its old ones.
        self.writer = f"{node_id}/{uuid.uuid4().hex[:8]}"
        self._now = clock
        self._log = log
        self._counts: dict[Key, _Counts] = {}
        self._dirty: set[Key] = set()

    def attempt(self, client_id: str, at: datetime, outcome: str, lateness_s: float | None) -> None:
        """Count one attempt at ``at`` (its time of sending): ``delivered``, ``retried`` (failed, will be
        tried again) or ``failed`` (for good); ``lateness_s`` for a first attempt, else None."""
        minute = at.replace(second=0, microsecond=0)
        for key in ((client_id, minute), (stats.CLUSTER, minute)):  # the client's, and every client's
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = _Counts()
            if outcome == DELIVERED:
                counts.delivered += 1
            elif outcome == RETRIED:
                counts.retried += 1
            else:
                counts.failed += 1
            if lateness_s is not None:
                late = max(0.0, lateness_s)
                counts.lateness[stats.bucket(late)] += 1
                counts.lateness_max_s = max(counts.lateness_max_s, late)
            self._dirty.add(key)

    async def flush(self) -> None:
        """Write the rows counted into since the last write; on a failure they stay due for the next."""
        due = list(self._dirty)
        self._dirty.clear()
        rows = [self._row(key) for key in due]
        try:
            if rows:
                await self._store.write_stats(rows)
        except BaseException:
            self._dirty.update(due)
            raise
        # Attempts are counted in the minute they are sent, so minutes before the last one are complete.
        done = self._now().replace(second=0, microsecond=0) - timedelta(minutes=1)
        for key in [k for k in self._counts if k[1] < done and k not in self._dirty]:
            del self._counts[key]

    async def run(self, interval_s: float) -> None:
        """Flush every ``interval_s`` until cancelled; a failed write is logged and retried next time."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush()
            except Exception as exc:  # statistics must never stop the node
                self._log.warning("stats_write_failed", error=str(exc) or type(exc).__name__, rows=len(self._dirty))

    def _row(self, key: Key) -> MinuteStats:
        c = self._counts[key]
        return MinuteStats(
            key[0], key[1], self.writer, c.delivered, c.retried, c.failed, tuple(c.lateness), c.lateness_max_s
        )
