"""The driver bridge against a stub driver session: error mapping, paging, binding by name."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from cassandra import ConsistencyLevel, OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout, WriteType
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionBusy, ConnectionException, ConnectionShutdown
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage, ServerError
from cassandra.query import named_tuple_factory

from tickd.schema import deadline
from tickd.schema.cassandra import adapter
from tickd.schema.cassandra import bridge as bridge_module
from tickd.schema.cassandra.bridge import Bridge, Statements, rows_of
from tickd.schema.errors import BatchNotLogged, OutcomeUnknown, StoreUnavailable
from tickd.schema.model import IdempotencyKey
from tickd.schema.settings import StoreSettings

UNAVAILABLE = [
    NoHostAvailable("Unable to complete the operation against any hosts", {"127.0.0.1:9042": ConnectionRefusedError()}),
    OperationTimedOut("errors={}, last_host=127.0.0.1:9042"),
    Unavailable("Cannot achieve consistency level QUORUM", ConsistencyLevel.QUORUM, 2, 1),
    ReadTimeout("Operation timed out - received only 0 responses."),
    WriteTimeout("Operation timed out - received only 0 responses.", write_type=WriteType.SIMPLE),
    ConnectionException("Connection to 127.0.0.1:9042 was closed"),
    ConnectionShutdown("Connection to 127.0.0.1:9042 is defunct"),
    ConnectionBusy("Connection to 127.0.0.1:9042 is overloaded"),
    OverloadedErrorMessage(0x1001, "overloaded", None),
    IsBootstrappingErrorMessage(0x1002, "bootstrapping", None),
    ServerError(0x0000, "java.lang.RuntimeException", None),
    ConnectionRefusedError(111, "Connection refused"),
    TimeoutError("timed out"),
]


def _stmt(cql: str, *markers: str, idempotent: bool = True) -> Any:
    return SimpleNamespace(
        query_string=cql, column_metadata=[SimpleNamespace(name=m) for m in markers], is_idempotent=idempotent
    )


STATEMENTS = Statements(
    {
        "get_claim": _stmt("SELECT owner, epoch FROM instance_claims WHERE ...", "client_id", "poller_id"),
        "read_hot_marks": _stmt("SELECT client_id FROM hot_marks WHERE minute = :minute", "minute"),
        "mark_hot": _stmt("UPDATE hot_marks SET touched_at = :touched_at WHERE minute = :minute", "minute"),
        "record_skipped": _stmt("INSERT INTO skipped_minutes (minute) VALUES (:minute)", "minute"),
        "reserve_idempotency_key": _stmt(
            "INSERT INTO idempotency_keys (key) VALUES (:key) IF NOT EXISTS", "key", idempotent=True
        ),
        "first_claim": _stmt(
            "INSERT INTO instance_claims (minute) VALUES (:minute) IF NOT EXISTS", "minute", idempotent=False
        ),
    }
)
KEY = {"client_id": "c", "poller_id": 0}


@dataclass
class StubFuture:
    """Answers like a driver ResponseFuture: rows or an error, from the driver's thread or at once."""

    outcome: list[Any] | BaseException
    paging_state: bytes | None = None
    from_thread: bool = True

    @property
    def _paging_state(self) -> bytes | None:
        return self.paging_state

    def add_callbacks(self, on_rows: Callable[[Any], None], on_error: Callable[[BaseException], None]) -> None:
        outcome = self.outcome

        def answer() -> None:
            on_error(outcome) if isinstance(outcome, BaseException) else on_rows(outcome)

        if self.from_thread:
            threading.Thread(target=answer).start()
        else:
            answer()


@dataclass
class StubSession:
    """Hands out the queued futures in turn (raising a queued exception from ``execute_async`` itself)."""

    answers: list[StubFuture | BaseException]
    calls: list[tuple[Any, Any, bytes | None]] = field(default_factory=list)
    timeouts: list[float | None] = field(default_factory=list)
    # The client timestamp of each send, asked for inside execute_async as the driver does.
    timestamps: list[int] = field(default_factory=list)
    clock: bridge_module.RequestTimestamps = field(default_factory=bridge_module.RequestTimestamps)

    def execute_async(
        self, statement: Any, values: Any, paging_state: bytes | None = None, timeout: float | None = None
    ) -> StubFuture:
        self.calls.append((statement, values, paging_state))
        self.timeouts.append(timeout)
        self.timestamps.append(self.clock())
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def bridge(*answers: StubFuture | BaseException) -> Bridge:
    return Bridge(StubSession(list(answers)), STATEMENTS)  # type: ignore[arg-type]


def _check(info: pytest.ExceptionInfo[StoreUnavailable], exc: BaseException) -> None:
    message = str(info.value)
    assert message.startswith(f"get_claim: {type(exc).__name__}: ")
    assert info.value.retriable and info.value.__cause__ is exc


@pytest.mark.parametrize("exc", UNAVAILABLE, ids=lambda e: type(e).__name__)
async def test_errback_from_the_driver_thread_is_store_unavailable(exc: BaseException) -> None:
    with pytest.raises(StoreUnavailable) as info:
        await bridge(StubFuture(exc)).rows("get_claim", KEY)
    _check(info, exc)


@pytest.mark.parametrize("exc", UNAVAILABLE, ids=lambda e: type(e).__name__)
async def test_errback_at_once_is_store_unavailable(exc: BaseException) -> None:
    with pytest.raises(StoreUnavailable) as info:
        await bridge(StubFuture(exc, from_thread=False)).rows("get_claim", KEY)
    _check(info, exc)


@pytest.mark.parametrize("exc", UNAVAILABLE, ids=lambda e: type(e).__name__)
async def test_execute_async_raising_is_store_unavailable(exc: BaseException) -> None:
    with pytest.raises(StoreUnavailable) as info:
        await bridge(exc).applied("get_claim", KEY)
    _check(info, exc)


async def test_an_error_on_a_later_page_is_store_unavailable() -> None:
    exc = NoHostAvailable("Unable to complete the operation against any hosts", {})
    with pytest.raises(StoreUnavailable, match=r"^read_hot_marks: NoHostAvailable: "):
        await bridge(StubFuture([1], b"p1"), StubFuture(exc)).rows("read_hot_marks", {"minute": 0})


@pytest.mark.parametrize("exc", [ValueError("bad value"), KeyError("x"), RuntimeError("bug")], ids=repr)
async def test_programming_errors_are_not_disguised(exc: Exception) -> None:
    with pytest.raises(type(exc)):
        await bridge(StubFuture(exc)).rows("get_claim", KEY)


async def test_rows_pages_through_to_the_end() -> None:
    b = bridge(StubFuture([1, 2], b"p1"), StubFuture([3], b"p2"), StubFuture([]))
    assert await b.rows("read_hot_marks", {"minute": 0}) == [1, 2, 3]
    session: StubSession = b._session  # type: ignore[assignment]
    assert [state for _, _, state in session.calls] == [None, b"p1", b"p2"]


async def test_pages_come_one_at_a_time() -> None:
    b = bridge(StubFuture([1], b"p1"), StubFuture([2]))
    assert [page async for page in b.pages("read_hot_marks", {"minute": 0})] == [[1], [2]]


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"client_id": "c"}, r"missing values \['poller_id'\]"),
        ({**KEY, "pollerid": 1}, r"unknown names \['pollerid'\]"),
    ],
)
async def test_binding_needs_exactly_the_marker_names(values: dict[str, Any], problem: str) -> None:
    b = bridge()
    with pytest.raises(ValueError, match=problem):
        await b.rows("get_claim", values)


async def test_connect_with_every_host_down_is_store_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": ConnectionRefusedError()})
    shut: list[bool] = []

    def refuse(keyspace: str) -> None:
        raise exc

    cluster = SimpleNamespace(connect=refuse, shutdown=lambda: shut.append(True))
    monkeypatch.setattr(adapter, "build_cluster", lambda settings: cluster)
    with pytest.raises(StoreUnavailable, match=r"^connect to Cassandra at 127\.0\.0\.1: NoHostAvailable: ") as info:
        await adapter.CassandraStore.connect(StoreSettings())
    assert info.value.__cause__ is exc and shut == [True]


class StubBatch:
    """Stands in for the driver's BatchStatement, which only takes real prepared statements."""

    def __init__(self, batch_type: Any) -> None:
        self.statements: list[Any] = []
        self.is_idempotent = True

    def add(self, statement: Any, values: Any) -> None:
        self.statements.append((statement, values))


async def test_requests_are_counted_per_round_trip_with_their_kind() -> None:
    b = bridge(StubFuture([1], b"p1"), StubFuture([2], b"p2"), StubFuture([]), StubFuture([[True]]), StubFuture([]))
    assert b.request_counts() == {}
    await b.rows("read_hot_marks", {"minute": 0})  # three pages, three requests
    await b.applied("first_claim", {"minute": 0})
    await b.write("mark_hot", {"minute": 0})
    assert b.request_counts() == {("read_hot_marks", "read"): 3, ("first_claim", "lwt"): 1, ("mark_hot", "write"): 1}


async def test_a_failed_request_is_counted_and_a_refused_one_is_not() -> None:
    b = bridge(StubFuture(TimeoutError("timed out")))
    with pytest.raises(StoreUnavailable):
        await b.rows("get_claim", KEY)
    with pytest.raises(ValueError):  # never sent: the values do not bind
        await b.rows("get_claim", {"client_id": "c"})
    assert b.request_counts() == {("get_claim", "read"): 1}


async def test_a_batch_counts_once_under_its_statement_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge_module, "BatchStatement", StubBatch)
    b = bridge(StubFuture([]), StubFuture([]), StubFuture(TimeoutError("timed out")))
    writes = [("record_skipped", {"minute": 1}), ("mark_hot", {"minute": 1}), ("mark_hot", {"minute": 2})]
    await b.batch(writes, logged=True)
    await b.batch(writes[1:], logged=False)
    with pytest.raises(StoreUnavailable, match=r"^batch:mark_hot\+record_skipped: TimeoutError: "):
        await b.batch(writes[::-1], logged=True)
    assert b.request_counts() == {("batch:mark_hot+record_skipped", "batch"): 2, ("batch:mark_hot", "batch"): 1}


async def test_a_batch_holding_a_conditional_statement_is_an_lwt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge_module, "BatchStatement", StubBatch)
    b = bridge(StubFuture([[True]]))
    await b.batch([("first_claim", {"minute": 1}), ("mark_hot", {"minute": 1})], logged=True)
    assert b.request_counts() == {("batch:first_claim+mark_hot", "lwt"): 1}


# -- a logged batch whose batchlog could not be written ----------------------------------------------


async def test_a_batchlog_timeout_is_batch_not_logged_and_other_write_timeouts_are_not() -> None:
    batchlog = WriteTimeout("Operation timed out - received only 1 responses.", write_type=WriteType.BATCH_LOG)
    with pytest.raises(BatchNotLogged) as info:
        await bridge(StubFuture(batchlog)).rows("get_claim", KEY)
    assert info.value.retriable and info.value.__cause__ is batchlog
    for write_type in (WriteType.SIMPLE, WriteType.BATCH, WriteType.UNLOGGED_BATCH, WriteType.CAS):
        timeout = WriteTimeout("Operation timed out", write_type=write_type)
        with pytest.raises(StoreUnavailable) as other:
            await bridge(StubFuture(timeout)).rows("get_claim", KEY)
        assert not isinstance(other.value, BatchNotLogged), WriteType.value_to_name[write_type]


def test_the_driver_does_not_send_a_batch_again_whose_batchlog_timed_out() -> None:
    """The adapters send its writes without a batchlog at once; a second try would pick the same dead
    node to hold the log and wait out a second write timeout. Other decisions are the driver's."""
    policy = bridge_module.build_cluster(StoreSettings()).profile_manager.default.retry_policy
    assert isinstance(policy, bridge_module.NoBatchlogRetry)
    one = ConsistencyLevel.LOCAL_QUORUM
    assert policy.on_write_timeout(None, one, WriteType.BATCH_LOG, 2, 1, 0) == (policy.RETHROW, None)
    assert policy.on_write_timeout(None, one, WriteType.SIMPLE, 2, 1, 0) == (policy.RETHROW, None)
    assert policy.on_read_timeout(None, one, 2, 2, False, 0) == (policy.RETRY, one)


async def test_a_lightweight_transaction_that_timed_out_has_an_unknown_outcome() -> None:
    cas = WriteTimeout("Operation timed out - received only 0 responses.", write_type=WriteType.CAS)
    with pytest.raises(OutcomeUnknown):
        await bridge(StubFuture(cas)).applied("get_claim", KEY)


async def test_an_idempotency_key_reservation_that_timed_out_is_sent_again() -> None:
    """Its own earlier round may have applied: the second finds that row, naming this request's schedule
    id, and the create goes on as its own (C3: a replica killed mid-round)."""
    reservation = IdempotencyKey("c1", "k1", uuid.uuid4(), "digest", datetime(2030, 1, 1, tzinfo=UTC))
    row = SimpleNamespace(
        applied=False,
        schedule_id=reservation.schedule_id,
        request_digest="digest",
        created_at=reservation.created_at.replace(tzinfo=None),
    )
    calls: list[str] = []

    class Db:
        async def applied(self, name: str, values: Any) -> tuple[bool, Any]:
            calls.append(name)
            if len(calls) == 1:
                raise OutcomeUnknown("reserve_idempotency_key: WriteTimeout (CAS)")
            return False, row

    store = adapter.CassandraStore.__new__(adapter.CassandraStore)
    store._db = Db()  # type: ignore[assignment]
    assert await store.reserve_idempotency_key(reservation) == reservation
    assert calls == ["reserve_idempotency_key", "reserve_idempotency_key"]


async def test_a_request_gets_only_what_is_left_of_the_store_budget() -> None:
    """The driver's own timeout when the budget has more left (the common path sends no timeout)."""
    b = Bridge(
        StubSession([StubFuture([]), StubFuture([]), StubFuture([])]),  # type: ignore[arg-type]
        STATEMENTS,
        request_timeout_s=10.0,
    )
    await b.rows("get_claim", KEY)
    with deadline.budget(2.0):
        await b.rows("get_claim", KEY)
    with deadline.budget(60.0):
        await b.rows("get_claim", KEY)
    timeouts = b._session.timeouts  # type: ignore[attr-defined]
    assert timeouts[0] is None and timeouts[2] is None
    assert 1.9 < timeouts[1] <= 2.0


async def test_a_request_past_the_budget_is_not_sent() -> None:
    session = StubSession([StubFuture([])])
    b = Bridge(session, STATEMENTS)  # type: ignore[arg-type]
    with deadline.budget(0.0), pytest.raises(StoreUnavailable, match=r"^get_claim: not sent"):
        await b.rows("get_claim", KEY)
    assert session.calls == [] and b.request_counts() == {}


def _connections_died() -> NoHostAvailable:
    heartbeat = "errors=Connection heartbeat timeout after 5.0 seconds, last_host=10.213.0.13:9042"
    return NoHostAvailable(
        "Unable to complete the operation against any hosts", {"10.213.0.13:9042": ConnectionShutdown(heartbeat)}
    )


async def test_an_idempotent_request_whose_connections_died_is_sent_once_more() -> None:
    """The driver reports no host left when a dead connection fails a request whose speculative
    executions used up the plan (cluster test C2); only connection deaths, no node's refusal."""
    session = StubSession([StubFuture(_connections_died()), StubFuture([(1,)])])
    b = Bridge(session, STATEMENTS)  # type: ignore[arg-type]
    assert await b.rows("get_claim", KEY) == [(1,)]
    assert len(session.calls) == 2 and b.request_counts() == {("get_claim", "read"): 2}


async def test_it_is_sent_once_more_only() -> None:
    session = StubSession([StubFuture(_connections_died()), StubFuture(_connections_died())])
    with pytest.raises(StoreUnavailable, match=r"^get_claim: NoHostAvailable: "):
        await Bridge(session, STATEMENTS).rows("get_claim", KEY)  # type: ignore[arg-type]
    assert len(session.calls) == 2


@pytest.mark.parametrize(
    "exc",
    [
        NoHostAvailable("none", {"h1": ConnectionShutdown("defunct"), "h2": Unavailable("no quorum")}),
        NoHostAvailable("none", {}),
        ConnectionShutdown("defunct"),
        OperationTimedOut("errors={}, last_host=h1"),
    ],
    ids=["a-node-refused", "no-errors", "bare-connection-error", "client-timeout"],
)
async def test_other_failures_are_not_sent_again(exc: BaseException) -> None:
    session = StubSession([StubFuture(exc), StubFuture([(1,)])])
    with pytest.raises(StoreUnavailable):
        await Bridge(session, STATEMENTS).rows("get_claim", KEY)  # type: ignore[arg-type]
    assert len(session.calls) == 1


async def test_a_lightweight_transaction_whose_connections_died_is_not_sent_again() -> None:
    session = StubSession([StubFuture(_connections_died()), StubFuture([(True,)])])
    with pytest.raises(StoreUnavailable):
        await Bridge(session, STATEMENTS).applied("first_claim", {"minute": 0})  # type: ignore[arg-type]
    assert len(session.calls) == 1


async def test_an_idempotent_lightweight_transaction_whose_connections_died_is_sent_once_more() -> None:
    """Its condition decides again: the Idempotency-Key reservation finds its own row, or applies."""
    session = StubSession([StubFuture(_connections_died()), StubFuture([(True,)])])
    b = Bridge(session, STATEMENTS)  # type: ignore[arg-type]
    assert (await b.applied("reserve_idempotency_key", {"key": "k"}))[0] is True
    assert len(session.calls) == 2


async def test_a_write_whose_connections_died_is_sent_once_more_with_its_first_timestamp() -> None:
    """The first send may still land: with the same client timestamp, the second writes the same cells
    at the same time, and cannot overwrite what was written in between (tests/integration/test_resend)."""
    session = StubSession([StubFuture(_connections_died()), StubFuture([]), StubFuture([])])
    b = Bridge(session, STATEMENTS)  # type: ignore[arg-type]
    await b.write("mark_hot", {"minute": 0})
    first, again = session.timestamps
    assert first == again
    await b.write("mark_hot", {"minute": 1})  # the next request has a timestamp of its own, a newer one
    assert session.timestamps[2] > first


@pytest.mark.parametrize("logged", [True, False])
async def test_a_batch_whose_connections_died_is_sent_once_more_with_its_first_timestamp(
    monkeypatch: pytest.MonkeyPatch, logged: bool
) -> None:
    monkeypatch.setattr(bridge_module, "BatchStatement", StubBatch)
    session = StubSession([StubFuture(_connections_died()), StubFuture([])])
    writes = [("mark_hot", {"minute": 0}), ("record_skipped", {"minute": 0})]
    await Bridge(session, STATEMENTS).batch(writes, logged=logged)  # type: ignore[arg-type]
    assert len(session.calls) == 2 and session.timestamps[0] == session.timestamps[1]


async def test_a_batch_holding_a_write_not_flagged_idempotent_is_not_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bridge_module, "BatchStatement", StubBatch)
    session = StubSession([StubFuture(_connections_died()), StubFuture([])])
    with pytest.raises(StoreUnavailable, match=r"^batch:first_claim\+mark_hot: NoHostAvailable: "):
        await Bridge(session, STATEMENTS).batch(  # type: ignore[arg-type]
            [("first_claim", {"minute": 0}), ("mark_hot", {"minute": 0})], logged=True
        )
    assert len(session.calls) == 1


def test_timestamps_outside_a_bridge_request_are_the_drivers() -> None:
    """Other callers of a session built by build_cluster (migrations, tests) get fresh, rising ones."""
    clock = bridge_module.build_cluster(StoreSettings()).timestamp_generator
    assert isinstance(clock, bridge_module.RequestTimestamps)
    stamps = [clock() for _ in range(1000)]
    assert stamps == sorted(set(stamps))


def test_rows_are_named_like_the_drivers_and_share_one_class_per_column_list() -> None:
    columns = ["[applied]", "client_id", "writetime(payload)", "count"]
    ours, drivers = rows_of(columns, [(True, "a", 7, 2)]), named_tuple_factory(columns, [(True, "a", 7, 2)])
    assert ours == drivers and ours[0]._fields == drivers[0]._fields
    assert (ours[0].applied, ours[0].client_id) == (True, "a")
    # The driver builds a class per response; ours is built once per column list, empty answers included.
    assert type(rows_of(columns, [(False, "b", 1, 3)])[0]) is type(ours[0])
    assert rows_of(columns, []) == []
    assert type(rows_of(["client_id"], [("a",)])[0]) is not type(ours[0])
