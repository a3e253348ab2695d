"""The API's own tests over the in-memory store: the real app and aiohttp server, no Cassandra.

The store is the Cassandra adapter itself on the in-memory session (``memory_store``; the contract
suite, ``tests/contract``, runs on it and on Cassandra), on the wall clock, fresh for every test. What is about storage
itself stays on the real Cassandra: the contract suite, the hostile corpus's raw row counts, the
idempotency races and the fuzzer (``tests/integration``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import memory_store


@pytest.fixture
def store() -> CassandraStore:
    return memory_store(lambda: datetime.now(UTC))
