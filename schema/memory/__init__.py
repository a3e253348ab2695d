"""The in-memory adapter of the store port: Cassandra's semantics without Cassandra, for the unit tier,
the deterministic simulation and ``tickd dev``. ``tests/contract`` runs the same tests against it and
the Cassandra adapter. Fault points: see ``schema.memory.faults``."""

from tickd.schema.memory.engine import Tables
from tickd.schema.memory.faults import NoFaults, StoreFaults
from tickd.schema.memory.store import MemoryStore

__all__ = ["MemoryStore", "NoFaults", "StoreFaults", "Tables"]
