"""Per-tenant statistics: the sums and percentiles of ``schema.stats`` and the node's counter
(``poller.stats.TenantStats``) over the in-memory store, including a store that fails its writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from tickd.poller.stats import DELIVERED, FAILED, RETRIED, TenantStats
from tickd.schema import stats
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import memory_store
from tickd.schema.stats import BUCKETS, LATENESS_EDGES_S, MinuteStats

NOW = datetime(2030, 3, 1, 12, 30, 20, tzinfo=UTC)


def _row(minutes_ago: int, lateness: dict[int, int], largest: float, writer: str = "w/1") -> MinuteStats:
    minute = (NOW - timedelta(minutes=minutes_ago)).replace(second=0, microsecond=0)
    counts = tuple(lateness.get(i, 0) for i in range(BUCKETS))
    return MinuteStats("c", minute, writer, sum(counts), 2, 1, counts, largest)


def test_buckets_take_a_lateness_up_to_their_upper_edge() -> None:
    assert stats.bucket(0.0) == 0 and stats.bucket(-3.0) == 0 and stats.bucket(0.01) == 0
    assert stats.bucket(0.0100001) == 1 and stats.bucket(1.0) == LATENESS_EDGES_S.index(1.0)
    assert stats.bucket(300.0) == len(LATENESS_EDGES_S) - 1 and stats.bucket(301.0) == BUCKETS - 1


def test_quantiles_are_bucket_edges_capped_at_the_largest_seen() -> None:
    counts = [0] * BUCKETS
    counts[stats.bucket(0.02)] = 98  # 98 fires 10-25 ms late
    counts[stats.bucket(1.5)] = 1  # one 1-2 s late
    counts[stats.bucket(400.0)] = 1  # one past the last edge
    assert stats.quantile(counts, 0.5, 400.0) == 0.025
    assert stats.quantile(counts, 0.99, 400.0) == 2.0
    assert stats.quantile(counts, 1.0, 400.0) == 400.0  # the open bucket answers the largest
    assert stats.quantile(counts, 0.5, 0.012) == 0.012  # never above what was seen
    assert stats.quantile([0] * BUCKETS, 0.5, 0.0) is None


def test_a_window_sums_its_minutes_and_writers_only() -> None:
    rows = [
        _row(0, {0: 3}, 0.004),
        _row(0, {5: 1}, 0.4, writer="w/2"),
        _row(4, {9: 1}, 3.5),
        _row(6, {12: 5}, 55.0),  # outside 5 minutes, inside the hour
        _row(70, {13: 7}, 200.0),  # outside the hour
    ]
    five = stats.summarize(rows, NOW, 300)
    assert (five.fired, five.delivered, five.retried, five.failed) == (5, 5, 6, 3)
    assert five.lateness_p50_s == 0.01 and five.lateness_p99_s == 3.5 and five.lateness_max_s == 3.5
    hour = stats.summarize(rows, NOW, 3600)
    assert hour.fired == 10 and hour.lateness_max_s == 55.0 and hour.lateness_p50_s == 5.0
    assert stats.summarize(rows, NOW, 86_400).fired == 17
    empty = stats.summarize([], NOW, 300)
    assert empty.fired == 0 and empty.lateness_p50_s is None and empty.lateness_max_s is None


class _Flaky(CassandraStore):
    """The memory store on the clock ``now``, whose statistics writes fail while ``down``."""

    now = NOW
    down = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.writes: list[list[MinuteStats]] = []

    async def write_stats(self, rows: Any) -> None:
        if self.down:
            raise StoreUnavailable("write_stats: Unavailable (test)")
        self.writes.append(list(rows))
        await super().write_stats(rows)


def _flaky() -> _Flaky:
    store: _Flaky = memory_store(lambda: store.now, kind=_Flaky)
    return store


async def test_the_node_writes_changed_minutes_and_retries_a_failed_write() -> None:
    store = _flaky()
    counter = TenantStats(store, "node-1", lambda: store.now, structlog.get_logger())
    counter.attempt("a", NOW, DELIVERED, 0.02)
    counter.attempt("a", NOW + timedelta(seconds=5), RETRIED, 1.5)
    counter.attempt("a", NOW, DELIVERED, None)  # a retry's attempt: no lateness
    counter.attempt("b", NOW, FAILED, 0.3)
    await counter.flush()
    (first,) = store.writes
    by_client = {r.client_id: r for r in first}
    a = by_client["a"]
    assert (a.delivered, a.retried, a.failed, sum(a.lateness), a.lateness_max_s) == (2, 1, 0, 2, 1.5)
    assert a.minute == NOW.replace(second=0) and a.writer == counter.writer and a.writer.startswith("node-1/")
    assert by_client["b"].failed == 1
    everyone = by_client[stats.CLUSTER]  # every client's attempts together, for the admin view
    assert (everyone.delivered, everyone.retried, everyone.failed, sum(everyone.lateness)) == (2, 1, 1, 3)
    assert everyone.lateness_max_s == 1.5 and len(first) == 3

    await counter.flush()
    assert len(store.writes) == 1  # nothing changed: nothing written

    counter.attempt("a", NOW + timedelta(seconds=10), DELIVERED, 0.001)
    store.down = True
    with pytest.raises(StoreUnavailable):
        await counter.flush()
    store.down = False
    await counter.flush()  # the failed write's rows are written now, with every count so far
    again = {r.client_id: r for r in store.writes[1]}
    assert set(again) == {"a", stats.CLUSTER} and again["a"].delivered == 3 and sum(again["a"].lateness) == 3
    assert again[stats.CLUSTER].delivered == 3

    read = await store.read_stats("a", NOW - timedelta(minutes=1), NOW + timedelta(minutes=1))
    assert [(r.writer, r.delivered) for r in read] == [(counter.writer, 3)]  # overwritten, not added


async def test_finished_minutes_are_forgotten_once_written() -> None:
    store = _flaky()
    counter = TenantStats(store, "node-1", lambda: store.now, structlog.get_logger())
    counter.attempt("a", NOW, DELIVERED, 0.1)
    store.now = NOW + timedelta(minutes=3)
    counter.attempt("a", store.now, DELIVERED, 0.1)
    await counter.flush()
    counter.attempt("a", store.now, DELIVERED, 0.1)
    await counter.flush()
    assert sorted((r.client_id, r.minute.minute, r.delivered) for r in store.writes[-1]) == [
        (stats.CLUSTER, 33, 2),
        ("a", 33, 2),
    ]
    # A new process on the same node writes rows of its own, beside the earlier process's.
    other = TenantStats(store, "node-1", lambda: store.now, structlog.get_logger())
    other.attempt("a", store.now, FAILED, None)
    await other.flush()
    read = await store.read_stats("a", store.now - timedelta(minutes=1), store.now)
    assert sorted((r.delivered, r.failed) for r in read) == [(0, 1), (2, 0)] and other.writer != counter.writer
