"""``CassandraStore``: the ``schema.store.Store`` port on Cassandra, composed of one part per aggregate."""

from __future__ import annotations

import asyncio

from cassandra.cluster import Cluster

from tickd.schema import batchlog
from tickd.schema.cassandra.audit import Audit
from tickd.schema.cassandra.bridge import (
    Bridge,
    DriverSubmit,
    Statements,
    Submit,
    build_cluster,
    connect_refusal,
    is_unavailable,
    unavailable,
)
from tickd.schema.cassandra.bulk import BulkJobs
from tickd.schema.cassandra.calendars import Calendars
from tickd.schema.cassandra.clients import ClientRows
from tickd.schema.cassandra.coordination import Coordination, Horizons
from tickd.schema.cassandra.dead_letters import DeadLetters
from tickd.schema.cassandra.keys import BusinessKeys
from tickd.schema.cassandra.runs import Runs
from tickd.schema.cassandra.schedules import Schedules
from tickd.schema.cassandra.stats import Stats
from tickd.schema.cassandra.throttle import Throttle
from tickd.schema.settings import StoreSettings


class CassandraStore(
    ClientRows, Schedules, DeadLetters, BusinessKeys, Runs, Stats, Throttle, Coordination, Audit, BulkJobs, Calendars
):
    """``schema.store.Store`` on Cassandra. Create with ``await CassandraStore.connect(settings)``; on any
    other ``Submit`` connection (``schema.memory.memory_store``), construct it with the connection's
    statements. ``connection`` is public, as procrastinate's ``App.connector``: tests reach a memory
    connection's tables and faults through it."""

    def __init__(
        self, settings: StoreSettings, connection: Submit, statements: Statements, cluster: Cluster | None = None
    ) -> None:
        self.settings = settings
        self._cluster = cluster
        self._db = Bridge(connection, statements, settings.request_timeout_s)
        self.connection = self._clock = connection
        self._horizons = Horizons()
        self._clients_seen = {}
        self._unlogged = batchlog.Fallbacks()

    @classmethod
    async def connect(cls, settings: StoreSettings) -> CassandraStore:
        cluster = build_cluster(settings)
        try:
            session = await asyncio.to_thread(cluster.connect, settings.keyspace)
            statements = await asyncio.to_thread(Statements.prepare, session, settings.page_size)
        except Exception as exc:
            await asyncio.to_thread(cluster.shutdown)
            refusal = connect_refusal(settings, exc)
            if refusal is not None:
                raise refusal from exc
            if is_unavailable(exc):
                raise unavailable(f"connect to Cassandra at {','.join(settings.hosts)}", exc) from exc
            raise
        return cls(settings, DriverSubmit(session, settings.request_timeout_s), statements, cluster)

    async def ping(self) -> None:
        await self._db.rows("ping", {})

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Requests sent so far by (statement, kind): ``Bridge.request_counts``. Cheap enough per scrape;
        not part of the store port."""
        return self._db.request_counts()

    async def close(self) -> None:
        if self._cluster is not None:
            await asyncio.to_thread(self._cluster.shutdown)
