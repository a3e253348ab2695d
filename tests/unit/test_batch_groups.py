"""How creates are split into atomic store writes (service.creates.groups)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema import batchlog
from tickd.schema.batchlog import Fallbacks
from tickd.schema.cassandra.adapter import CassandraStore
from tickd.schema.cassandra.bridge import Write, write_bytes
from tickd.schema.cassandra.coordination import Horizons
from tickd.schema.cassandra.schedules import creation
from tickd.schema.changes import Base
from tickd.schema.errors import BatchNotLogged, StoreUnavailable
from tickd.schema.model import HttpCallback, Location, Schedule, Status
from tickd.schema.settings import StoreSettings
from tickd.schema.sizes import CREATE_OVERHEAD_BYTES, create_bytes
from tickd.service.creates import CreateCombiner, groups

AT = datetime(2026, 1, 1, tzinfo=UTC)
LIMIT = 40 * 1024


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
    found = list(groups(items, size, LIMIT, second))
    assert [len(g) for g in found] == expected
    assert [i for g in found for i, _ in g] == list(range(count))


def test_a_group_stays_under_the_byte_budget_and_a_big_item_goes_alone() -> None:
    half = LIMIT // 2 - CREATE_OVERHEAD_BYTES - 100
    items = [item(0, half), item(1, half), item(2, 10), item(3, 2 * LIMIT), item(4, 10)]
    assert [[i for i, _ in g] for g in groups(items, 8, LIMIT, second)] == [[0, 1], [2], [3], [4]]


@pytest.mark.parametrize("payload_bytes", [0, 1000, LIMIT - 2000, LIMIT, 64 * 1024])
def test_no_group_of_several_is_over_the_budget(payload_bytes: int) -> None:
    """Mixed sizes, as tenants' creates arrive together: every group of two or more stays under the
    budget, and an item over it by itself is alone."""
    sizes = [10, payload_bytes, 5000, payload_bytes, 20_000, 30_000, 10, payload_bytes, 10]
    items = [item(i, n) for i, n in enumerate(sizes)]
    found = list(groups(items, 8, LIMIT, second))
    assert [i for g in found for i, _ in g] == list(range(len(items)))
    for group in found:
        assert len(group) == 1 or sum(create_bytes(s) for _, s in group) <= LIMIT


def test_the_estimate_counts_the_callback_and_options() -> None:
    _, plain = item(0, 100)
    big_callback = HttpCallback(url="http://h/", headers={f"x-h{i}": "v" * 200 for i in range(30)})
    heavy = Schedule("c", uuid.uuid4(), Location(0, AT), AT, b"x" * 100, big_callback, AT)
    assert create_bytes(heavy) > create_bytes(plain) + 30 * 200


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
    combiner = CreateCombiner(store, 8, LIMIT)  # type: ignore[arg-type]
    schedules = [item(i)[1] for i in range(10)]
    await asyncio.gather(*(combiner.create(s, AT) for s in schedules))
    assert [len(w) for w in store.writes] == [8, 2]
    assert [s for w in store.writes for s in w] == schedules
    await combiner.create(schedules[0], AT)
    assert [len(w) for w in store.writes] == [8, 2, 1]


async def test_a_failed_group_write_fails_every_create_in_it() -> None:
    combiner = CreateCombiner(FakeStore(fail=True), 8, LIMIT)  # type: ignore[arg-type]
    results = await asyncio.gather(*(combiner.create(item(i)[1], AT) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, StoreUnavailable) for r in results)


async def test_size_one_writes_each_create_on_its_own() -> None:
    store = FakeStore()
    combiner = CreateCombiner(store, 1, LIMIT)  # type: ignore[arg-type]
    await asyncio.gather(*(combiner.create(item(i)[1], AT) for i in range(3)))
    assert [len(w) for w in store.writes] == [1, 1, 1]


# -- the Cassandra adapter: a write group over the limit is cut, in a safe order ----------------------


class RecordingBridge:
    def __init__(self, *, batchlog_down: bool = False) -> None:
        self.batches: list[tuple[list[str], bool]] = []
        self.sent: list[Sequence[Write]] = []
        self.batchlog_down = batchlog_down  # every logged batch times out writing its batchlog

    async def batch(self, writes: Sequence[Write], *, logged: bool) -> None:
        self.batches.append(([name for name, _ in writes], logged))
        self.sent.append(writes)
        if logged and self.batchlog_down:
            raise BatchNotLogged("batch: WriteTimeout (BATCH_LOG, test)")


def recording_store(limit: int = LIMIT, *, batchlog_down: bool = False) -> tuple[CassandraStore, RecordingBridge]:
    store = CassandraStore.__new__(CassandraStore)
    bridge = RecordingBridge(batchlog_down=batchlog_down)
    store.settings = StoreSettings(batch_max_bytes=limit)
    store._db = bridge  # type: ignore[assignment]
    store._horizons = Horizons()
    store._clients_seen = {}
    store._unlogged = Fallbacks()
    return store, bridge


@pytest.mark.parametrize("payload_bytes", [0, 100, 5000, 30_000, 64 * 1024])
def test_the_api_estimate_of_a_create_is_no_less_than_the_adapters(payload_bytes: int) -> None:
    _, s = item(0, payload_bytes)
    writes = creation(s, AT, StoreSettings(), Horizons())
    assert create_bytes(s) >= write_bytes(writes)
    assert write_bytes(writes) >= payload_bytes


async def test_creates_under_the_limit_are_one_logged_batch() -> None:
    store, bridge = recording_store()
    await store.create_schedules([item(i, 1000)[1] for i in range(3)], AT)
    assert len(bridge.batches) == 1
    assert bridge.batches[0][1] is True


async def test_a_big_create_writes_pointer_and_signals_first_then_its_row_alone() -> None:
    store, bridge = recording_store()
    await store.create_schedules([item(0, 64 * 1024)[1]], AT)
    assert bridge.batches == [(["insert_ref", "mark_hot", "raise_horizon"], False), (["insert_schedule"], False)]


async def test_a_group_over_the_limit_is_written_one_create_at_a_time() -> None:
    store, bridge = recording_store()
    await store.create_schedules([item(0, 30_000)[1], item(1, 30_000)[1]], AT)
    assert [(len(names), logged) for names, logged in bridge.batches] == [(4, True), (4, True)]


async def test_a_big_move_retires_the_old_row_only_after_the_new_one() -> None:
    store, bridge = recording_store()
    _, current = item(0, 64 * 1024)
    later = dataclasses.replace(current, location=Location(0, AT + timedelta(hours=1)), version=2)
    await store._write_replacement(current, later, AT)
    names = [n for names, _ in bridge.batches for n in names]
    assert names.index("insert_schedule") < names.index("set_status")
    assert all(len(names) == 1 for names, _ in bridge.batches if "insert_schedule" in names)


# -- a logged batch Cassandra could not log: the same writes, unlogged, in schema.batchlog's phases -----


async def test_a_create_whose_batchlog_failed_writes_pointer_and_signals_then_its_row() -> None:
    store, bridge = recording_store(batchlog_down=True)
    await store.create_schedules([item(0, 1000)[1]], AT)
    assert bridge.batches == [
        (["insert_schedule", "insert_ref", "mark_hot", "raise_horizon"], True),
        (["insert_ref", "mark_hot", "raise_horizon"], False),
        (["insert_schedule"], False),
    ]
    assert store._unlogged.total == 1


async def test_a_move_whose_batchlog_failed_retires_the_old_row_after_the_new_row_and_the_fences() -> None:
    store, bridge = recording_store(batchlog_down=True)
    _, current = item(0, 1000)
    later = dataclasses.replace(current, location=Location(0, AT + timedelta(hours=1)), version=2)
    stale = Location(1, AT + timedelta(hours=2))
    base = Base(version=1, write_ts=5, stale=(stale,))
    await store._write_replacement(current, later, AT, base=base)
    logged, *unlogged = bridge.batches
    assert logged[1] is True and all(not was_logged for _, was_logged in unlogged)
    assert [sorted(set(names)) for names, _ in unlogged] == [
        ["mark_hot", "raise_horizon"],
        ["insert_schedule"],
        ["set_status"],  # the fence of the stale target
        ["set_status"],  # the old row, last
    ]
    [(_, fence)], [(_, old)] = bridge.sent[-2:]
    assert (fence["poller_id"], fence["due_at"], fence["status"]) == (1, stale.due_at, "moved")
    assert (old["poller_id"], old["due_at"], old["status"]) == (0, current.location.due_at, "moved")
    assert sorted(n for names, _ in unlogged for n in names) == sorted(logged[0])


async def test_a_cancel_whose_batchlog_failed_writes_its_status_last() -> None:
    store, bridge = recording_store(batchlog_down=True)
    _, current = item(0, 1000)
    current = dataclasses.replace(current, location=Location(0, AT + timedelta(seconds=10)))  # hot: marked
    base = Base(version=1, write_ts=5, stale=(Location(1, AT + timedelta(seconds=20)),))
    await store._write_status(current, Status.CANCELLED, 2, AT, base)
    assert [sorted(set(names)) for names, _ in bridge.batches[1:]] == [["mark_hot"], ["set_status"], ["set_status"]]
    [(_, fence)], [(_, own)] = bridge.sent[-2:]
    assert (fence["poller_id"], fence["status"]) == (1, "moved")
    assert (own["poller_id"], own["status"]) == (0, "cancelled")


def test_the_phases_refuse_a_statement_they_do_not_know() -> None:
    with pytest.raises(ValueError, match="record_outcome"):
        batchlog.phases(["insert_schedule", "record_outcome"])


async def test_a_pollers_move_whose_batchlog_failed_is_not_sent_in_parts() -> None:
    """Cut short between its new row and retiring the old, a poller's move would leave two live rows of
    one fire for the next owner to send twice: it fails whole, and the poller tries it again."""
    store, bridge = recording_store(batchlog_down=True)
    _, current = item(0, 1000)
    later = dataclasses.replace(current, location=Location(0, AT + timedelta(hours=1)), version=2)
    with pytest.raises(BatchNotLogged):
        await store._write_replacement(current, later, AT, keep_status=True)
    assert [logged for _, logged in bridge.batches] == [True]
