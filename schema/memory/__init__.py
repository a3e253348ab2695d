"""The in-memory adapters of the store port: Cassandra's semantics without Cassandra, for the unit tier,
the deterministic simulation and ``tickd dev``. Two of them for now: ``MemoryStore``, a hand-written
twin of the Cassandra adapter, and ``MemoryCassandraStore`` (``memory_cassandra_store``), the Cassandra
adapter itself on a connection that executes ``queries.cql`` in memory (``connection``, ``cql``), which
is to replace the twin (issue 26). ``tests/contract`` runs the same tests against both and Cassandra.
Fault points: see ``schema.memory.faults``."""

from tickd.schema.memory.cql_store import MemoryCassandraStore, memory_cassandra_store
from tickd.schema.memory.engine import Tables
from tickd.schema.memory.faults import NoFaults, StoreFaults
from tickd.schema.memory.store import MemoryStore

__all__ = ["MemoryCassandraStore", "MemoryStore", "NoFaults", "StoreFaults", "Tables", "memory_cassandra_store"]
