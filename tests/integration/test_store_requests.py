"""The Cassandra store's request counts (``tickd_store_requests_total``) against the real Cassandra: claims
count as LWTs, reads once per page, writes and batches as such, and a node's /metrics serves them."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tickd.poller.metrics import Metrics, status_app
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import InstanceKey, NodeInfo, Schedule
from tickd.schema.settings import StoreSettings
from tickd.schema.timing import minute_bucket

from .conftest import later

pytestmark = pytest.mark.integration
PAGE = 2
ROWS = 5  # three pages of read_minute


@pytest.fixture
async def counted(store_settings: StoreSettings) -> AsyncIterator[CassandraStore]:
    """A store of its own (the shared one's counts move with every other test), in a cluster of its own
    (its heartbeats must not add nodes to the other tests' rings)."""
    settings = dataclasses.replace(store_settings, page_size=PAGE, cluster_name=f"requests-{uuid.uuid4().hex[:8]}")
    store = await CassandraStore.connect(settings)
    yield store
    await store.close()


async def test_claims_and_reads_are_counted_by_kind(counted: CassandraStore, client_id: str) -> None:
    assert counted.request_counts() == {}  # preparing the statements is not counted
    instance = InstanceKey(client_id, 0)
    now = datetime.now(UTC)
    claim = await counted.claim(instance, "node-a", None, now)
    assert claim is not None
    assert await counted.claim(instance, "node-b", None, now) is None  # a lost LWT is a request all the same
    assert await counted.claim(instance, "node-b", claim, now) is not None
    assert await counted.get_claim(instance) is not None
    await counted.heartbeat(NodeInfo("node-a", "127.0.0.1", 9100, now, now), ttl_s=60)
    assert counted.request_counts() == {
        ("first_claim", "lwt"): 2,
        ("take_claim", "lwt"): 1,
        ("get_claim", "read"): 1,
        ("heartbeat", "write"): 1,
    }
    await counted.get_claim(instance)
    assert counted.request_counts()[("get_claim", "read")] == 2


async def test_pages_and_batches_are_counted_per_request(
    counted: CassandraStore, new_schedule: Callable[..., Schedule]
) -> None:
    minute = minute_bucket(later(7200))
    made = [new_schedule(minute + timedelta(seconds=i), poller_id=1) for i in range(ROWS)]
    for s in made:
        await counted.create_schedule(s, datetime.now(UTC))
    batches = {key: n for key, n in counted.request_counts().items() if key[0].startswith("batch:")}
    # One logged batch per create, named by its statements, sorted.
    assert sum(batches.values()) == ROWS
    assert all(kind == "batch" and "insert_schedule" in name.split(":")[1].split("+") for name, kind in batches)
    assert all(name.split(":")[1] == "+".join(sorted(name.split(":")[1].split("+"))) for name, _ in batches)
    rows = [s async for page in counted.read_minute(made[0].instance, minute) for s in page]
    assert len(rows) == ROWS
    assert counted.request_counts()[("read_minute", "read")] == -(-ROWS // PAGE)  # one per page


async def test_a_node_serves_the_counts_on_metrics(counted: CassandraStore, client_id: str) -> None:
    metrics = Metrics()
    metrics.watch_store(counted.request_counts)
    await counted.claim(InstanceKey(client_id, 2), "node-a", None, datetime.now(UTC))
    async with TestClient(TestServer(status_app(metrics, dict))) as client:
        text = await (await client.get("/metrics")).text()
    assert 'tickd_store_requests_total{kind="lwt",statement="first_claim"} 1.0' in text.splitlines()
