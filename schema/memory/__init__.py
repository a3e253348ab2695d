"""The in-memory adapter of the store port, for the unit tier, the deterministic simulation and
``tickd dev``: ``MemoryStore`` is the Cassandra adapter itself (``schema/cassandra/*``) on a connection
that executes the statements of ``queries.cql`` in memory (``connection``, ``cql``, ``engine``), so
everything that runs on it runs the production adapter. ``tests/contract`` runs the same tests against
it and Cassandra. Fault points: see ``schema.memory.faults``."""

from tickd.schema.memory.engine import Tables
from tickd.schema.memory.faults import NoFaults, StoreFaults
from tickd.schema.memory.store import MemoryStore

__all__ = ["MemoryStore", "NoFaults", "StoreFaults", "Tables"]
