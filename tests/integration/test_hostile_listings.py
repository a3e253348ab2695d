"""Listings on the real Cassandra read what a page needs, counted in the store's requests (never timed):
a dead-letter page's read is one LIMITed query without payloads, and the widest schedule listing reads at
most ``LIST_READ_BUDGET`` partitions per page (base code: 1,024 whole-row reads, payloads included)."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api_helpers import Api, Register
from tickd.schema import listing, timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import DeadLetter, HttpCallback

pytest_plugins = ["tests.integration.api_fixtures"]
pytestmark = pytest.mark.integration
BIG = b'"' + b"x" * 60_000 + b'"'


def _reads(store: CassandraStore) -> Counter[str]:
    return Counter({name: n for (name, _), n in store.request_counts().items()})


async def test_a_dead_letter_page_is_one_limited_read(api: Api, store: CassandraStore, register: Register) -> None:
    client_id, key = await register()
    now = timing.truncate_ms(datetime.now(UTC)) - timedelta(minutes=5)
    callback = HttpCallback("http://127.0.0.1:9/cb", "POST", {}, 5.0)
    for i in range(40):
        sid = uuid.uuid4()
        failed_at = now - timedelta(seconds=i)
        await store.add_dead_letter(DeadLetter(client_id, sid, f"{sid}:1", failed_at, 3, "HTTP 500", callback, BIG))
    before = _reads(store)
    resp = await api.get("/v1/dead-letters", params={"limit": 5}, headers=key)
    page = await resp.json()
    spent = _reads(store) - before
    assert resp.status == 200 and len(page["dead_letters"]) == 5 and page["next_cursor"]
    assert "payload" not in page["dead_letters"][0]
    assert spent["page_dead_letters"] == 1 and spent["list_dead_letters"] == 0, spent


async def test_the_widest_listing_reads_a_bounded_number_of_partitions(
    api: Api, store: CassandraStore, register: Register
) -> None:
    _, key = await register(poller_count=4)
    start = datetime.now(UTC).replace(microsecond=0)
    params = {"from": start.isoformat(), "to": (start + timedelta(days=1)).isoformat(), "limit": 1000}
    before = _reads(store)
    resp = await api.get("/v1/schedules", params=params, headers=key)
    page = await resp.json()
    spent = _reads(store) - before
    assert resp.status == 200 and page["schedules"] == [] and page["next_cursor"]
    reads = spent["list_minute"] + spent["list_minute_after"] + spent["read_minute"]
    print(f"partition reads for one page of the widest listing: {reads}")
    assert listing.LIST_READ_BUDGET == 256
    assert reads <= 256 + listing.LIST_CONCURRENCY, spent  # the budget, passed by at most one chunk
