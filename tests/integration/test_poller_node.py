"""The engine in-process against the real Cassandra. Deliveries go to a recording router: the callback
pools have their own tests; here the subject is when (and whether) the engine fires."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import later, make_client
from tickd.poller.delivery import DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import HttpCallback, InstanceKey, Location, NodeInfo, Options, Repeat, Schedule, Status
from tickd.schema.settings import StoreSettings

pytestmark = pytest.mark.integration


class RecordingRouter:
    """Records each delivery; fails the first ``fail_first`` attempts of a schedule when asked."""

    def __init__(self) -> None:
        self.fires: list[tuple[str, int, datetime]] = []
        self.fail_first: dict[uuid.UUID, int] = {}
        self.events: dict[str, list[tuple[int, datetime]]] = {}  # fire id -> (event index, fired at)
        self.fail_fire: dict[str, int] = {}  # the same, for one fire id (one occurrence of a recurring schedule)

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        event = schedule.options.event if schedule.options is not None else None
        if event is not None:
            self.events.setdefault(schedule.fire_id, []).append((event.index, fired_at))
            return DeliveryResult.delivered(attempt)
        self.fires.append((schedule.fire_id, attempt, fired_at))
        if attempt <= self.fail_first.get(schedule.schedule_id, 0) or attempt <= self.fail_fire.get(
            schedule.fire_id, 0
        ):
            return DeliveryResult(
                ok=False, retriable=True, error="HTTP 503", retry_after_s=0.5, status_code=503, attempts=attempt
            )
        return DeliveryResult(
            ok=True, retriable=False, error=None, retry_after_s=None, status_code=200, attempts=attempt
        )

    async def close(self) -> None:
        return None

    def fired(self, schedule: Schedule) -> list[tuple[int, datetime]]:
        return [(a, t) for f, a, t in self.fires if f == schedule.fire_id]


@pytest.fixture(scope="module")
async def store(store_settings: StoreSettings) -> AsyncIterator[CassandraStore]:
    """A keyspace of this module's own: a node runs every client it finds, so it must find only ours."""
    settings = dataclasses.replace(store_settings, keyspace=f"{store_settings.keyspace}_node")
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    s = await CassandraStore.connect(settings)
    yield s
    await s.close()


@pytest.fixture
async def cluster(store: CassandraStore, client_id: str) -> AsyncIterator[tuple[Node, RecordingRouter]]:
    settings = dataclasses.replace(
        PollerSettings.from_env({"TICKD_NODE_ID": f"node-{client_id}"}),
        store=store.settings,
        ring_refresh_s=0.2,
        clients_refresh_s=0.2,
        claim_verify_s=0.5,
        preload_s=3.0,
        mark_poll_s=0.2,
        minute_close_s=2.0,
    )
    await store.create_client(make_client(client_id, pollers=2))
    router = RecordingRouter()
    node = Node(settings, store, router, Metrics())  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(node.run(stop))
    mine = {f"{client_id}/0", f"{client_id}/1"}
    await wait_for(lambda: mine <= set(node.status()["instances"]), 10)  # type: ignore[call-overload]
    yield node, router
    stop.set()
    await asyncio.wait_for(task, 30)


async def wait_for(predicate: object, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


def row(client_id: str, sid: uuid.UUID, fire_at: datetime, now: datetime, **changes: Any) -> Schedule:
    """A schedule row of the 2-poller test client, placed as the API would place it."""
    location = Location(timing.poller_id_for(sid, 2), timing.due_time(fire_at, now))
    return Schedule(client_id, sid, location, fire_at, b"{}", HttpCallback(url="http://127.0.0.1:9/"), now, **changes)


async def create(store: CassandraStore, client_id: str, in_s: float, poller_id: int | None = None) -> Schedule:
    """A schedule due in ``in_s``, of the instance ``poller_id`` if given (its id drawn until it lands there)."""
    now = later(0)
    sid = uuid.uuid4()
    while poller_id is not None and timing.poller_id_for(sid, 2) != poller_id:
        sid = uuid.uuid4()
    s = row(client_id, sid, later(in_s), now)
    await store.create_schedule(s, now)
    return s


async def test_fires_each_row_once_not_before_its_time(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    _, router = cluster
    made = [await create(store, client_id, 0.5 + i * 0.25) for i in range(24)]
    past = await create(store, client_id, -3600)
    await wait_for(lambda: all(router.fired(s) for s in [*made, past]), 30)
    for s in made:
        (attempt, fired_at), *rest = router.fired(s)
        assert attempt == 1 and not rest and fired_at >= s.fire_at


async def test_outcomes_are_recorded(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    _, router = cluster
    s = await create(store, client_id, 1)
    await wait_for(lambda: router.fired(s), 15)

    async def status() -> Status | None:
        got = await store.get_schedule(client_id, s.schedule_id)
        return got.status if got else None

    async with asyncio.timeout(10):
        while await status() is not Status.SUCCEEDED:
            await asyncio.sleep(0.1)
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.attempts == 1 and got.fired_at is not None


async def test_late_create_and_cancel_in_a_loaded_minute(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    _, router = cluster
    doomed = await create(store, client_id, 6)
    await asyncio.sleep(1.0)  # the minute holding it may well be loaded by now
    current = await store.get_schedule(client_id, doomed.schedule_id)
    assert current is not None
    await store.cancel_schedule(current, datetime.now(UTC))  # > 2 s before its time: must not fire
    late = await create(store, client_id, 0.3)  # a create landing in an already-loaded minute
    await wait_for(lambda: router.fired(late), 15)
    # Due after the doomed one in its instance: once this fires, the instance has gone past the doomed one.
    gone_past = (doomed.fire_at - datetime.now(UTC)).total_seconds() + 2.0
    after = await create(store, client_id, gone_past, poller_id=doomed.location.poller_id)
    await wait_for(lambda: router.fired(after), 30)
    assert router.fired(doomed) == []


async def test_failed_fire_is_retried_durably_with_the_same_fire_id(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    _, router = cluster
    sid = uuid.uuid4()
    router.fail_first[sid] = 1
    now = datetime.now(UTC)
    fire_at = now + timedelta(seconds=1)
    s = row(client_id, sid, fire_at, now)
    await store.create_schedule(s, now)
    await wait_for(lambda: len(router.fired(s)) >= 2, 20)
    assert [a for a, _ in router.fired(s)] == [1, 2]

    async def done() -> bool:
        got = await store.get_schedule(client_id, sid)
        return got is not None and got.status is Status.SUCCEEDED and got.attempts == 2

    async with asyncio.timeout(10):
        while not await done():
            await asyncio.sleep(0.1)


async def test_an_instance_whose_claim_is_taken_stops(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    node, _ = cluster
    key = InstanceKey(client_id, 0)
    seen = await store.get_claim(key)
    assert seen is not None and seen.owner == node.node_id
    stolen = await store.claim(key, "thief", seen, datetime.now(UTC))
    assert stolen is not None and stolen.epoch == seen.epoch + 1
    # The node must stop running under its old epoch. "thief" is not a live node, so the node may
    # then rightly claim the instance back: if it runs again, it is under a newer epoch than the thief's.
    await wait_for(lambda: node.status()["instances"].get(str(key)) != seen.epoch, 10)  # type: ignore[attr-defined]
    current = node.status()["instances"].get(str(key))  # type: ignore[attr-defined]
    assert current is None or current > stolen.epoch


class GhostArrivesAfterFirstLook:
    """The real store, except that right after the node's first membership read another node ("ghost":
    heartbeat rows and claims, no process) joins and claims every instance: the window in which a
    node holding a stale membership view must still not take over a live node's claim."""

    def __init__(self, store: CassandraStore, keys: list[InstanceKey]) -> None:
        self._store = store
        self._keys = keys
        self.arrived = False
        self.looks = 0  # membership reads: one per round of the node's ring loop

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def live_nodes(self) -> list[NodeInfo]:
        nodes = await self._store.live_nodes()
        self.looks += 1
        if not self.arrived:
            self.arrived = True
            now = datetime.now(UTC)
            await self._store.heartbeat(NodeInfo("ghost", "127.0.0.1", 1, now, now), ttl_s=60)
            await asyncio.gather(*(self._store.claim(k, "ghost", None, now) for k in self._keys))
        return nodes


async def test_a_claim_held_by_a_live_node_is_never_taken_over(store: CassandraStore, client_id: str) -> None:
    await store.create_client(make_client(client_id, pollers=6))
    keys = [InstanceKey(client_id, p) for p in range(6)]
    settings = dataclasses.replace(
        PollerSettings.from_env({"TICKD_NODE_ID": f"node-{client_id}"}),
        store=store.settings,
        ring_refresh_s=0.2,
        clients_refresh_s=0.2,
        claim_verify_s=0.5,
    )
    proxy = GhostArrivesAfterFirstLook(store, keys)
    node = Node(settings, proxy, RecordingRouter(), Metrics())  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(node.run(stop))
    try:
        # At least ten rounds of the ring loop after the ghost came (one or two membership reads a round):
        # each would have claimed the ghost's instances if the node still went by its first, stale read.
        await wait_for(lambda: proxy.looks >= 21, 30)
        assert proxy.arrived
        assert not {str(k) for k in keys} & set(node.status()["instances"])  # type: ignore[arg-type]
        claims = await asyncio.gather(*(store.get_claim(k) for k in keys))
        assert [(c.owner, c.epoch) for c in claims if c] == [("ghost", 1)] * len(keys)

        await store.leave("ghost")  # now it is gone: the node takes everything over
        mine = {str(k) for k in keys}
        await wait_for(lambda: mine <= set(node.status()["instances"]), 15)  # type: ignore[call-overload]
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_recurring_fires_on_its_nominal_grid_and_records_runs(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    """every 2s, 4 fires: each at its own nominal time (the next one computed from the nominal time of
    the last, not from when it fired), each with its own fire id, then the timeline ends."""
    _, router = cluster
    sid, now = uuid.uuid4(), later(0)
    start = later(1.5)
    repeat = Repeat(every_s=2, start_at=start, max_fires=4)
    first = row(client_id, sid, start, now, options=Options(repeat=repeat), seq=1)
    router.fail_fire[first.fire_id] = 1  # the first occurrence needs a retry: the timeline must not wait for it
    await store.create_schedule(first, now)
    nominal = [start + timedelta(seconds=2 * i) for i in range(4)]
    want = {timing.fire_id(sid, t) for t in nominal}
    await wait_for(lambda: want <= {f for f, _, _ in router.fires}, 30)

    async def runs_done() -> list[Status]:
        return [r.status for r in await store.list_runs(client_id, sid, None, 10)]

    deadline = asyncio.get_running_loop().time() + 10
    while await runs_done() != [Status.SUCCEEDED] * 4 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
    runs = await store.list_runs(client_id, sid, None, 10)
    assert [(r.nominal_at, r.seq, r.status) for r in runs] == [
        (t, i + 1, Status.SUCCEEDED) for i, t in reversed(list(enumerate(nominal)))
    ]
    # The fourth's outcome is recorded, and with it the timeline's end: no fifth occurrence is stored to come.
    ended = await store.get_schedule(client_id, sid)
    assert ended is not None and ended.status is Status.SUCCEEDED and ended.seq == 4, ended

    mine = [(f, a, t) for f, a, t in router.fires if f.startswith(str(sid))]
    assert {f for f, _, _ in mine} == want  # max_fires: no fifth occurrence
    firsts = [at for t in nominal[1:] for f, a, at in mine if f == timing.fire_id(sid, t) and a == 1]
    assert len(firsts) == 3 and firsts == sorted(firsts)  # one first attempt each, in their order
    assert all(t <= at for t, at in zip(nominal[1:], firsts, strict=True))  # never before its nominal time
    assert [a for f, a, _ in mine if f == first.fire_id] == [1, 2]  # retried, same fire id


async def test_a_batch_trigger_expands_into_spread_events(
    store: CassandraStore, client_id: str, cluster: tuple[Node, RecordingRouter]
) -> None:
    """events 6 over a 3 s window: the fire itself is not delivered; six events are, each once, each in
    its own half-second slot, carrying the schedule's fire id; the run counts them."""
    _, router = cluster
    sid, now = uuid.uuid4(), later(0)
    fire_at = later(1.5)
    trigger = row(client_id, sid, fire_at, now, options=Options(events=6, window_ms=3000))
    await store.create_schedule(trigger, now)
    await wait_for(lambda: len(router.events.get(trigger.fire_id, [])) >= 6, 20)
    deadline = asyncio.get_running_loop().time() + 10
    runs = await store.list_runs(client_id, sid, None, 5)
    while (not runs or runs[0].events_done < 6) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        runs = await store.list_runs(client_id, sid, None, 5)
    # The run has counted its six: a seventh (a duplicate) would have been sent before that.
    arrived = router.events[trigger.fire_id]
    assert sorted(i for i, _ in arrived) == list(range(6))  # each event once; the trigger itself never
    assert not router.fired(trigger)
    for index, at in arrived:  # each in its own half-second slot: never before the slot opens, in slot order
        assert fire_at + timedelta(milliseconds=500 * index) <= at
    assert [i for i, _ in sorted(arrived, key=lambda e: e[1])] == list(range(6))
    [run] = runs
    assert (run.status, run.events, run.events_done) == (Status.SUCCEEDED, 6, 6)
    assert run.window_end == fire_at + timedelta(seconds=3)
