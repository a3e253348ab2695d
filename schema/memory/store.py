"""``MemoryStore``: the Cassandra adapter (``CassandraStore``, ``schema/cassandra/*``) on a
``MemoryConnection``, which executes ``queries.cql`` over ``engine.Tables``. The adapter's own code runs
in the unit tier, ``tickd dev`` and the simulation; this module only adds what tests and the simulation
need around it: its clock, its tables, settable faults, peers, and reads for checkers (``peek_*``) that
send no request and so pass no fault point."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tickd.schema.cassandra.adapter import CassandraStore
from tickd.schema.cassandra.bridge import Statements, utc
from tickd.schema.memory import cql_schema
from tickd.schema.memory.connection import MemoryConnection
from tickd.schema.memory.engine import Table, Tables
from tickd.schema.memory.faults import StoreFaults
from tickd.schema.model import Claim, InstanceKey, Token
from tickd.schema.settings import StoreSettings

_DEFAULTS = StoreSettings()


class MemoryStore(CassandraStore):
    """``CassandraStore`` on a ``MemoryConnection``. ``clock`` is the server's (and the clients') time: it
    drives TTL expiry and write timestamps; the ``now`` arguments of the methods stay the callers'."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        *,
        page_size: int = _DEFAULTS.page_size,
        retention_s: int = _DEFAULTS.retention_s,
        hot_window_s: float = _DEFAULTS.hot_window_s,
        cluster_name: str = _DEFAULTS.cluster_name,
        faults: StoreFaults | None = None,
        tables: Tables | None = None,
        settings: StoreSettings | None = None,
    ) -> None:
        if settings is None:
            settings = dataclasses.replace(
                _DEFAULTS,
                page_size=page_size,
                retention_s=retention_s,
                hot_window_s=hot_window_s,
                cluster_name=cluster_name,
            )
        self.clock = clock
        self.tables = tables if tables is not None else Tables(clock)
        self._connection = MemoryConnection(self.tables, faults)
        super().__init__(settings, self._connection, _statements(settings.page_size))

    @classmethod
    def from_settings(
        cls,
        settings: StoreSettings,
        clock: Callable[[], datetime],
        *,
        faults: StoreFaults | None = None,
        tables: Tables | None = None,
    ) -> MemoryStore:
        """The store with ``settings`` (the connection ones are not used)."""
        return cls(clock, faults=faults, tables=tables, settings=settings)

    @property
    def faults(self) -> StoreFaults:
        return self._connection.faults

    @faults.setter
    def faults(self, faults: StoreFaults) -> None:
        self._connection.faults = faults

    def peer(self, *, faults: StoreFaults | None = None) -> MemoryStore:
        """Another process's adapter on the same data: its own faults and its own horizon memory."""
        return MemoryStore.from_settings(self.settings, self.clock, faults=faults, tables=self.tables)

    def with_settings(self, **changes: Any) -> MemoryStore:
        """The adapter with other settings (``page_size``, ``retention_s`` ...) on the same data."""
        settings = dataclasses.replace(self.settings, **changes)
        return MemoryStore.from_settings(settings, self.clock, tables=self.tables)

    # -- for checkers (the simulation): read at once, no request, no fault, no yield to the loop ----------

    def peek_claim(self, instance: InstanceKey) -> Claim | None:
        row = self.tables.row(table("instance_claims"), _instance_key(instance))
        return Claim(instance, row.owner, row.epoch) if row is not None else None

    def peek_tokens(self, client_id: str, policy: str) -> list[Token]:
        rows = self.tables.partition(table("throttle_tokens"), {"client_id": client_id, "policy": policy})
        return [Token(client_id, policy, r.slot, r.event_id, r.holder, utc(r.taken_at)) for _, r in rows]

    def peek_written_us(self, table_name: str, key: dict[str, Any]) -> int | None:
        """The highest write timestamp among the cells of the row at ``key`` (None: nothing stored)."""
        return self.tables.written_us(table(table_name), key)


def table(name: str) -> Table:
    """A table's key, as the migrations declare it (``cql_schema``)."""
    return cql_schema.load()[name].table


@functools.lru_cache(maxsize=16)
def _statements(page_size: int) -> Statements:
    """queries.cql prepared in memory: the same for every store of a page size (nothing in it changes
    once prepared), so a peer costs microseconds, not a preparation (0.8 ms)."""
    return Statements.prepare(MemoryConnection(Tables(_no_clock)), page_size)


def _no_clock() -> datetime:
    raise AssertionError("preparing reads no clock")


def _instance_key(instance: InstanceKey) -> dict[str, Any]:
    return {"client_id": instance.client_id, "poller_id": instance.poller_id}
