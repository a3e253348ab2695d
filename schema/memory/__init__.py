"""The in-memory session of the store port, for the unit tier, the deterministic simulation and ``tickd dev``:
``memory_store`` is the Cassandra adapter itself (``CassandraStore``, ``schema/cassandra/*``) on a
``MemoryConnection`` that executes the statements of ``queries.cql`` in memory (``connection``, ``cql``,
``engine``), so everything that runs on it runs the production adapter. ``tests/contract`` runs the same
tests against it and Cassandra. Fault points: see ``schema.memory.faults``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar, overload

from tickd.schema.cassandra.adapter import CassandraStore
from tickd.schema.cassandra.bridge import Statements
from tickd.schema.memory.connection import MemoryConnection
from tickd.schema.memory.engine import Tables
from tickd.schema.memory.faults import NoFaults, StoreFaults
from tickd.schema.settings import StoreSettings

__all__ = ["MemoryConnection", "NoFaults", "StoreFaults", "Tables", "memory_store"]

S = TypeVar("S", bound=CassandraStore)
Clock = Callable[[], datetime]
_DEFAULTS = StoreSettings()


@overload
def memory_store(on: Clock | MemoryConnection, settings: StoreSettings = ...) -> CassandraStore: ...
@overload
def memory_store(on: Clock | MemoryConnection, settings: StoreSettings = ..., *, kind: type[S]) -> S: ...
def memory_store(
    on: Clock | MemoryConnection, settings: StoreSettings = _DEFAULTS, *, kind: type[CassandraStore] = CassandraStore
) -> CassandraStore:
    """``kind`` (the adapter, or a test's subclass of it) on ``on``: a connection, or new empty tables on a
    clock. The clock is the server's (and the clients') time: it drives TTL expiry and write timestamps;
    the ``now`` arguments of the store's methods stay the callers'. Stores on connections that share
    tables are processes on the same data."""
    connection = on if isinstance(on, MemoryConnection) else MemoryConnection(Tables(on))
    return kind(settings, connection, _statements(settings.page_size))


@functools.lru_cache(maxsize=16)
def _statements(page_size: int) -> Statements:
    """queries.cql prepared in memory: the same for every store of a page size (nothing in it changes
    once prepared), so another store on the same data costs microseconds, not a preparation (0.8 ms)."""
    return Statements.prepare(MemoryConnection(Tables(_no_clock)), page_size)


def _no_clock() -> datetime:
    raise AssertionError("preparing reads no clock")
