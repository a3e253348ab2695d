from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cassandra.cluster import Cluster, Session

from tickd.schema.cassandra import CassandraStore, build_cluster
from tickd.schema.errors import StoreUnavailable
from tickd.schema.migrate import migrate
from tickd.schema.model import Client, HttpCallback, Location, Schedule
from tickd.schema.settings import StoreSettings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def store_settings() -> StoreSettings:
    settings = StoreSettings.from_env()
    try:
        migrate(settings)
    except Exception as exc:
        pytest.fail(
            f"Cassandra at {settings.hosts}:{settings.port} is not usable ({exc}); "
            "start it with `make infra-up` (make test does this for you)",
            pytrace=False,
        )
    return settings


@pytest.fixture(scope="session")
async def store(store_settings: StoreSettings) -> AsyncIterator[CassandraStore]:
    try:
        s = await CassandraStore.connect(store_settings)
    except StoreUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield s
    await s.close()


@pytest.fixture(scope="session")
def cql(store_settings: StoreSettings) -> Iterator[Session]:
    """A plain driver session, for tests that inspect what the store wrote (TTLs, raw rows)."""
    cluster: Cluster = build_cluster(store_settings)
    session = cluster.connect(store_settings.keyspace)
    yield session
    cluster.shutdown()


@pytest.fixture
def client_id() -> str:
    """A fresh tenant id per test, so tests never see each other's rows."""
    return f"t{uuid.uuid4().hex[:12]}"


def make_client(client_id: str, pollers: int = 4) -> Client:
    now = datetime.now(UTC)
    return Client(client_id, pollers, True, "hash", now, now)


@pytest.fixture
def new_schedule(client_id: str) -> Callable[..., Schedule]:
    def build(due_at: datetime, poller_id: int = 0, **changes: object) -> Schedule:
        fields: dict[str, object] = {
            "client_id": client_id,
            "schedule_id": uuid.uuid4(),
            "location": Location(poller_id, due_at),
            "fire_at": due_at,
            "payload": b'{"n": 1}',
            "callback": HttpCallback(url="http://127.0.0.1:9/cb"),
            "created_at": later(0),
        }
        fields.update(changes)
        return Schedule(**fields)  # type: ignore[arg-type]

    return build


def later(seconds: float) -> datetime:
    """A time ``seconds`` from now at millisecond precision (what Cassandra keeps)."""
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
