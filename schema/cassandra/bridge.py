"""The bridge from cassandra-driver to asyncio, and the one place where driver errors are mapped.

Every request goes through ``Bridge``, which sends it over a ``Submit`` connection: ``DriverSubmit``
(cassandra-driver's ``execute_async`` with callbacks, run on the driver's I/O thread, that resolve an
asyncio future through ``loop.call_soon_threadsafe``, so nothing blocks the event loop), or the in-memory
one that executes the same CQL (``schema.memory.connection``). Above the seam, shared by both: binding,
error mapping, the resend of idempotent requests, the request's store budget, request counts, paging.
Reads page explicitly to their end. Statements come from ``schema/cql/queries.cql``, prepared once, and
are bound by name: a write is ``(statement name, {marker: value})``.

The bridge counts its requests by statement name (``Bridge.request_counts``, exported as
``tickd_store_requests_total``): one per round trip it sends, so a read counts once per page and a batch
once, under ``batch:<its distinct statement names, sorted, joined by +>``. Each statement's kind (``lwt``,
``read``, ``write``, ``batch``) is read from its CQL once, when it is prepared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import time
from collections import Counter, namedtuple
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from cassandra import AuthenticationFailed, ConsistencyLevel, DriverException, WriteTimeout
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, ResponseFuture, Session
from cassandra.connection import ConnectionBusy, ConnectionException, ProtocolError
from cassandra.policies import (
    ConstantSpeculativeExecutionPolicy,
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    RetryPolicy,
    TokenAwarePolicy,
    WriteType,
)
from cassandra.protocol import RequestExecutionException, ServerError
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, PreparedStatement
from cassandra.timestamps import MonotonicTimestampGenerator

from tickd.schema import deadline, guard, queries
from tickd.schema.errors import BatchNotLogged, ConfigError, OutcomeUnknown, StoreUnavailable
from tickd.schema.model import ClientSettings
from tickd.schema.settings import StoreSettings, retention_of
from tickd.schema.tls import client_context, describe_verify_failure, is_tls_failure, verify_reason

Row = Any  # the driver's named tuples
Values = Mapping[str, Any]
Write = tuple[str, Values]  # a statement of queries.cql by name, and its values by marker name

# What the driver raises when Cassandra cannot serve a request now; each becomes ``StoreUnavailable``.
# ``DriverException`` covers Unavailable, Read/WriteTimeout, Read/WriteFailure and OperationTimedOut (and,
# as before, the request validation errors). The rest are not DriverExceptions: NoHostAvailable (every
# host down or refusing), broken or busy connections, server errors the driver hands over unconverted
# (overloaded, bootstrapping), and socket errors (OSError includes TimeoutError and ConnectionError).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    DriverException,
    NoHostAvailable,
    ConnectionException,
    ConnectionBusy,
    ProtocolError,
    RequestExecutionException,
    ServerError,
    OSError,
)


def is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, UNAVAILABLE)


def unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    """The ``StoreUnavailable`` for ``exc`` raised while doing ``what`` (a statement name):
    ``BatchNotLogged`` if a logged batch timed out writing its batchlog, before any of its writes;
    ``OutcomeUnknown`` if a lightweight transaction timed out."""
    detail = str(exc) or repr(exc)
    if isinstance(exc, WriteTimeout) and exc.write_type == WriteType.BATCH_LOG:
        return BatchNotLogged(f"{what}: {type(exc).__name__}: {detail}")
    if isinstance(exc, WriteTimeout) and exc.write_type == WriteType.CAS:
        return OutcomeUnknown(f"{what}: {type(exc).__name__}: {detail}")
    return StoreUnavailable(f"{what}: {type(exc).__name__}: {detail}")


def connections_lost(exc: BaseException) -> bool:
    """The driver gave up on a request only because connections died under it, no node having refused
    it. One case: a silent node's connection is declared dead by the heartbeat while the request's
    speculative executions are still out on the other replicas; the driver moves on to the next host of
    a plan they have used up and reports no host left (cluster test C2). Such a request, if flagged
    idempotent, is sent once more (the dead node is marked down by then, so it goes to the others), with
    the first send's client timestamp (``RequestTimestamps``): a write that lands twice then writes the
    same cells at the same time, and a write made in between (a poller's status on a create's row) is
    newer than both and stays. A lightweight transaction's condition decides again."""
    return (
        isinstance(exc, NoHostAvailable)
        and bool(exc.errors)
        and all(isinstance(e, ConnectionException) for e in exc.errors.values())
    )


class NoBatchlogRetry(RetryPolicy):  # type: ignore[misc]
    """The driver's default, but a batch whose batchlog timed out is not sent again: on three nodes the
    retry picks the same unconvicted dead node to hold its log and waits out another write timeout. The
    adapters send its writes without a batchlog instead (``schema.batchlog``)."""

    def on_write_timeout(
        self,
        query: Any,
        consistency: int,
        write_type: int,
        required_responses: int,
        received_responses: int,
        retry_num: int,
    ) -> tuple[int, int | None]:
        if write_type == WriteType.BATCH_LOG:
            return self.RETHROW, None
        return super().on_write_timeout(  # type: ignore[no-any-return]
            query, consistency, write_type, required_responses, received_responses, retry_num
        )


def unset_if_none(value: Any) -> Any:
    """Bind "leave as is" instead of null: a null bound in a write is a tombstone in the partition,
    and schedule partitions must stay tombstone-free for the pollers' reads."""
    return UNSET_VALUE if value is None else value


def fields_of(entity: Any) -> dict[str, Any]:
    """A model dataclass's fields by name: the values of a statement whose markers are named as they are."""
    return {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}


def utc(moment: datetime) -> datetime:
    """The driver returns naive UTC datetimes; the model only holds aware ones."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


# What Cassandra counts per cell besides its value (timestamp, TTL, deletion time), and per statement
# (clustering, row header), rounded up.
CELL_OVERHEAD_BYTES = 16
STATEMENT_OVERHEAD_BYTES = 64


def write_bytes(writes: Sequence[Write]) -> int:
    """About how many bytes ``writes`` put in a batch, as Cassandra's batch_size_fail_threshold counts
    them (the data of every cell written), erring high."""
    return sum(STATEMENT_OVERHEAD_BYTES + sum(_value_bytes(v) for v in values.values()) for _, values in writes)


def _value_bytes(value: Any) -> int:
    if value is UNSET_VALUE:
        return 0
    if isinstance(value, bytes | bytearray):
        return len(value) + CELL_OVERHEAD_BYTES
    if isinstance(value, str):
        return len(value.encode()) + CELL_OVERHEAD_BYTES
    return 16 + CELL_OVERHEAD_BYTES  # uuids, timestamps, numbers: at most 16 bytes


# The kinds of statement the request counts tell apart. An LWT (a conditional clause: IF NOT EXISTS, IF
# EXISTS, IF <condition>) is a Paxos round, four round trips between the replicas; the rest are one each.
LWT = "lwt"
READ = "read"
WRITE = "write"
BATCH = "batch"
BATCH_PREFIX = "batch:"

# Where the word IF can appear without being the conditional clause: string literals ('it''s', $$...$$),
# quoted names ("if"), bind markers (:if) and comments. Unquoted, IF is a reserved word: it names no column.
_NOT_KEYWORDS = re.compile(
    r"'(?:[^']|'')*'|\$\$.*?\$\$|\"(?:[^\"]|\"\")*\"|:\w+|--[^\n]*|//[^\n]*|/\*.*?\*/", re.DOTALL
)
_CONDITION = re.compile(r"\bIF\b", re.IGNORECASE)


def kind_of(cql: str) -> str:
    """The kind of one CQL statement: ``read`` (a SELECT), ``lwt`` (any statement with a conditional
    clause, a conditional batch included), ``batch`` (BEGIN ... BATCH), else ``write`` (other DML)."""
    text = _NOT_KEYWORDS.sub(" ", cql)
    first = text.split(None, 1)[0].upper() if text.strip() else ""
    if first == "SELECT":
        return READ
    if _CONDITION.search(text):
        return LWT
    return BATCH if first == "BEGIN" else WRITE


def batch_kind(kinds: Iterable[str]) -> str:
    """The kind of a batch of statements of ``kinds``: ``lwt`` if one of them is (Cassandra then runs the
    whole batch as one conditional update, a Paxos round), else ``batch``."""
    return LWT if LWT in kinds else BATCH


@dataclasses.dataclass(slots=True, eq=False)
class Sends:
    """The client timestamp of one request, fixed by its first send and carried by the next."""

    timestamp: int | None = None


_SENDING: ContextVar[Sends | None] = ContextVar("tickd_request_sends", default=None)


class RequestTimestamps(MonotonicTimestampGenerator):  # type: ignore[misc]
    """The driver's client timestamps (microseconds, never going back), except that every send of one
    ``Bridge`` request carries the same: the driver asks for it inside ``execute_async``, on the thread
    that calls it, so the request's ``Sends`` is in the context then. The driver's own retries and
    speculative executions already reuse a request's message, and so its timestamp."""

    def __call__(self) -> int:
        sends = _SENDING.get()
        if sends is None:
            return super().__call__()  # type: ignore[no-any-return]
        if sends.timestamp is None:
            sends.timestamp = super().__call__()
        return sends.timestamp


@functools.lru_cache(maxsize=1024)
def _row_type(columns: tuple[str, ...]) -> Any:
    # Named like the driver's own rows ("[applied]" is "applied"); rename=True numbers what cannot be a name.
    names = [re.sub(r"\W+", "_", column).strip("_") or "column" for column in columns]
    return namedtuple("Row", names, rename=True)


def rows_of(columns: list[str], rows: list[tuple[Any, ...]]) -> list[Any]:
    """The driver's row factory, with one class per column list: its default builds a new namedtuple class
    for every response, empty ones too (about a tenth of the API's CPU in a wide listing, held under
    the GIL, so other tenants' requests waited on it)."""
    return list(map(_row_type(tuple(columns))._make, rows))


def build_cluster(settings: StoreSettings) -> Cluster:
    # Replicas shuffled: with a fixed order every statement of a partition goes to its first replica,
    # and one silent replica stalls all of them until the driver gives up on it.
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc), shuffle_replicas=True)
    speculative = (
        ConstantSpeculativeExecutionPolicy(delay=settings.speculative_s, max_attempts=2)
        if settings.speculative_s > 0
        else None
    )
    profile = ExecutionProfile(
        load_balancing_policy=policy,
        consistency_level=ConsistencyLevel.name_to_value[settings.consistency],
        serial_consistency_level=ConsistencyLevel.name_to_value[settings.serial_consistency],
        request_timeout=settings.request_timeout_s,
        speculative_execution_policy=speculative,
        retry_policy=NoBatchlogRetry(),
        row_factory=rows_of,
    )
    auth = None
    if settings.username:
        auth = PlainTextAuthProvider(settings.username, settings.password or "")
    return Cluster(
        contact_points=list(settings.hosts),
        port=settings.port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        auth_provider=auth,
        # The driver names the host it dials (server_hostname) when the context checks host names.
        ssl_context=client_context(settings.tls) if settings.tls is not None else None,
        connect_timeout=settings.connect_timeout_s,
        protocol_version=settings.protocol_version,
        # The driver's default backs off to 10 minutes between reconnects: after an outage, pollers and
        # the API would wait that long to see Cassandra back. A few seconds at most, with jitter.
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=5.0),
        timestamp_generator=RequestTimestamps(),
        idle_heartbeat_interval=settings.heartbeat_s,
        idle_heartbeat_timeout=settings.heartbeat_s,
    )


def connect_refusal(settings: StoreSettings, exc: BaseException) -> ConfigError | None:
    """A failure to connect that waiting will not fix (credentials, certificates), said plainly, else None.
    The driver reports per host (``NoHostAvailable.errors``) and re-raises TLS errors as plain text."""
    causes = list(exc.errors.values()) if isinstance(exc, NoHostAvailable) else [exc]
    for cause in causes:
        if isinstance(cause, AuthenticationFailed):
            return ConfigError(
                f"Cassandra authentication failed for user {settings.username!r} (TICKD_CASSANDRA_USERNAME / "
                f"TICKD_CASSANDRA_PASSWORD): {cause}",
                field="TICKD_CASSANDRA_PASSWORD",
            )
        if settings.tls is None:
            continue
        reason = verify_reason(cause)
        if reason is not None:
            return ConfigError(
                describe_verify_failure(reason, settings.tls, "Cassandra"), field="TICKD_CASSANDRA_TLS_CA"
            )
        if is_tls_failure(cause):
            return ConfigError(
                f"Cassandra TLS: handshake with {','.join(settings.hosts)}:{settings.port} failed ({cause}); does the "
                "server have client_encryption_options enabled on its native port?",
                field="TICKD_CASSANDRA_TLS",
            )
    return None


# -- the seam: what the bridge sends requests over ------------------------------------------------------

PagingState = Any  # opaque to the bridge: the driver's bytes, or an in-memory connection's position


@dataclasses.dataclass(slots=True, eq=False)
class Page:
    """One answer: its rows (the driver's named tuples) and where the next page starts (None: no more)."""

    rows: list[Row]
    paging_state: PagingState | None


class Clock(Protocol):
    """The times a store's requests are stamped with, as the Cassandra adapter asks for them."""

    def clock_us(self) -> int:
        """The clients' clock, in microseconds since the epoch."""

    def write_timestamp(self) -> int:
        """A write timestamp (µs) as this connection's requests get them."""


class WallClock:
    """The real clock, as the driver's client-side timestamps read it."""

    def clock_us(self) -> int:
        return time.time_ns() // 1000

    def write_timestamp(self) -> int:
        return time.time_ns() // 1000


WALL_CLOCK = WallClock()


@runtime_checkable
class Submit(Clock, Protocol):
    """A connection the bridge sends requests over: prepares statements and sends one request at a time.

    A statement is prepared from a ``queries.Query`` into an object with the driver's ``PreparedStatement``
    attributes the bridge reads: ``query_string``, ``column_metadata`` (the marker names, as ``.name``),
    ``is_idempotent`` and ``fetch_size`` (the page size), the last two set after preparing. A request
    fails with the driver's own exception types (or ``StoreUnavailable``), which the bridge maps; ``sends``
    carries the request's write timestamp from its first send to a second one."""

    def prepare(self, query: queries.Query) -> Any:
        """The prepared statement of ``query`` (may block: the driver asks the server)."""

    def send(
        self, statement: Any, values: Values, paging_state: PagingState | None, left_s: float | None, sends: Sends
    ) -> Awaitable[Page]:
        """One bound statement: a page of its rows (``statement.fetch_size`` at most) from ``paging_state``."""

    def send_batch(
        self, writes: Sequence[tuple[Any, Values]], logged: bool, idempotent: bool, left_s: float | None, sends: Sends
    ) -> Awaitable[Page]:
        """One batch of bound statements, logged or not."""


class DriverSubmit(WallClock):
    """``Submit`` on a cassandra-driver session: ``execute_async`` and its callbacks, batches as the
    driver's ``BatchStatement``, the request's client timestamp through ``RequestTimestamps``."""

    def __init__(self, session: Session, request_timeout_s: float = StoreSettings.request_timeout_s) -> None:
        self.session = session
        self._request_timeout_s = request_timeout_s

    def prepare(self, query: queries.Query) -> PreparedStatement:
        return self.session.prepare(query.cql)

    def send(
        self,
        statement: Any,
        values: Values | None,
        paging_state: PagingState | None,
        left_s: float | None,
        sends: Sends,
    ) -> asyncio.Future[Page]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Page] = loop.create_future()
        # The rest of the request's store budget (schema.deadline), if shorter than the driver's timeout.
        timeout = {"timeout": left_s} if left_s is not None and left_s < self._request_timeout_s else {}
        sending = _SENDING.set(sends)
        try:
            future: ResponseFuture = self.session.execute_async(statement, values, paging_state=paging_state, **timeout)
        finally:
            _SENDING.reset(sending)

        def on_rows(rows: list[Row] | None) -> None:
            loop.call_soon_threadsafe(_resolve, done, Page(rows or [], future._paging_state))

        def on_error(exc: BaseException) -> None:
            loop.call_soon_threadsafe(_reject, done, exc)

        future.add_callbacks(on_rows, on_error)
        return done

    def send_batch(
        self, writes: Sequence[tuple[Any, Values]], logged: bool, idempotent: bool, left_s: float | None, sends: Sends
    ) -> asyncio.Future[Page]:
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        for statement, values in writes:
            batch.add(statement, values)
        batch.is_idempotent = idempotent
        return self.send(batch, None, None, left_s, sends)


def _resolve(done: asyncio.Future[Page], page: Page) -> None:
    if not done.done():
        done.set_result(page)


def _reject(done: asyncio.Future[Page], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)


def as_submit(connection: Session | Submit, request_timeout_s: float = StoreSettings.request_timeout_s) -> Submit:
    """``connection`` itself, or a driver session wrapped in ``DriverSubmit``."""
    return connection if isinstance(connection, Submit) else DriverSubmit(connection, request_timeout_s)


# -- above the seam ---------------------------------------------------------------------------------------


class Statements:
    """Every statement of ``queries.cql``, prepared once, with the marker names each one binds and its
    kind (``kind_of`` its CQL)."""

    def __init__(self, prepared: Mapping[str, PreparedStatement]) -> None:
        self._prepared = dict(prepared)
        self._markers = {name: frozenset(c.name for c in s.column_metadata) for name, s in prepared.items()}
        self.kinds: dict[str, str] = {name: kind_of(s.query_string) for name, s in prepared.items()}

    @classmethod
    def prepare(cls, session: Session | Submit, page_size: int) -> Statements:
        """Blocking on a driver session (one round trip per statement): run it in a thread, once at start-up."""
        connection = as_submit(session)
        prepared = {}
        for query in queries.load().values():
            stmt = connection.prepare(query)
            stmt.is_idempotent = query.idempotent
            stmt.fetch_size = min(page_size, query.page or page_size)
            prepared[query.name] = stmt
        return cls(prepared)

    def __getitem__(self, name: str) -> PreparedStatement:
        return self._prepared[name]

    def bind(self, name: str, values: Values) -> tuple[PreparedStatement, Values]:
        """The statement and its values, refusing a missing or unknown marker name: the driver would
        bind a missing one as UNSET and ignore an unknown one, so a typo would silently not write."""
        if values.keys() != self._markers[name]:
            missing = sorted(self._markers[name] - values.keys())
            unknown = sorted(values.keys() - self._markers[name])
            raise ValueError(f"{name}: missing values {missing}, unknown names {unknown}")
        return self._prepared[name], values


Send = Callable[[float | None, Sends], Awaitable[Page]]  # one send of a request: (budget left, its timestamp)


class Bridge:
    """Runs statements on a connection from asyncio; every driver failure that means "Cassandra cannot
    serve this now" leaves as ``StoreUnavailable`` naming the statement and the error type."""

    def __init__(
        self,
        connection: Session | Submit,
        statements: Statements,
        request_timeout_s: float = StoreSettings.request_timeout_s,
    ) -> None:
        self._session = connection  # as given: a driver session (or a test's stub of one), or a Submit
        self._connection = as_submit(connection, request_timeout_s)
        self.statements = statements
        # Requests sent, by statement name (or batch name): one increment per round trip, nothing more on
        # the hot path; kinds are joined in when the counts are read (a scrape).
        self._requests: Counter[str] = Counter()

    async def rows(self, name: str, values: Values) -> list[Row]:
        """Every row the statement returns, page after page to the end (a write returns none; a LIMIT
        ends the paging). There is deliberately no single-page read: a partition that outgrows one
        page must never lose its tail silently."""
        return [row async for page in self.pages(name, values) for row in page]

    async def pages(self, name: str, values: Values) -> AsyncIterator[list[Row]]:
        """The statement's rows a page (``page_size`` rows) at a time."""
        statement, bound = self.statements.bind(name, values)
        paging_state: PagingState | None = None
        while True:
            send = functools.partial(self._connection.send, statement, bound, paging_state)
            page = await self._request(name, statement.is_idempotent, send)
            yield page.rows
            if page.paging_state is None:
                return
            paging_state = page.paging_state

    async def write(self, name: str, values: Values) -> None:
        await self.rows(name, values)

    async def applied(self, name: str, values: Values) -> tuple[bool, Row]:
        """Run a lightweight transaction; (applied, the row as it now is or was)."""
        rows = await self.rows(name, values)
        return bool(rows[0][0]), rows[0]

    async def batch(self, writes: Sequence[Write], *, logged: bool) -> None:
        bound = [self.statements.bind(name, values) for name, values in writes]
        idempotent = all(self.statements[name].is_idempotent for name, _ in writes)
        send = functools.partial(self._connection.send_batch, bound, logged, idempotent)
        await self._request(BATCH_PREFIX + "+".join(sorted({name for name, _ in writes})), idempotent, send)

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Requests sent so far (answered, failed or still out) by (statement or batch name, kind). Only
        the bridge's own: the driver's retries and speculative executions of a request are not counted."""
        return {(name, self._kind(name)): count for name, count in list(self._requests.items())}

    def _kind(self, name: str) -> str:
        if name.startswith(BATCH_PREFIX):
            return batch_kind(self.statements.kinds[n] for n in name.removeprefix(BATCH_PREFIX).split("+"))
        return self.statements.kinds[name]

    async def _request(self, what: str, idempotent: bool, send: Send) -> Page:
        """Send one request: ``what`` (a statement name, or a batch's) is what it is counted and reported as."""
        sends = Sends()
        resend = True
        while True:
            guard.check()
            left = deadline.left_s(what)
            self._requests[what] += 1
            try:
                return await send(left, sends)
            except Exception as exc:
                if resend and idempotent and connections_lost(exc):
                    resend = False
                    continue
                if is_unavailable(exc):
                    raise unavailable(what, exc) from exc
                raise


class Part:
    """What each part of ``CassandraStore`` (one per aggregate, mixed in) reads of the store, which sets it."""

    settings: StoreSettings
    _db: Bridge
    # The clocks of the connection (the real one unless the store was built on another: schema.memory).
    _clock: Clock = WALL_CLOCK
    # Each client's own settings as this store last read or wrote them (``ClientRows``): the retention
    # its records are written with. A client not read yet gets the deployment's default.
    _clients_seen: dict[str, ClientSettings]

    def _retention(self, client_id: str) -> int:
        """Seconds a client's runs, dead letters, schedule rows after their fire and notices are kept."""
        chosen = self._clients_seen.get(client_id)
        s = self.settings
        return retention_of(chosen.retention_s if chosen else 0, s.retention_s, s.retention_max_s)

    def _audit_retention(self, client_id: str) -> int:
        chosen = self._clients_seen.get(client_id)
        s = self.settings
        return retention_of(chosen.audit_retention_s if chosen else 0, s.audit_retention_s, s.audit_retention_max_s)
