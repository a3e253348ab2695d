"""``schema.guard``: a task's guard runs before every request its store sends, and only that task's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from schema import guard
from schema.memory import MemoryStore

NOW = datetime(2030, 1, 1, tzinfo=UTC)


class Fenced(Exception):
    pass


async def test_a_guard_stops_the_requests_of_its_own_task_only() -> None:
    store = MemoryStore(lambda: NOW)
    held = True

    def lease() -> None:
        if not held:
            raise Fenced

    async def delivery() -> None:
        guard.REQUEST_GUARD.set(lease)
        await store.live_nodes()  # lease held: sent
        await asyncio.sleep(0.01)
        await store.live_nodes()  # lease gone meanwhile: not sent

    task = asyncio.create_task(delivery())
    await asyncio.sleep(0)
    held = False
    with pytest.raises(Fenced):
        await task
    assert await store.live_nodes() == []  # another task (no guard) is not stopped
