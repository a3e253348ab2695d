"""Per-tenant delivery statistics on Cassandra: ``client_stats``, a partition per client and day."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from tickd.schema import aio, stats
from tickd.schema.cassandra.bridge import Part, utc
from tickd.schema.stats import RETENTION_S, MinuteStats


class Stats(Part):
    """The statistics methods of ``schema.store.ScheduleStore`` on Cassandra."""

    async def write_stats(self, rows: Sequence[MinuteStats]) -> None:
        await aio.gather(*(self._db.write("write_stats", _values(row)) for row in rows))

    async def read_stats(self, client_id: str, since: datetime, until: datetime) -> list[MinuteStats]:
        found: list[MinuteStats] = []
        for day in stats.days(since, until):
            values = {"client_id": client_id, "day": day, "since": since, "until": until}
            rows = await self._db.rows("read_stats", values)
            found.extend(
                MinuteStats(
                    client_id,
                    utc(r.minute),
                    r.writer,
                    r.delivered,
                    r.retried,
                    r.failed,
                    tuple(r.lateness or ()),
                    r.lateness_max,
                )
                for r in rows
            )
        return found


def _values(row: MinuteStats) -> dict[str, object]:
    return {
        "client_id": row.client_id,
        "day": row.minute.astimezone(UTC).date(),
        "minute": row.minute,
        "writer": row.writer,
        "delivered": row.delivered,
        "retried": row.retried,
        "failed": row.failed,
        "lateness": list(row.lateness),
        "lateness_max": row.lateness_max_s,
        "ttl": RETENTION_S,
    }
