"""``schema.guard``: a task's guard runs before every request its store sends, and only that task's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from tickd.schema import guard
from tickd.schema.memory import memory_store

NOW = datetime(2030, 1, 1, tzinfo=UTC)


class Fenced(Exception):
    pass


async def test_a_guard_stops_the_requests_of_its_own_task_only() -> None:
    store = memory_store(lambda: NOW)
    held = True

    def lease() -> None:
        if not held:
            raise Fenced

    async def delivery() -> None:
        guard.set_guard(lease)
        await store.live_nodes()  # lease held: sent
        await asyncio.sleep(0.01)
        await store.live_nodes()  # lease gone meanwhile: not sent

    task = asyncio.create_task(delivery())
    await asyncio.sleep(0)
    held = False
    with pytest.raises(Fenced):
        await task
    assert await store.live_nodes() == []  # another task (no guard) is not stopped


async def test_tasks_started_by_a_guarded_task_are_not_guarded() -> None:
    store = memory_store(lambda: NOW)

    def refuse() -> None:
        raise Fenced

    async def delivery() -> list[object]:
        guard.set_guard(refuse)
        child = asyncio.create_task(store.live_nodes())  # e.g. a consumer's release started from it
        return await child

    assert await delivery_task(delivery) == []


async def delivery_task(coro_fn: object) -> object:
    return await asyncio.create_task(coro_fn())  # type: ignore[operator]
