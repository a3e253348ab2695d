"""The in-memory counterpart of the driver session: every request is one fault point, applied whole
at one instant of the store's clock, after yielding to the event loop once (a real call never
completes without a suspension, and code must not rely on two calls running back to back)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from tickd.schema import deadline, guard
from tickd.schema.memory.engine import Tables, Values, Write, norm, page
from tickd.schema.memory.faults import NoFaults, StoreFaults

T = TypeVar("T")
Select = Callable[[], Sequence[tuple[Any, Values]]]


class Session:
    def __init__(self, tables: Tables, page_size: int, faults: StoreFaults | None) -> None:
        self.tables = tables
        self.page_size = page_size
        self.faults: StoreFaults = faults if faults is not None else NoFaults()

    async def request(self, op: str, *steps: Callable[[int], T], batchlog: bool = False) -> T:
        """Send one request; ``steps`` apply in order (several only for an unlogged multi-partition batch).
        ``batchlog``: a logged batch over several partitions, which must first write its batchlog.

        The write timestamp is taken when the request is sent, as the driver does, so a request held up
        in ``before`` carries an older timestamp than one sent after it."""
        guard.check()
        deadline.left_s(op)
        ts = self.tables.timestamp()
        await asyncio.sleep(0)
        await self.faults.before(op)
        if batchlog:
            await self.faults.batchlog(op)
        result = steps[0](ts)
        for step in steps[1:]:
            await self.faults.after(f"{op}/partial")
            result = step(ts)
        await self.faults.after(op)
        return result

    async def write(self, write: Write) -> None:
        await self.request(write.name, lambda ts: self.tables.apply([write], ts))

    async def batch(self, writes: Sequence[Write], *, logged: bool) -> None:
        """A logged batch, or an unlogged one within one partition, applies whole; an unlogged batch
        over several partitions applies partition by partition."""
        op = f"batch:{writes[0].name}" if writes else "batch"
        groups: dict[tuple[str, Any], list[Write]] = {}
        for write in writes:
            groups.setdefault(write.partition, []).append(write)
        parts = [list(writes)] if logged or len(groups) <= 1 else list(groups.values())
        # Cassandra keeps a batchlog only for a logged batch over several partitions.
        await self.request(op, *(self._applier(part) for part in parts), batchlog=logged and len(groups) > 1)

    def _applier(self, writes: list[Write]) -> Callable[[int], None]:
        return lambda ts: self.tables.apply(writes, ts)

    async def lwt(self, write: Write, expect: Mapping[str, Any] | None) -> tuple[bool, Values]:
        """A lightweight transaction: ``write`` applies if the row is missing (``expect`` None: IF NOT
        EXISTS) or holds ``expect``; (applied, the row as it was)."""

        def apply(_: int) -> tuple[bool, Values]:
            current = self.tables.row(write.table, write.key)
            if expect is None:
                applied = current is None
            else:
                applied = current is not None and all(current.get(c) == norm(v) for c, v in expect.items())
            if applied:
                self.tables.apply([write], self.tables.ballot())
            return applied, current or Values()

        return await self.request(write.name, apply)

    async def rows(self, op: str, select: Select, limit: int | None = None) -> list[Values]:
        """Every row of a read, page after page to the end (as the Cassandra adapter reads)."""
        return [row async for page in self.pages(op, select, limit) for row in page]

    async def pages(self, op: str, select: Select, limit: int | None = None) -> AsyncIterator[list[Values]]:
        """A paged read: one request per page, each resuming after the last row of the one before. A
        full page promises another (perhaps empty) one, unless it used up the ``limit``."""
        after: Any | None = None
        left = limit
        while True:
            size = self.page_size if left is None else min(left, self.page_size)
            rows, after = await self.request(op, self._pager(select, after, size))
            yield rows
            if left is not None:
                left -= len(rows)
            if after is None or left == 0:
                return

    def _pager(self, select: Select, after: Any | None, size: int) -> Callable[[int], tuple[list[Values], Any | None]]:
        return lambda _: page(select(), after, size)
