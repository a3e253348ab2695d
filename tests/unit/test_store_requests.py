"""The store's request counts: each statement's kind as read from queries.cql, and the
``tickd_store_requests_total`` family the poller node and the API export from them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tickd.poller.metrics import Metrics, status_app
from tickd.schema import queries
from tickd.schema.cassandra.bridge import BATCH, LWT, READ, WRITE, Statements, batch_kind, kind_of
from tickd.schema.request_metrics import StoreRequests
from tickd.service.metrics import ApiMetrics

QUERIES = queries.load()
KINDS = {name: kind_of(query.cql) for name, query in QUERIES.items()}

# Every conditional statement of queries.cql: IF NOT EXISTS inserts, IF <condition> updates and deletes.
CONDITIONAL = {
    "insert_client",
    "set_ack_secret",
    "set_signing_secret",
    "rotate_signing_secret",
    "bump_ref",
    "move_ref",
    "reserve_idempotency_key",
    "first_claim",
    "take_claim",
    "release_claim",
    "take_token",
    "release_token",
    "mark_dead_letter_redriven",
    "move_dead_letter_redrive",
    "claim_business_key",
    "move_business_key",
    "insert_bulk_job",
    "take_bulk_job",
    "save_bulk_job",
    "stop_bulk_job",
    "insert_calendar",
    "update_calendar",
    "delete_calendar",
}


def test_the_conditional_statements_are_the_lwts() -> None:
    assert {name for name, kind in KINDS.items() if kind == LWT} == CONDITIONAL


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("first_claim", LWT),  # INSERT ... IF NOT EXISTS
        ("take_claim", LWT),  # UPDATE ... IF epoch = :seen_epoch
        ("release_claim", LWT),  # IF owner = :owner AND epoch = :epoch
        ("take_token", LWT),  # IF NOT EXISTS before USING TTL
        ("release_token", LWT),  # DELETE ... IF event_id = :event_id
        ("set_ack_secret", LWT),  # IF ack_secret = null
        ("get_claim", READ),
        ("read_minute", READ),
        ("list_claims", READ),
        ("live_nodes", READ),
        ("ping", READ),
        ("heartbeat", WRITE),  # INSERT ... USING TTL
        ("write_checkpoint", WRITE),  # UPDATE ... USING TIMESTAMP
        ("leave_cluster", WRITE),  # DELETE
        ("insert_schedule", WRITE),  # a 'scheduled' literal and USING TTL ... AND TIMESTAMP
        ("record_outcome", WRITE),
        ("mark_hot", WRITE),
    ],
)
def test_kinds_of_real_statements(name: str, kind: str) -> None:
    assert KINDS[name] == kind


def test_every_statement_has_a_kind_other_than_batch() -> None:
    assert set(KINDS.values()) == {LWT, READ, WRITE}


@pytest.mark.parametrize(
    ("cql", "kind"),
    [
        ("select x from t where k = :k", READ),
        ("update t set notify = :notify, modified_if = 1 where k = :k", WRITE),  # "if" inside names
        ("update t set v = :if where k = :k", WRITE),  # a bind marker named if
        ("insert into t (k, \"IF\") values (:k, 'if it rains')", WRITE),  # a quoted name, a string
        ("insert into t (k, v) values (:k, 'it''s IF')", WRITE),  # an escaped quote in a string
        ("insert into t (k, v) values (:k, $$ IF $$)", WRITE),
        ("update t set v = 1 where k = 2 /* IF v = 0 */", WRITE),
        ("insert into t (k) values (:k) if not exists", LWT),
        ("delete from t where k = :k IF EXISTS", LWT),
        ("update t set v = :v where k = :k\nIF\tv = :old", LWT),
        ("BEGIN BATCH INSERT INTO t (k) VALUES (1); INSERT INTO u (k) VALUES (1); APPLY BATCH", BATCH),
        ("BEGIN BATCH UPDATE t SET v = 1 WHERE k = 1 IF v = 0; APPLY BATCH", LWT),
    ],
)
def test_kind_of(cql: str, kind: str) -> None:
    assert kind_of(cql) == kind


def test_statements_read_their_kinds_when_prepared() -> None:
    prepared = {
        name: SimpleNamespace(query_string=query.cql, column_metadata=[], is_idempotent=query.idempotent)
        for name, query in QUERIES.items()
    }
    assert Statements(prepared).kinds == KINDS  # type: ignore[arg-type]


def test_a_batch_is_an_lwt_only_with_a_conditional_statement() -> None:
    assert batch_kind([WRITE, WRITE]) == BATCH
    assert batch_kind([WRITE, LWT]) == LWT


COUNTS = {("first_claim", LWT): 3, ("get_claim", READ): 12, ("batch:insert_ref+insert_schedule", BATCH): 2}


def samples(text: str) -> dict[tuple[str, str], float]:
    """The values of tickd_store_requests_total in an exposition, by (statement, kind)."""
    families = [f for f in text_string_to_metric_families(text) if f.name == "tickd_store_requests"]
    if not families:
        return {}
    (family,) = families
    assert family.type == "counter"
    return {(s.labels["statement"], s.labels["kind"]): s.value for s in family.samples if s.name.endswith("_total")}


def test_the_collector_reads_the_counts_when_scraped() -> None:
    counts: dict[tuple[str, str], int] = {}
    registry = CollectorRegistry()
    registry.register(StoreRequests(lambda: counts))
    text = generate_latest(registry).decode()
    assert "# TYPE tickd_store_requests_total counter" in text
    assert samples(text) == {}
    counts.update(COUNTS)
    text = generate_latest(registry).decode()
    assert 'tickd_store_requests_total{kind="lwt",statement="first_claim"} 3.0' in text.splitlines()
    assert samples(text) == COUNTS


def test_the_collector_is_registered_once() -> None:
    registry = CollectorRegistry()
    registry.register(StoreRequests(dict))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(StoreRequests(dict))


async def test_a_poller_node_serves_them_on_metrics() -> None:
    metrics = Metrics()
    metrics.watch_store(lambda: COUNTS)
    async with TestClient(TestServer(status_app(metrics, dict))) as client:
        response = await client.get("/metrics")
        assert response.status == 200
        assert samples(await response.text()) == COUNTS


def test_without_a_cassandra_store_there_is_no_such_family() -> None:
    """The in-memory store (tickd dev, the simulation) registers no counts."""
    assert "tickd_store_requests" not in generate_latest(Metrics().registry).decode()


def test_the_api_exports_them_too() -> None:
    metrics = ApiMetrics()
    metrics.watch_store(lambda: COUNTS)
    assert samples(generate_latest(metrics.registry).decode()) == COUNTS
