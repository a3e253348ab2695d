"""Delivery statistics in the store, on both adapters: a row per (client, minute, writer), overwritten by a
later write of the same three, read back by time range across days and pages, and kept to its client."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.contract.conftest import Env
from tickd.schema.stats import BUCKETS, MinuteStats
from tickd.schema.store import Store


def _minute(env: Env, minutes_ago: int) -> datetime:
    return (env.now() - timedelta(minutes=minutes_ago)).replace(second=0, microsecond=0)


def _row(client_id: str, minute: datetime, writer: str, delivered: int, late_bucket: int = 0) -> MinuteStats:
    lateness = tuple(delivered if i == late_bucket else 0 for i in range(BUCKETS))
    return MinuteStats(client_id, minute, writer, delivered, 1, 2, lateness, 0.25 * (late_bucket + 1))


async def test_rows_are_overwritten_per_writer_and_read_by_range(env: Env, store: Store, client_id: str) -> None:
    now = _minute(env, 0)
    first = [_row(client_id, now, "node-a/1", 3), _row(client_id, now, "node-b/1", 4, late_bucket=9)]
    other = [_row(client_id, _minute(env, 10), "node-a/1", 7), _row("another-client", now, "node-a/1", 99)]
    await store.write_stats([*first, *other])
    await store.write_stats([_row(client_id, now, "node-a/1", 5)])  # the minute's counts grew

    recent = await store.read_stats(client_id, now - timedelta(minutes=5), now)
    assert sorted((r.writer, r.delivered, r.retried, r.failed) for r in recent) == [
        ("node-a/1", 5, 1, 2),
        ("node-b/1", 4, 1, 2),
    ]
    (b,) = [r for r in recent if r.writer == "node-b/1"]
    assert b.lateness[9] == 4 and sum(b.lateness) == 4 and len(b.lateness) == BUCKETS
    assert b.lateness_max_s == 2.5 and b.minute == now and b.client_id == client_id
    wider = await store.read_stats(client_id, now - timedelta(minutes=15), now)
    assert sorted(r.delivered for r in wider) == [4, 5, 7]
    assert await store.read_stats(client_id, now + timedelta(minutes=1), now + timedelta(minutes=5)) == []


async def test_a_range_across_midnight_reads_both_days(store: Store, client_id: str) -> None:
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = [_row(client_id, midnight + timedelta(minutes=m), "w/1", 1) for m in (-2, -1, 0, 1)]
    await store.write_stats(rows)
    found = await store.read_stats(client_id, midnight - timedelta(minutes=1), midnight + timedelta(minutes=1))
    assert sorted(r.minute for r in found) == [midnight + timedelta(minutes=m) for m in (-1, 0, 1)]


async def test_reads_page_through_many_writers(env: Env, client_id: str) -> None:
    store = await env.store_with(page_size=3)
    now = _minute(env, 0)
    await store.write_stats([_row(client_id, now, f"node-{n}/1", n) for n in range(10)])
    found = await store.read_stats(client_id, now, now)
    assert sorted(r.delivered for r in found) == list(range(10))
