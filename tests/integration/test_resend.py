"""A request the driver gave up on because connections died under it is sent once more, with its first
send's client timestamp, against the real Cassandra. The case that matters: the first send did land
(the driver could not tell), and another writer wrote the same cells in between, as a poller writes a
fire's status on the row a create just wrote. The second send must not overwrite that newer write."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cassandra.cluster import NoHostAvailable, Session
from cassandra.connection import ConnectionShutdown

from tickd.schema.cassandra.bridge import Bridge, Statements
from tickd.schema.errors import StoreUnavailable
from tickd.schema.settings import StoreSettings

pytestmark = pytest.mark.integration

FIRST = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)  # what the bridge's request writes
BETWEEN = datetime(2030, 1, 1, 0, 5, tzinfo=UTC)  # what the other writer writes between the two sends


class Lost:
    """What the driver reports when the heartbeat declared the request's connections dead."""

    _paging_state = None

    def add_callbacks(self, on_rows: Callable[[Any], None], on_error: Callable[[BaseException], None]) -> None:
        dead = ConnectionShutdown("Connection heartbeat timeout after 5.0 seconds")
        on_error(NoHostAvailable("Unable to complete the operation against any hosts", {"10.0.0.3:9042": dead}))


class FirstSendReportedLost:
    """The real session, except that the first ``lose`` sends are reported lost: each, if ``lands``,
    after it has landed and ``between`` has run; otherwise without being sent at all."""

    def __init__(
        self, session: Session, between: Callable[[], None] = lambda: None, lose: int = 1, lands: bool = True
    ) -> None:
        self.session, self.between, self.lose, self.lands = session, between, lose, lands
        self.sends = 0

    def execute_async(self, statement: Any, values: Any, **options: Any) -> Any:
        self.sends += 1
        if self.sends > self.lose:
            return self.session.execute_async(statement, values, **options)
        if self.lands:
            self.session.execute_async(statement, values, **options).result()
            self.between()
        return Lost()


@pytest.fixture(scope="module")
def statements(cql: Session, store_settings: StoreSettings) -> Statements:
    return Statements.prepare(cql, store_settings.page_size)


@pytest.fixture
def minute() -> datetime:
    """A minute of hot_marks no other test writes."""
    return datetime(2031, 1, 1, tzinfo=UTC) + timedelta(minutes=uuid.uuid4().int % 500_000)


def touched(cql: Session, minute: datetime, client_id: str) -> dict[int, datetime]:
    rows = cql.execute(
        "SELECT poller_id, touched_at FROM hot_marks WHERE minute = %s AND client_id = %s", (minute, client_id)
    )
    return {row.poller_id: row.touched_at.replace(tzinfo=UTC) for row in rows}


def mark(minute: datetime, client_id: str, poller_id: int) -> dict[str, Any]:
    return {"minute": minute, "client_id": client_id, "poller_id": poller_id, "touched_at": FIRST, "write_id": None}


def write_between(cql: Session, minute: datetime, client_id: str) -> Callable[[], None]:
    def write() -> None:  # outside any bridge request: a timestamp of its own, newer than the first send's
        cql.execute(
            "UPDATE hot_marks SET touched_at = %s WHERE minute = %s AND client_id = %s AND poller_id = 0",
            (BETWEEN, minute, client_id),
        )

    return write


async def test_a_write_sent_again_does_not_overwrite_what_was_written_in_between(
    cql: Session, statements: Statements, minute: datetime, client_id: str
) -> None:
    session = FirstSendReportedLost(cql, write_between(cql, minute, client_id))
    await Bridge(session, statements).write("mark_hot", mark(minute, client_id, 0))  # type: ignore[arg-type]
    assert session.sends == 2
    assert touched(cql, minute, client_id) == {0: BETWEEN}


async def test_a_batch_sent_again_does_not_overwrite_what_was_written_in_between(
    cql: Session, statements: Statements, minute: datetime, client_id: str
) -> None:
    session = FirstSendReportedLost(cql, write_between(cql, minute, client_id))
    bridge = Bridge(session, statements)  # type: ignore[arg-type]
    both = [("mark_hot", mark(minute, client_id, 0)), ("mark_hot", mark(minute, client_id, 1))]
    await bridge.batch(both, logged=True)
    assert session.sends == 2
    assert touched(cql, minute, client_id) == {0: BETWEEN, 1: FIRST}


async def test_a_write_whose_first_send_never_landed_lands_on_the_second(
    cql: Session, statements: Statements, minute: datetime, client_id: str
) -> None:
    session = FirstSendReportedLost(cql, lands=False)
    await Bridge(session, statements).write("mark_hot", mark(minute, client_id, 0))  # type: ignore[arg-type]
    assert session.sends == 2
    assert touched(cql, minute, client_id) == {0: FIRST}


async def test_it_is_sent_again_once_only(
    cql: Session, statements: Statements, minute: datetime, client_id: str
) -> None:
    session = FirstSendReportedLost(cql, lambda: None, lose=2)
    with pytest.raises(StoreUnavailable, match=r"^mark_hot: NoHostAvailable: "):
        await Bridge(session, statements).write("mark_hot", mark(minute, client_id, 0))  # type: ignore[arg-type]
    assert session.sends == 2
