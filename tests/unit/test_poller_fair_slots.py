"""Fair shares of a node (issue 25, Deliver 2): a fire holds a node slot only while it can be sent, and one
client's share of the node's slots is capped, so one tenant's waiting fires never hold another's back.

The node tests run a real ``Node`` over the memory store with a scaled-down ``node_max_inflight`` (8): a
noisy tenant has many fires due that cannot go out (a throttle policy that never releases, an endpoint
that never answers), a quiet tenant has one fire due a moment later, and that fire must go out. Before
the fix the noisy tenant's waiting fires held all 8 node slots and the quiet fire never went out."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from tickd.poller.callbacks.http import HttpSettings
from tickd.poller.delivery import DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import FairSlots, SendSlots
from tickd.poller.throttle import ThrottleGate
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import ConfigError
from tickd.schema.memory import memory_store
from tickd.schema.model import (
    Callback,
    Client,
    HttpCallback,
    KafkaCallback,
    Location,
    Options,
    Schedule,
    ThrottlePolicy,
)
from tickd.schema.settings import StoreSettings

NOISY, QUIET = "noisy", "quiet"
NODE_SLOTS = 8


# -- a node with two tenants ------------------------------------------------------------------------


@dataclass
class Router:
    """Records each send (client, loop time); a noisy tenant's sends never answer when ``hang`` is set."""

    hang: set[str] = field(default_factory=set)
    sent: list[tuple[str, float]] = field(default_factory=list)
    stuck: int = 0  # sends under way that never answer

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        self.sent.append((schedule.client_id, asyncio.get_running_loop().time()))
        if schedule.client_id in self.hang:
            self.stuck += 1
            try:
                await asyncio.Event().wait()
            finally:
                self.stuck -= 1
        return DeliveryResult.delivered(attempt)

    async def deliver_many(self, schedules: Sequence[Schedule], fired_at: datetime) -> list[DeliveryResult]:
        return list(await asyncio.gather(*(self.deliver(s, s.attempts + 1, fired_at) for s in schedules)))

    async def close(self) -> None:
        return None

    def times(self, client_id: str) -> list[float]:
        return [at for who, at in self.sent if who == client_id]


def settings(**changes: object) -> PollerSettings:
    base: dict[str, object] = {
        "node_id": "n1",
        "metrics_port": 0,
        "store": StoreSettings(keyspace="memory"),
        "heartbeat_interval_s": 0.05,
        "node_ttl_s": 2,
        "fence_margin_s": 1.5,
        "ring_refresh_s": 0.05,
        "clients_refresh_s": 0.1,
        "mark_poll_s": 0.05,
        "shutdown_deadline_s": 0.3,
        "throttle_poll_s": 0.02,
        "node_max_inflight": NODE_SLOTS,
    }
    base.update(changes)
    return PollerSettings(**base)  # type: ignore[arg-type]


def row(
    client_id: str, fire_at: datetime, now: datetime, callback: Callback, options: Options | None = None
) -> Schedule:
    sid = uuid.uuid4()
    location = Location(timing.poller_id_for(sid, 1), timing.due_time(fire_at, now))
    return Schedule(client_id, sid, location, fire_at, b"{}", callback, now, options=options)


@dataclass
class World:
    store: CassandraStore
    router: Router
    node: Node
    stop: Callable[[], Awaitable[None]]


@pytest.fixture
async def world() -> AsyncIterator[Callable[[PollerSettings], World]]:
    store = memory_store(lambda: datetime.now(UTC))
    at = datetime.now(UTC)
    for client_id in (NOISY, QUIET):
        await store.create_client(Client(client_id, 1, True, "hash", at, at))

    def start(node_settings: PollerSettings) -> World:
        router = Router()
        node = Node(node_settings, store, router, Metrics())  # type: ignore[arg-type]
        stop = asyncio.Event()
        task = asyncio.create_task(node.run(stop))
        running.append(task)

        async def stopped() -> None:
            stop.set()
            await asyncio.wait_for(task, 10)

        stops.append(stopped)
        return World(store, router, node, stopped)

    running: list[asyncio.Task[None]] = []
    stops: list[Callable[[], Awaitable[None]]] = []
    yield start
    for stop in stops:
        await stop()


async def until(check: Callable[[], bool], timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            while not check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        return False
    return True


async def quiet_fire_beside(w: World, noisy_rows: list[Schedule], callback: Callback) -> None:
    """Store the noisy tenant's rows (due in 1 s) and one quiet fire due 1 s after them."""
    now = datetime.now(UTC)
    quiet_at = timing.truncate_ms(now + timedelta(seconds=2))
    await w.store.create_schedules(noisy_rows, now)
    await w.store.create_schedule(row(QUIET, quiet_at, now, callback), now)


# -- the node ---------------------------------------------------------------------------------------


async def test_a_throttle_that_never_releases_holds_no_node_slot_of_another_tenant(
    world: Callable[[PollerSettings], World],
) -> None:
    w = world(settings())
    now = datetime.now(UTC)
    await w.store.put_policy(ThrottlePolicy(NOISY, "p", 1, 3600, now, now))  # one token, never released
    fire_at = timing.truncate_ms(now + timedelta(seconds=1))
    trigger = row(NOISY, fire_at, now, HttpCallback(url="https://noisy.test/"), Options(events=50, throttle="p"))
    await quiet_fire_beside(w, [trigger], HttpCallback(url="https://quiet.test/"))

    # The noisy tenant's 49 events wait for the token (its first event holds it) as the quiet fire comes due.
    assert await until(lambda: bool(w.router.times(QUIET)), 8), "the quiet tenant's fire never went out"
    assert len(w.router.times(NOISY)) == 1  # the policy still holds: one event out, the rest waiting
    slots = w.node._send_slots
    assert slots.node.held(NOISY) == 0  # waiting for a token holds no node slot
    assert slots.node.waiting(NOISY) == 0 and slots.http.waiting(NOISY) == 0


async def test_an_endpoint_that_never_answers_takes_at_most_its_clients_share(
    world: Callable[[PollerSettings], World],
) -> None:
    w = world(settings(http=HttpSettings(per_client_limit=4, per_host_limit=4, connection_limit=16)))
    w.router.hang.add(NOISY)
    now = datetime.now(UTC)
    fire_at = timing.truncate_ms(now + timedelta(seconds=1))
    noisy = [row(NOISY, fire_at, now, HttpCallback(url="https://noisy.test/")) for _ in range(40)]
    await quiet_fire_beside(w, noisy, HttpCallback(url="https://quiet.test/"))

    assert await until(lambda: bool(w.router.times(QUIET)), 8), "the quiet tenant's fire never went out"
    slots = w.node._send_slots
    # The noisy tenant's sends hang, each holding a node slot: a quarter of the node's at most. Its HTTP
    # share (4) is its own: the fires holding those wait only for its node share.
    assert w.router.stuck == slots.node.held(NOISY) == NODE_SLOTS // 4
    assert slots.http.held(NOISY) == 4
    shown = w.node.status()["send_slots"]  # what an operator sees of it
    assert shown["node"]["held"][NOISY] == NODE_SLOTS // 4  # type: ignore[index]


async def test_a_kafka_group_that_never_acks_takes_at_most_its_clients_share(
    world: Callable[[PollerSettings], World],
) -> None:
    w = world(settings())
    w.router.hang.add(NOISY)
    now = datetime.now(UTC)
    fire_at = timing.truncate_ms(now + timedelta(seconds=1))
    noisy = [row(NOISY, fire_at, now, KafkaCallback(topic="noisy")) for _ in range(40)]
    await quiet_fire_beside(w, noisy, KafkaCallback(topic="quiet"))

    assert await until(lambda: bool(w.router.times(QUIET)), 8), "the quiet tenant's fire never went out"
    assert w.router.stuck == w.node._send_slots.node.held(NOISY) == NODE_SLOTS // 4


async def test_every_slot_goes_back_when_the_node_stops(world: Callable[[PollerSettings], World]) -> None:
    """Fires cancelled at the drain deadline (sending, or waiting for a slot or a token) give their slots
    back: nothing leaks into the next instance the node runs."""
    w = world(settings(node_client_max_inflight=3))
    w.router.hang.add(NOISY)
    now = datetime.now(UTC)
    await w.store.put_policy(ThrottlePolicy(NOISY, "p", 2, 3600, now, now))
    fire_at = timing.truncate_ms(now + timedelta(seconds=1))
    noisy = [row(NOISY, fire_at, now, HttpCallback(url="https://noisy.test/")) for _ in range(10)]
    noisy += [row(NOISY, fire_at, now, KafkaCallback(topic="noisy")) for _ in range(10)]
    noisy.append(row(NOISY, fire_at, now, HttpCallback(url="https://noisy.test/"), Options(events=5, throttle="p")))
    await quiet_fire_beside(w, noisy, HttpCallback(url="https://quiet.test/"))
    slots = w.node._send_slots
    assert await until(lambda: bool(w.router.times(QUIET)) and slots.node.held(NOISY) == 3, 8)

    await w.stop()  # its drain deadline cancels every fire still in flight
    assert w.router.stuck == 0
    assert slots.node.free == slots.node.total
    assert slots.http.free == slots.http.total and slots.kafka.free == slots.kafka.total


# -- the slots themselves ---------------------------------------------------------------------------


async def test_a_client_holds_at_most_its_share_and_the_rest_stay_free_for_others() -> None:
    slots = FairSlots(total=4, per_client=2)
    assert slots.try_acquire("a") and slots.try_acquire("a")
    assert not slots.try_acquire("a")  # its share is taken; two slots stay free
    assert slots.try_acquire("b") and slots.try_acquire("b")
    assert slots.free == 0 and not slots.try_acquire("c")


async def test_a_wait_at_its_own_cap_is_not_counted_as_crowded_out_one_behind_others_is() -> None:
    slots = FairSlots(total=2, per_client=1)
    assert slots.try_acquire("a")
    own_cap = asyncio.create_task(slots.acquire("a"))  # a waits behind its own share: its doing
    await asyncio.sleep(0)
    assert slots.try_acquire("b")
    crowded = asyncio.create_task(slots.acquire("c"))  # c holds nothing and finds no slot: crowded out
    await asyncio.sleep(0)
    assert (slots.crowded_out("a"), slots.crowded_out("b"), slots.crowded_out("c")) == (0, 0, 1)
    assert slots.describe()["crowded_out"] == {"c": 1}
    slots.release("b")
    await crowded
    for task in (own_cap,):
        task.cancel()
    await asyncio.gather(own_cap, return_exceptions=True)


async def test_freed_slots_go_to_waiting_clients_in_turn() -> None:
    slots = FairSlots(total=2, per_client=2)
    for _ in range(2):
        assert slots.try_acquire("a")
    order: list[str] = []

    async def wait(client_id: str) -> None:
        await slots.acquire(client_id)
        order.append(client_id)

    # Client a queues ten more before b and c queue one each: b and c still get the next two slots.
    waiters = [asyncio.create_task(wait("a")) for _ in range(10)]
    waiters += [asyncio.create_task(wait("b")), asyncio.create_task(wait("c"))]
    await asyncio.sleep(0)
    for _ in range(3):
        slots.release(order[-1] if order else "a")
        await asyncio.sleep(0)
    assert order == ["a", "b", "c"]  # one each, in turn, though a queued first and most
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_cancelled_waiter_leaves_no_slot_taken_nor_its_place_in_line() -> None:
    slots = FairSlots(total=1, per_client=1)
    assert slots.try_acquire("a")
    gone = asyncio.create_task(slots.acquire("b"))
    later = asyncio.create_task(slots.acquire("c"))
    await asyncio.sleep(0)
    gone.cancel()
    slots.release("a")  # handed over as b's cancel is under way: skipped, c gets it
    await asyncio.gather(gone, return_exceptions=True)
    await asyncio.wait_for(later, 1)
    assert slots.held("b") == 0 and slots.held("c") == 1 and slots.waiting("b") == 0
    slots.release("c")
    assert slots.free == 1


async def test_a_waiter_granted_as_it_is_cancelled_passes_the_slot_on() -> None:
    slots = FairSlots(total=1, per_client=1)
    assert slots.try_acquire("a")
    granted = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0)
    slots.release("a")  # b's future is granted ...
    granted.cancel()  # ... and its task cancelled before it runs again
    await asyncio.gather(granted, return_exceptions=True)
    assert slots.held("b") == 0 and slots.free == 1


async def test_both_send_slots_or_neither() -> None:
    node = FairSlots(total=1, per_client=1)
    send = SendSlots(node=node, http=FairSlots(4, 4), kafka=FairSlots(4, 4))
    http = row(QUIET, datetime.now(UTC), datetime.now(UTC), HttpCallback(url="https://quiet.test/"))
    assert node.try_acquire(NOISY)
    assert not send.try_take(http)
    assert send.http.held(QUIET) == 0  # its channel slot was not kept while the node's was refused
    taking = asyncio.create_task(send.take(http))
    await asyncio.sleep(0)
    assert send.http.held(QUIET) == 1 and not taking.done()  # its own channel slot, then it waits
    taking.cancel()
    await asyncio.gather(taking, return_exceptions=True)
    assert send.http.held(QUIET) == 0  # cancelled waiting for the node's: the channel slot goes back


# -- settings ---------------------------------------------------------------------------------------


def test_a_clients_node_share_is_a_quarter_unless_set() -> None:
    assert PollerSettings.from_env({}).client_max_inflight == 1024
    env = {"TICKD_NODE_MAX_INFLIGHT": "100", "TICKD_NODE_CLIENT_MAX_INFLIGHT": "30"}
    assert PollerSettings.from_env(env).client_max_inflight == 30
    assert PollerSettings.from_env({"TICKD_NODE_MAX_INFLIGHT": "2"}).client_max_inflight == 1
    assert PollerSettings.from_env({"TICKD_KAFKA_PER_CLIENT_LIMIT": "7"}).kafka.per_client_limit == 7


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"TICKD_NODE_MAX_INFLIGHT": "100", "TICKD_NODE_CLIENT_MAX_INFLIGHT": "101"}, "TICKD_NODE_CLIENT_MAX_INFLIGHT"),
        ({"TICKD_NODE_CLIENT_MAX_INFLIGHT": "-1"}, "TICKD_NODE_CLIENT_MAX_INFLIGHT"),
        ({"TICKD_NODE_CLIENT_MAX_INFLIGHT": "a lot"}, "TICKD_NODE_CLIENT_MAX_INFLIGHT"),
        ({"TICKD_KAFKA_PER_CLIENT_LIMIT": "0"}, "TICKD_KAFKA_PER_CLIENT_LIMIT"),
        ({"TICKD_KAFKA_PER_CLIENT_LIMIT": "1.5"}, "TICKD_KAFKA_PER_CLIENT_LIMIT"),
    ],
)
def test_bad_share_settings_are_refused_naming_the_variable(env: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as refused:
        PollerSettings.from_env(env)
    assert refused.value.field == field


# -- the throttle's policy reads ----------------------------------------------------------------------


async def test_events_asking_for_one_policy_at_once_share_one_read() -> None:
    """5,000 events of one policy due together sent 5,000 policy reads at once: every other tenant's
    store requests on the node queued behind them (the acceptance test's quiet tenant was 10 s late)."""
    store = memory_store(lambda: datetime.now(UTC))
    at = datetime.now(UTC)
    await store.put_policy(ThrottlePolicy(NOISY, "p", 1, 3600, at, at))
    reads: list[str] = []
    read = store.get_policy

    async def slow_read(client_id: str, name: str) -> ThrottlePolicy | None:
        reads.append(name)
        await asyncio.sleep(0.05)
        return await read(client_id, name)

    store.get_policy = slow_read  # type: ignore[method-assign]
    gate = ThrottleGate(store, "n1", lambda: datetime.now(UTC), Metrics(), poll_s=0.02)
    waiting = [asyncio.create_task(gate.acquire(NOISY, "p", f"e{i}", at)) for i in range(200)]
    first = await asyncio.wait_for(waiting[0], 2)
    assert first is not None and reads == ["p"]  # one read for all 200 (and the pump used it too)
    waiting[1].cancel()  # an asker cancelled while others wait: theirs go on
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await gate.close()
