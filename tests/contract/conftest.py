"""The store contract: every test here runs against every adapter of the port, so their semantics cannot drift.
``env`` is parametrized: ``memory`` (``memory_store``: the Cassandra adapter's own modules on a
``MemoryConnection``, which executes ``queries.cql`` in memory, on a hand-moved clock; no network) and
``cassandra`` (the real server, marked ``integration``; it fails loudly, never skips, when Cassandra does not
answer). Time moves through ``env``: the memory clocks jump, Cassandra really waits."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickd.schema.errors import BatchNotLogged, StoreUnavailable
from tickd.schema.memory import MemoryConnection, StoreFaults, Tables, memory_store
from tickd.schema.model import Client, HttpCallback, Location, Schedule
from tickd.schema.settings import StoreSettings
from tickd.schema.store import Store

Factory = Callable[..., Schedule]
START = datetime(2026, 11, 23, 12, 0, 7, 250_000, tzinfo=UTC)


class ManualClock:
    """The memory store's clock: it moves only when a test moves it."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FailOn:
    """Faults at the named fault points, once each, raising ``StoreUnavailable`` (``before`` and ``after``
    on either adapter, ``Env.peer``; ``batchlog`` in memory only).

    ``before``: the request does not apply; ``after``: it applies and the caller is told it failed;
    ``batchlog``: a logged batch's batchlog is not written (``BatchNotLogged``: nothing applies)."""

    def __init__(
        self, *, before: tuple[str, ...] = (), after: tuple[str, ...] = (), batchlog: tuple[str, ...] = ()
    ) -> None:
        self.pending_before = list(before)
        self.pending_after = list(after)
        self.pending_batchlog = list(batchlog)
        self.seen: list[str] = []

    async def before(self, op: str) -> None:
        self.seen.append(op)
        if op in self.pending_before:
            self.pending_before.remove(op)
            raise StoreUnavailable(f"injected before {op}")

    async def after(self, op: str) -> None:
        if op in self.pending_after:
            self.pending_after.remove(op)
            raise StoreUnavailable(f"injected after {op}")

    async def batchlog(self, op: str) -> None:
        if op in self.pending_batchlog:
            self.pending_batchlog.remove(op)
            raise BatchNotLogged(f"{op}: WriteTimeout (BATCH_LOG, injected)")


class FaultyDriver:
    """The Cassandra adapter's real connection with ``FailOn`` faults around its requests, named as the
    memory connection names them (the statement, or ``batch:`` and its first statement): ``before``, the
    request is not sent; ``after``, Cassandra applies it and the caller is told it failed. A batchlog that
    fails is beyond a client's reach: those faults are the memory connection's only."""

    def __init__(self, inner: Any, faults: FailOn) -> None:
        from tickd.schema import queries

        assert not faults.pending_batchlog, "batchlog faults are injected in memory only"
        self._inner = inner
        self._faults = faults
        self._names = {query.cql: query.name for query in queries.load().values()}

    def __getattr__(self, name: str) -> Any:  # the clock and prepare: the real connection's
        return getattr(self._inner, name)

    async def send(self, statement: Any, values: Any, paging_state: Any, left_s: Any, sends: Any) -> Any:
        name = self._names[statement.query_string]
        await self._faults.before(name)
        page = await self._inner.send(statement, values, paging_state, left_s, sends)
        await self._faults.after(name)
        return page

    async def send_batch(self, writes: Any, logged: bool, idempotent: bool, left_s: Any, sends: Any) -> Any:
        op = f"batch:{self._names[writes[0][0].query_string]}" if writes else "batch"
        await self._faults.before(op)
        page = await self._inner.send_batch(writes, logged, idempotent, left_s, sends)
        await self._faults.after(op)
        return page


@dataclasses.dataclass
class Env:
    """One adapter under test, the time it runs on, and how to get variants of it."""

    kind: str
    store: Store
    now: Callable[[], datetime]
    wait: Callable[[float], Awaitable[None]]
    variant: Callable[..., Awaitable[Any]]
    connection: MemoryConnection | None = None  # in memory: the store's, where faults are injected

    @property
    def memory(self) -> bool:
        """In memory (the Cassandra adapter on a memory connection, on a hand-moved clock)."""
        return self.connection is not None

    def inject(self, faults: StoreFaults) -> None:
        """In memory: the store's requests from now on pass ``faults``."""
        assert self.connection is not None
        self.connection.faults = faults

    def peer(self, faults: FailOn) -> Store:
        """Another process's adapter on the same data, with faults of its own: in memory, on the memory
        connection; on Cassandra, around the real driver's requests (``FaultyDriver``)."""
        if self.connection is not None:
            return memory_store(MemoryConnection(self.connection.tables, faults))
        from tickd.schema.cassandra import CassandraStore

        store: Any = self.store
        return CassandraStore(store.settings, FaultyDriver(store.connection, faults), store._db.statements)

    def later(self, seconds: float) -> datetime:
        """``seconds`` from now at millisecond precision (what Cassandra keeps)."""
        moment = self.now() + timedelta(seconds=seconds)
        return moment.replace(microsecond=moment.microsecond // 1000 * 1000)

    async def store_with(self, **settings: Any) -> Any:
        """The adapter with other settings (``page_size``, ``retention_s`` ...) on the same data."""
        return await self.variant(**settings)


@pytest.fixture(scope="session")
def cassandra_settings() -> StoreSettings:
    from tickd.schema.migrate import migrate

    settings = StoreSettings.from_env()
    try:
        migrate(settings)
    except Exception as exc:
        pytest.fail(
            f"Cassandra at {settings.hosts}:{settings.port} is not usable ({exc}); start it with `make infra-up`",
            pytrace=False,
        )
    # The nodes table is one partition per cluster name: keep this run's heartbeats to itself.
    return dataclasses.replace(settings, cluster_name=f"contract-{uuid.uuid4().hex[:8]}")


# Connected Cassandra adapters by settings: opened on first use, closed when the session ends.
_CASSANDRA: dict[StoreSettings, Any] = {}


@pytest.fixture(scope="session", autouse=True)
async def _close_cassandra_stores() -> AsyncIterator[None]:
    yield
    while _CASSANDRA:
        await _CASSANDRA.popitem()[1].close()


async def _cassandra(settings: StoreSettings) -> Any:
    from tickd.schema.cassandra import CassandraStore

    if settings not in _CASSANDRA:
        try:
            _CASSANDRA[settings] = await CassandraStore.connect(settings)
        except StoreUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
    return _CASSANDRA[settings]


@pytest.fixture(params=["memory", pytest.param("cassandra", marks=pytest.mark.integration)])
async def env(request: pytest.FixtureRequest) -> Env:
    if request.param == "memory":
        return _memory_env()
    settings: StoreSettings = request.getfixturevalue("cassandra_settings")

    async def cassandra_variant(**changes: Any) -> Any:
        return await _cassandra(dataclasses.replace(settings, **changes))

    now = lambda: datetime.now(UTC)  # noqa: E731
    return Env("cassandra", await _cassandra(settings), now, asyncio.sleep, cassandra_variant)


def _memory_env() -> Env:
    clock = ManualClock()
    connection = MemoryConnection(Tables(clock))
    store = memory_store(connection)

    async def advance(seconds: float) -> None:
        clock.advance(seconds)

    async def memory_variant(**changes: Any) -> Store:
        return memory_store(MemoryConnection(connection.tables), dataclasses.replace(store.settings, **changes))

    return Env("memory", store, clock, advance, memory_variant, connection)


@pytest.fixture
def store(env: Env) -> Store:
    return env.store


@pytest.fixture
def client_id() -> str:
    """A fresh tenant id per test, so tests never see each other's rows."""
    return f"t{uuid.uuid4().hex[:12]}"


def make_client(env: Env, client_id: str, pollers: int = 4) -> Client:
    now = env.later(0)
    return Client(client_id, pollers, True, "hash", now, now)


@pytest.fixture
def new_schedule(env: Env, client_id: str) -> Factory:
    def build(due_at: datetime, poller_id: int = 0, **changes: object) -> Schedule:
        fields: dict[str, object] = {
            "client_id": client_id,
            "schedule_id": uuid.uuid4(),
            "location": Location(poller_id, due_at),
            "fire_at": due_at,
            "payload": b'{"n": 1}',
            "callback": HttpCallback(url="http://127.0.0.1:9/cb"),
            "created_at": env.later(0),
        }
        fields.update(changes)
        return Schedule(**fields)  # type: ignore[arg-type]

    return build


async def read_all(store: Any, *args: Any, **kwargs: Any) -> list[Schedule]:
    return [r async for page in store.read_minute(*args, **kwargs) for r in page]
