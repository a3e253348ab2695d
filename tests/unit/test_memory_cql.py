"""The in-memory CQL interpreter (``schema.memory.cql``) through the bridge, as the Cassandra adapter
uses it: every statement and migration understood, lightweight transactions answered as Cassandra
answers them, TTLs, write timestamps, paging, and what it refuses to prepare."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from cassandra.query import UNSET_VALUE

from tickd.schema import queries
from tickd.schema.cassandra.bridge import Bridge, Statements
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import cql, cql_schema
from tickd.schema.memory.connection import MemoryConnection
from tickd.schema.memory.cql_lexer import UnsupportedCql
from tickd.schema.memory.engine import Table, Tables
from tickd.schema.memory.faults import NoFaults
from tickd.schema.settings import StoreSettings

START = datetime(2026, 11, 23, 12, 0, 7, 250_000, tzinfo=UTC)
MINUTE = START.replace(second=0, microsecond=0)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def connection(clock: Clock) -> MemoryConnection:
    return MemoryConnection(Tables(clock))


def bridge_on(connection: MemoryConnection, page_size: int = StoreSettings.page_size) -> Bridge:
    return Bridge(connection, Statements.prepare(connection, page_size))


@pytest.fixture
def db(connection: MemoryConnection) -> Bridge:
    return bridge_on(connection)


def claim(owner: str = "n1", **values: Any) -> dict[str, Any]:
    return {"client_id": "c", "poller_id": 0, "owner": owner, "claimed_at": START, **values}


# -- every statement, every migration -------------------------------------------------------------------


@pytest.mark.parametrize("query", queries.load().values(), ids=lambda q: q.name)
def test_every_statement_of_queries_cql_compiles(query: queries.Query) -> None:
    prepared = cql.prepare(query)
    assert {m.name for m in prepared.column_metadata} == set(_markers(query.cql))


def _markers(text: str) -> list[str]:
    return [token.text for token in cql.Cursor(text, "test")._tokens if token.kind == "marker"]


def test_the_migrations_give_each_table_its_key_order_and_types() -> None:
    schema = cql_schema.load()
    key = ("client_id", "poller_id", "minute"), ("due_at", "schedule_id")
    assert schema["schedules"].table == Table("schedules", *key)
    assert schema["dead_letters"].table.descending == frozenset({"failed_at"})
    assert schema["idempotency_keys"].table.default_ttl_s == 86400
    assert str(schema["schedule_refs"].columns["stale"]) == "frozen<list<frozen<tuple<int, timestamp>>>>"
    assert str(schema["clients"].columns["kafka_topics"]) == "set<text>"
    assert schema["schedules"].columns["options"].name == "text"  # added by 002's ALTER TABLE


# -- values --------------------------------------------------------------------------------------------


async def test_values_come_back_as_the_driver_returns_them(db: Bridge) -> None:
    at = START.replace(microsecond=123_456)
    await db.write("update_client", _client(updated_at=at, kafka_topics={"b", "a"}))
    row = (await db.rows("get_client", {"client_id": "c"}))[0]
    assert row.updated_at == START.replace(microsecond=123_000, tzinfo=None)  # naive UTC, milliseconds
    assert row.updated_at.tzinfo is None
    assert row.kafka_topics == {"a", "b"} and row.resized_at is None and row.poller_count == 2


async def test_an_unset_value_leaves_the_cell_and_a_null_or_empty_set_deletes_it(db: Bridge) -> None:
    await db.write("update_client", _client(resized_at=START, kafka_topics={"t"}))
    await db.write("update_client", _client(resized_at=UNSET_VALUE, kafka_topics=set(), api_key_hash=None))
    row = (await db.rows("get_client", {"client_id": "c"}))[0]
    assert (row.resized_at, row.kafka_topics, row.api_key_hash) == (START.replace(tzinfo=None), None, None)


def _client(**changes: Any) -> dict[str, Any]:
    values = {
        "client_id": "c",
        "poller_count": 2,
        "poller_span": 2,
        "active": True,
        "api_key_hash": "h",
        "kafka_topics": set(),
        "updated_at": START,
        "resized_at": UNSET_VALUE,
    }
    return {**values, **changes}


async def test_a_request_the_server_refuses_is_store_unavailable(db: Bridge) -> None:
    with pytest.raises(StoreUnavailable, match=r"^record_skipped: InvalidRequest: A TTL must be greater"):
        await db.write(
            "record_skipped", {"client_id": "c", "poller_id": 0, "minute": MINUTE, "reason": "r", "rows": 1, "ttl": -1}
        )
    with pytest.raises(StoreUnavailable, match=r"^list_runs: InvalidRequest: LIMIT must be strictly positive"):
        await db.rows("list_runs", {"client_id": "c", "schedule_id": uuid.uuid4(), "before": START, "max_rows": 0})
    with pytest.raises(TypeError):  # as the driver's serializer: never sent
        await db.write(
            "mark_hot", {"minute": MINUTE, "client_id": "c", "poller_id": 2**31, "touched_at": START, "write_id": None}
        )


# -- lightweight transactions --------------------------------------------------------------------------


async def test_if_not_exists_answers_the_whole_existing_row_in_cassandras_column_order(db: Bridge) -> None:
    assert await db.applied("first_claim", claim()) == (True, (True,))
    applied, row = await db.applied("first_claim", claim("n2"))
    assert not applied
    assert row._fields == ("applied", "client_id", "poller_id", "claimed_at", "epoch", "owner")
    assert tuple(row) == (False, "c", 0, START.replace(tzinfo=None), 1, "n1")


async def test_a_condition_answers_the_current_values_of_its_columns(db: Bridge) -> None:
    await db.applied("first_claim", claim())
    applied, row = await db.applied("release_claim", {"client_id": "c", "poller_id": 0, "owner": "n2", "epoch": 1})
    assert not applied and row._fields == ("applied", "owner", "epoch") and tuple(row) == (False, "n1", 1)
    applied, row = await db.applied("release_claim", {"client_id": "c", "poller_id": 0, "owner": "n1", "epoch": 1})
    assert applied and tuple(row) == (True,)
    assert [tuple(r) for r in await db.rows("get_claim", {"client_id": "c", "poller_id": 0})] == [(None, 1)]


async def test_a_condition_on_a_missing_row_answers_applied_only_and_col_null_holds_there(db: Bridge) -> None:
    """As Cassandra (checked on 4.1): a missing row's columns are all null."""
    refused = await db.applied("release_claim", {"client_id": "c", "poller_id": 0, "owner": "n1", "epoch": 1})
    assert refused == (False, (False,)) and refused[1]._fields == ("applied",)
    assert await db.applied("set_ack_secret", {"client_id": "nobody", "ack_secret": "s"}) == (True, (True,))
    assert (await db.applied("set_ack_secret", {"client_id": "nobody", "ack_secret": "t"}))[1].ack_secret == "s"


async def test_a_transaction_writes_at_its_ballot_below_a_plain_write_of_the_same_millisecond(
    db: Bridge, clock: Clock
) -> None:
    """Cassandra's Paxos ballot is a millisecond clock: a plain write made just before in the same
    millisecond wins over the transaction's (schema.timing.below_ballots)."""
    clock.now = START.replace(microsecond=250_900)
    await db.applied("first_claim", claim())
    await db.write("update_client", _client())  # any plain write: takes the microsecond clock
    await db.applied("take_claim", claim("n2", epoch=2, seen_epoch=1))
    assert (await db.rows("get_claim", {"client_id": "c", "poller_id": 0}))[0].owner == "n2"


# -- time: TTLs and write timestamps --------------------------------------------------------------------


async def test_ttls_expire_in_whole_seconds_and_a_tables_default_applies(db: Bridge, clock: Clock) -> None:
    node = {
        "cluster": "k",
        "node_id": "n",
        "address": "a",
        "metrics_port": 1,
        "started_at": START,
        "heartbeat_at": START,
    }
    await db.write("heartbeat", {**node, "ttl": 2})
    await db.write(
        "mark_hot", {"minute": MINUTE, "client_id": "c", "poller_id": 0, "touched_at": START, "write_id": None}
    )
    clock.now = START.replace(microsecond=0) + timedelta(seconds=1, microseconds=999_999)
    assert len(await db.rows("live_nodes", {"cluster": "k"})) == 1
    clock.advance(0.000_001)
    assert await db.rows("live_nodes", {"cluster": "k"}) == []
    clock.now = START.replace(microsecond=0) + timedelta(seconds=7199)  # hot_marks: default_time_to_live 7200
    assert len(await db.rows("read_hot_marks", {"minute": MINUTE})) == 1
    clock.advance(1)
    assert await db.rows("read_hot_marks", {"minute": MINUTE}) == []


async def test_using_timestamp_decides_which_write_wins_whatever_the_order(db: Bridge) -> None:
    later, earlier = MINUTE + timedelta(minutes=5), MINUTE + timedelta(minutes=1)
    for minute in (later, earlier):
        values = {"client_id": "c", "poller_id": 0, "last_minute": minute, "stamp": int(minute.timestamp() * 1e6)}
        await db.write("raise_horizon", values)
    rows = await db.rows("get_horizon", {"client_id": "c", "poller_id": 0})
    assert rows[0].last_minute == later.replace(tzinfo=None)


async def test_a_delete_shadows_only_what_was_written_before_it(db: Bridge) -> None:
    key = {"client_id": "c", "name": "p"}
    policy = {**key, "max_in_flight": 1, "release_timeout_s": 5, "created_at": START, "updated_at": START}
    await db.write("put_policy", policy)
    await db.write("delete_policy", key)
    assert await db.rows("get_policy", key) == []
    await db.write("put_policy", policy)  # a later timestamp: back
    assert len(await db.rows("get_policy", key)) == 1


# -- reads and paging -----------------------------------------------------------------------------------


async def _rows_at(db: Bridge, dues: list[datetime], ids: list[uuid.UUID]) -> None:
    for due, sid in zip(dues, ids, strict=True):
        values = {
            "client_id": "c",
            "poller_id": 0,
            "minute": MINUTE,
            "due_at": due,
            "schedule_id": sid,
            "status": "scheduled",
            "fire_at": due,
            "version": 1,
            "payload": b"",
            "callback": "{}",
            "attempts": 0,
            "last_error": UNSET_VALUE,
            "created_at": START,
            "options": UNSET_VALUE,
            "seq": UNSET_VALUE,
            "tries": UNSET_VALUE,
            "ttl": 3600,
            "ts": UNSET_VALUE,
        }
        await db.write("insert_schedule", values)


async def test_a_full_page_promises_another_and_a_limit_ends_the_paging(connection: MemoryConnection) -> None:
    db = bridge_on(connection, page_size=2)
    ids = [uuid.UUID(int=i) for i in range(1, 5)]
    await _rows_at(db, [MINUTE + timedelta(seconds=i) for i in range(4)], ids)
    where = {"client_id": "c", "poller_id": 0, "minute": MINUTE, "from_due": MINUTE}
    pages = [[r.schedule_id for r in page] async for page in db.pages("read_minute", where)]
    assert pages == [ids[:2], ids[2:], []]
    limited = [len(page) async for page in db.pages("list_minute", {**where, "max_rows": 2})]
    assert limited == [2]
    limited = [len(page) async for page in db.pages("list_minute", {**where, "max_rows": 3})]
    assert limited == [2, 1]
    until = await db.rows(
        "read_minute_until",
        {**where, "from_due": MINUTE + timedelta(seconds=1), "until_due": MINUTE + timedelta(seconds=3)},
    )
    assert [r.schedule_id for r in until] == ids[1:3]


async def test_a_tuple_relation_resumes_after_a_row_in_clustering_order(db: Bridge) -> None:
    """Rows of one millisecond ordered by id as Cassandra orders uuids (version first, then bytes)."""
    due = MINUTE + timedelta(seconds=1)
    v4, v1 = uuid.UUID("ffffffff-ffff-4fff-bfff-ffffffffffff"), uuid.uuid1()
    ids = [uuid.UUID(int=5), v1, v4]
    await _rows_at(db, [due, due, due], ids)
    where = {"client_id": "c", "poller_id": 0, "minute": MINUTE, "max_rows": 10}
    everything = await db.rows("list_minute", {**where, "from_due": MINUTE})
    assert [r.schedule_id for r in everything] == [uuid.UUID(int=5), v1, v4]  # version 0, 1, 4
    after = await db.rows("list_minute_after", {**where, "due_at": due, "schedule_id": v1})
    assert [r.schedule_id for r in after] == [v4]


async def test_a_range_on_a_descending_column_compares_values_and_answers_in_its_order(db: Bridge) -> None:
    day = START.date()
    for i in range(4):
        values = {
            "client_id": "c",
            "day": day,
            "failed_at": START + timedelta(seconds=i),
            "schedule_id": uuid.UUID(int=i),
            "fire_id": f"f{i}",
            "attempts": 1,
            "last_error": "e",
            "callback": "{}",
            "payload": b"p",
            "tries": UNSET_VALUE,
            "ttl": 3600,
        }
        await db.write("insert_dead_letter", values)
    window = {
        "client_id": "c",
        "day": day,
        "since": START + timedelta(seconds=1),
        "until": START + timedelta(seconds=2),
    }
    rows = await db.rows("page_dead_letters", {**window, "max_rows": 10})
    assert [r.fire_id for r in rows] == ["f2", "f1"]
    assert rows[0]._fields[-1] == "redriven_due_at" and "payload" not in rows[0]._fields


async def test_a_whole_table_scan_pages_across_partitions(connection: MemoryConnection) -> None:
    db = bridge_on(connection, page_size=2)
    for poller in range(3):
        await db.applied("first_claim", claim(poller_id=poller))
    pages = [[r.poller_id for r in page] async for page in db.pages("list_claims", {})]
    assert sorted(p for page in pages for p in page) == [0, 1, 2] and len(pages) == 2
    assert [tuple(r) for r in await db.rows("ping", {})] == [(cql.RELEASE_VERSION,)]


# -- batches and fault points ---------------------------------------------------------------------------


class Points(NoFaults):
    def __init__(self, fail_after: str = "") -> None:
        self.seen: list[str] = []
        self.fail_after = fail_after

    async def before(self, op: str) -> None:
        self.seen.append(op)

    async def batchlog(self, op: str) -> None:
        self.seen.append(f"batchlog {op}")

    async def after(self, op: str) -> None:
        if op == self.fail_after:
            raise StoreUnavailable(f"injected after {op}")


def _marks(*pollers: int, minute: datetime = MINUTE) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("mark_hot", {"minute": minute, "client_id": "c", "poller_id": p, "touched_at": START, "write_id": None})
        for p in pollers
    ]


async def test_an_unlogged_batch_over_two_partitions_can_half_apply(db: Bridge, connection: MemoryConnection) -> None:
    other = MINUTE + timedelta(minutes=1)
    connection.faults = Points(fail_after="batch:mark_hot/partial")
    with pytest.raises(StoreUnavailable):
        await db.batch([*_marks(0), *_marks(1, minute=other)], logged=False)
    assert len(await db.rows("read_hot_marks", {"minute": MINUTE})) == 1
    assert await db.rows("read_hot_marks", {"minute": other}) == []


async def test_a_logged_batch_over_two_partitions_passes_its_batchlog(db: Bridge, connection: MemoryConnection) -> None:
    points = Points()
    connection.faults = points
    await db.batch([*_marks(0), *_marks(1, minute=MINUTE + timedelta(minutes=1))], logged=True)
    await db.batch(_marks(0, 1), logged=True)  # one partition: no batchlog
    assert points.seen == ["batch:mark_hot", "batchlog batch:mark_hot", "batch:mark_hot"]


async def test_a_resent_request_carries_its_first_write_timestamp(connection: MemoryConnection) -> None:
    from tickd.schema.cassandra.bridge import Sends

    sends = Sends()
    prepared = cql.prepare(queries.load()["mark_hot"])
    values = _marks(0)[0][1]
    await connection.send(prepared, values, None, None, sends)
    first = sends.timestamp
    await connection.send(prepared, values, None, None, sends)
    assert sends.timestamp == first and connection.write_timestamp() > first


async def test_a_conditional_statement_in_a_batch_is_refused(db: Bridge) -> None:
    with pytest.raises(UnsupportedCql, match="first_claim: a conditional statement in a batch"):
        await db.batch([("first_claim", claim()), *_marks(0)], logged=True)


# -- what it refuses to prepare -------------------------------------------------------------------------

REFUSED = {
    "SELECT * FROM clients": "SELECT *",
    "SELECT client_id FROM clients WHERE active = :a": "not a primary key column",
    "SELECT due_at FROM schedules WHERE client_id = :c AND poller_id = :p": "minute not restricted by =",
    "SELECT due_at FROM schedules WHERE client_id = :c AND poller_id = :p AND minute = :m AND schedule_id = :s": (
        "schedule_id restricted by = after an unrestricted clustering column"
    ),
    "SELECT due_at FROM schedules WHERE client_id = :c AND poller_id IN (:p) AND minute = :m": "the relation in",
    "SELECT owner FROM instance_claims WHERE client_id = :c AND poller_id = :p ALLOW FILTERING": "ALLOW FILTERING",
    "SELECT count(owner) FROM instance_claims": "the function call count",
    "SELECT owner FROM instance_claims WHERE client_id = ? AND poller_id = ?": "positional ? markers",
    "SELECT owner FROM nowhere": "no table nowhere",
    "SELECT nothing FROM instance_claims": "no column 'nothing'",
    "DELETE FROM nodes WHERE cluster = :c": "a write to a range of rows or a whole partition",
    "UPDATE clients SET kafka_topics = kafka_topics + :t WHERE client_id = :c": "collection or counter arithmetic",
    "UPDATE clients USING TIMESTAMP :ts SET active = :a WHERE client_id = :c IF active = :b": (
        "USING TIMESTAMP in a conditional"
    ),
    "UPDATE instance_claims SET owner = :o WHERE client_id = :c AND poller_id = :p IF epoch > :e": (
        "the condition epoch >"
    ),
    "BEGIN BATCH INSERT INTO clients (client_id) VALUES (:c) APPLY BATCH": "the statement begin",
    "INSERT INTO clients (active) VALUES (:a)": "without the primary key column client_id",
}


@pytest.mark.parametrize(("text", "construct"), REFUSED.items(), ids=list(REFUSED.values()))
def test_a_statement_outside_the_subset_is_refused_when_prepared(text: str, construct: str) -> None:
    with pytest.raises(UnsupportedCql, match=r"^queries\.cql statement odd: unsupported CQL: ") as info:
        cql.prepare(queries.Query("odd", text, idempotent=True))
    assert construct in str(info.value)


def test_a_migration_outside_the_subset_is_refused() -> None:
    schema: cql_schema.Schema = {}
    with pytest.raises(UnsupportedCql, match=r"011_new\.cql statement 1: unsupported CQL: .*CREATE TABLE"):
        cql_schema.apply(schema, "CREATE INDEX ON clients (active);\n", "011_new.cql")
    with pytest.raises(UnsupportedCql, match="static columns"):
        cql_schema.apply(schema, "CREATE TABLE t (k int, s int static, PRIMARY KEY (k));\n", "012.cql")


def test_a_day_column_binds_a_date_not_a_datetime() -> None:
    """The driver refuses a datetime for a ``date`` column; so does the interpreter (a typo'd bind)."""
    bind: Callable[[Any], Any] = cql_schema.load()["dead_letters"].columns["day"].bind
    assert bind(date(2026, 1, 2)) == date(2026, 1, 2)
    with pytest.raises(TypeError):
        bind(START)
