"""``MemoryConnection``: the bridge's ``Submit`` seam over ``engine.Tables``, executing the statements of
``queries.cql`` themselves (``schema.memory.cql``), so the Cassandra adapter runs unchanged in memory.

Every request is one fault point (``StoreFaults``, named as ``schema.memory.faults`` says: the statement,
or ``batch:<its first statement>``), applied whole at one instant of the store's clock after yielding to
the event loop once. The write timestamp is taken when the request is sent (a second send of it, the
bridge's resend, carries the first one's). An unlogged batch over several partitions applies partition
by partition, with a fault point (``<op>/partial``) between; a logged one over several partitions first
passes ``batchlog``. What fails is raised as the driver would (``InvalidRequest``) or as the faults raise
it (``StoreUnavailable``, ``BatchNotLogged``); the bridge maps both as it maps the driver's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from tickd.schema import queries
from tickd.schema.cassandra.bridge import Page, PagingState, Sends
from tickd.schema.memory import cql
from tickd.schema.memory.engine import Tables, Write, micros
from tickd.schema.memory.faults import NoFaults, StoreFaults


class MemoryConnection:
    """``bridge.Submit`` in memory. ``tables`` may be shared by several connections (processes)."""

    def __init__(self, tables: Tables, faults: StoreFaults | None = None) -> None:
        self.tables = tables
        self.faults: StoreFaults = faults if faults is not None else NoFaults()

    def prepare(self, query: queries.Query) -> cql.Prepared:
        return cql.prepare(query)

    def clock_us(self) -> int:
        return micros(self.tables.clock())

    def write_timestamp(self) -> int:
        return self.tables.timestamp()

    async def send(
        self,
        statement: cql.Prepared,
        values: Mapping[str, Any],
        paging_state: PagingState | None,
        left_s: float | None,
        sends: Sends,
    ) -> Page:
        ts = self._stamp(sends)
        await asyncio.sleep(0)
        await self.faults.before(statement.name)
        answer = statement.plan.execute(self.tables, values, ts, paging_state, statement.fetch_size)
        await self.faults.after(statement.name)
        return answer

    async def send_batch(
        self,
        writes: Sequence[tuple[cql.Prepared, Mapping[str, Any]]],
        logged: bool,
        idempotent: bool,
        left_s: float | None,
        sends: Sends,
    ) -> Page:
        ts = self._stamp(sends)
        op = f"batch:{writes[0][0].name}" if writes else "batch"
        await asyncio.sleep(0)
        await self.faults.before(op)
        bound = [statement.plan.batched(values) for statement, values in writes]
        groups: dict[tuple[str, Any], list[Write]] = {}
        for write in bound:
            groups.setdefault(write.partition, []).append(write)
        if logged and len(groups) > 1:  # Cassandra keeps a batchlog only for these
            await self.faults.batchlog(op)
        parts = [bound] if logged or len(groups) <= 1 else list(groups.values())
        self.tables.apply(parts[0], ts)
        for part in parts[1:]:
            await self.faults.after(f"{op}/partial")
            self.tables.apply(part, ts)
        await self.faults.after(op)
        return Page([], None)

    def _stamp(self, sends: Sends) -> int:
        if sends.timestamp is None:
            sends.timestamp = self.tables.timestamp()
        return sends.timestamp
