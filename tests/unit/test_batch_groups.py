"""How creates are split into atomic store writes (service.creates.groups)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from schema.errors import StoreUnavailable
from schema.model import HttpCallback, Location, Schedule
from service.creates import GROUP_PAYLOAD_BYTES, CreateCombiner, groups

AT = datetime(2026, 1, 1, tzinfo=UTC)


def second(pair: tuple[int, Schedule]) -> Schedule:
    return pair[1]


def item(index: int, payload_bytes: int = 10) -> tuple[int, Schedule]:
    schedule = Schedule("c", uuid.uuid4(), Location(0, AT), AT, b"x" * payload_bytes, HttpCallback(url="http://h/"), AT)
    return index, schedule


@pytest.mark.parametrize(
    ("count", "size", "expected"), [(0, 8, []), (1, 8, [1]), (17, 8, [8, 8, 1]), (3, 1, [1, 1, 1])]
)
def test_groups_hold_at_most_size_items_in_order(count: int, size: int, expected: list[int]) -> None:
    items = [item(i) for i in range(count)]
    found = list(groups(items, size, second))
    assert [len(g) for g in found] == expected
    assert [i for g in found for i, _ in g] == list(range(count))


def test_a_group_stays_under_the_payload_budget_and_a_big_item_goes_alone() -> None:
    half = GROUP_PAYLOAD_BYTES // 2
    items = [item(0, half), item(1, half), item(2, 10), item(3, 2 * GROUP_PAYLOAD_BYTES), item(4, 10)]
    assert [[i for i, _ in g] for g in groups(items, 8, second)] == [[0, 1], [2], [3], [4]]


class FakeStore:
    def __init__(self, fail: bool = False) -> None:
        self.writes: list[list[Schedule]] = []
        self.fail = fail

    async def create_schedule(self, schedule: Schedule, now: datetime) -> None:
        await self.create_schedules([schedule], now)

    async def create_schedules(self, schedules: Sequence[Schedule], now: datetime) -> None:
        await asyncio.sleep(0)
        if self.fail:
            raise StoreUnavailable("down")
        self.writes.append(list(schedules))


async def test_creates_arriving_together_are_written_together() -> None:
    store = FakeStore()
    combiner = CreateCombiner(store, 8)  # type: ignore[arg-type]
    schedules = [item(i)[1] for i in range(10)]
    await asyncio.gather(*(combiner.create(s, AT) for s in schedules))
    assert [len(w) for w in store.writes] == [8, 2]
    assert [s for w in store.writes for s in w] == schedules
    await combiner.create(schedules[0], AT)
    assert [len(w) for w in store.writes] == [8, 2, 1]


async def test_a_failed_group_write_fails_every_create_in_it() -> None:
    combiner = CreateCombiner(FakeStore(fail=True), 8)  # type: ignore[arg-type]
    results = await asyncio.gather(*(combiner.create(item(i)[1], AT) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, StoreUnavailable) for r in results)


async def test_size_one_writes_each_create_on_its_own() -> None:
    store = FakeStore()
    combiner = CreateCombiner(store, 1)  # type: ignore[arg-type]
    await asyncio.gather(*(combiner.create(item(i)[1], AT) for i in range(3)))
    assert [len(w) for w in store.writes] == [1, 1, 1]
