"""A whole tickd cluster in one process on virtual time: poller nodes, the API's schedule operations,
subscribers, and the faults between them, all driven by one seed.

Each node runs the real ``poller.node.Node`` over one shared in-memory store. What differs from production is
only what sits at the edges: storage is the production Cassandra adapter (``CassandraStore``,
``schema/cassandra/*``) on a ``MemoryConnection`` executing ``queries.cql`` in memory, behind a fault
plan; callbacks go to simulated subscribers, and time is the virtual loop's. Processes are "actors" of
that loop, so a node can be paused (SIGSTOP), killed (kill -9) or stopped cleanly (SIGTERM) at any virtual moment."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from tests.simulation import peek
from tests.simulation.oracle import Delivery, Oracle
from tests.simulation.vloop import ACTOR, VirtualClock, VirtualLoop
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.delivery import DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import BatchNotLogged, StoreUnavailable
from tickd.schema.memory import MemoryConnection, Tables, memory_store
from tickd.schema.memory.engine import micros
from tickd.schema.model import Checkpoint, Claim, HttpCallback, InstanceKey, Schedule, Status
from tickd.schema.settings import StoreSettings

T = TypeVar("T")
ORACLE = "oracle"  # the checker's own reads: never faulted
API = "api"


# How long a node may take to stop after SIGTERM: each instance's drain (shutdown_deadline_s, 5 s here)
# and release, the statistics flush (2 s) and its store requests, with room for slow ones (8 s each).
STOP_LIMIT_S = 120.0


@dataclass(frozen=True)
class SimConfig:
    seed: int
    nodes: int = 3
    clients: int = 2
    run_s: float = 180.0  # the workload and its faults
    settle_s: float = 240.0  # then no faults: everything due must be delivered by the end
    settle_extra_s: float = 600.0  # at most this much longer while a throttled backlog still shrinks
    faults: bool = True
    max_skew_s: float = 0.5  # clocks of nodes and the API differ by at most this much from true time
    store_fail_p: float = 0.02  # per store request, while faults are on
    store_unknown_p: float = 0.01  # applied, but reported failed
    store_slow_p: float = 0.01  # answers after up to store_slow_s (then may fail)
    store_slow_s: float = 8.0
    # A Cassandra node crashed and not yet convicted: on three nodes every logged batch over several
    # partitions fails to write its batchlog (nothing applied). Windows of it, from a stream of their own.
    replica_down_every_s: float = 60.0  # mean time between such windows, while faults are on
    replica_down_s: tuple[float, float] = (3.0, 40.0)
    # Per fire, while faults are on: its endpoint turns hostile for good (``Hostile``), from a stream of its own.
    hostile_p: float = 0.02


@dataclass
class Faults:
    """The fault plan at the store port (``schema.memory.StoreFaults``): per request, by seed."""

    rng: random.Random
    config: SimConfig
    on: bool = True
    outage: bool = False  # every Cassandra host down
    cut_off: set[str] = field(default_factory=set)  # actors whose link to Cassandra is cut
    # The statistics writes (poller/stats.py) draw their faults from a stream of their own, so adding or
    # changing them leaves every other request's faults, and so the regression seeds' runs, as they were.
    side_rng: random.Random = field(default_factory=random.Random)
    replica_down: bool = False  # a node crashed, not yet convicted: logged batches cannot be logged

    def _rng(self, op: str) -> random.Random:
        return self.side_rng if op == "write_stats" else self.rng

    async def before(self, op: str) -> None:
        actor = ACTOR.get()
        if actor == ORACLE:
            return
        if self.outage or actor in self.cut_off:
            raise StoreUnavailable(f"{op}: NoHostAvailable (simulated)")
        if not self.on:
            return
        rng = self._rng(op)
        roll = rng.random()
        if roll < self.config.store_slow_p:
            await asyncio.sleep(rng.uniform(0.1, self.config.store_slow_s))
            if rng.random() < 0.5:
                raise StoreUnavailable(f"{op}: OperationTimedOut (simulated)")
        elif roll < self.config.store_slow_p + self.config.store_fail_p:
            raise StoreUnavailable(f"{op}: Unavailable (simulated)")

    async def batchlog(self, op: str) -> None:
        if self.replica_down and self.on and ACTOR.get() != ORACLE:
            raise BatchNotLogged(f"{op}: WriteTimeout (BATCH_LOG, simulated)")

    async def after(self, op: str) -> None:
        if ACTOR.get() == ORACLE or not self.on:
            return
        if self._rng(op).random() < self.config.store_unknown_p:
            raise StoreUnavailable(f"{op}: WriteTimeout after applying (simulated)")


@dataclass
class Endpoint:
    """How one client's callback endpoint behaves right now."""

    fail_p: float = 0.0  # 503
    throttle_p: float = 0.0  # 429 with Retry-After
    hang_p: float = 0.0  # no answer within the timeout (the subscriber may have got it)
    reject_p: float = 0.0  # 400: not retriable, straight to the dead letters


# What a hostile endpoint sends back as Retry-After: past any date tickd can hold, not a number, negative.
_HOSTILE_WAITS = (1e13, 1e300, float("inf"), float("nan"), -5.0, 4e9)


class Hostile:
    """Fires whose endpoint answers with hostility until they end: each attempt either gets a 503 whose
    Retry-After is absurd (``_HOSTILE_WAITS``, HTTP fires) or makes the dispatcher raise an error tickd did
    not foresee. Such a fire must still end as any failing fire does, dead-lettered after ``max_attempts``
    (the last attempt is answered with a plain 503 so the subscriber records the give-up); a crash of the
    instance, which fires it again at the same attempt, would loop until the run's end. The draws come from
    a stream of their own, so every other fault of a seed stays where it was."""

    def __init__(self, seed: int, p: float) -> None:
        self._rng = random.Random(f"hostile-{seed}")
        self._p = p
        self.kinds: dict[str, float | None] = {}  # delivery key -> Retry-After to answer (None: raise)

    def kind(self, schedule: Schedule, on: bool) -> tuple[bool, float | None]:
        key = schedule.event_id or schedule.fire_id
        if key not in self.kinds:
            if not on or self._rng.random() >= self._p:
                return False, None
            http = isinstance(schedule.callback, HttpCallback)
            self.kinds[key] = self._rng.choice(_HOSTILE_WAITS) if http and self._rng.random() < 0.7 else None
        return True, self.kinds[key]

    def answer(self, schedule: Schedule, attempt: int, wait: float | None, max_attempts: int) -> DeliveryResult:
        if attempt >= max_attempts:
            return DeliveryResult.failed(attempt, "HTTP 503", retriable=True, status_code=503)
        if wait is None:
            raise RuntimeError(f"hostile: the dispatcher broke on {schedule.fire_id} (simulated)")
        return DeliveryResult.failed(attempt, "HTTP 503", retriable=True, retry_after_s=wait, status_code=503)


class Subscriber:
    """One node's outbound side (the ``CallbackRouter`` role): records each delivery, answers per the
    client's endpoint, and checks ownership at the moment the fire leaves the node."""

    def __init__(self, world: World, actor: str) -> None:
        self._world = world
        self._actor = actor
        self.node: Node | None = None

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        world = self._world
        epoch = self._epoch(schedule.instance)
        world.check_owner(self._actor, schedule.instance, epoch)
        for check in world.delivery_checks:
            check(schedule)
        endpoint = world.endpoints.get(schedule.client_id, Endpoint())
        rng = world.rng
        hostile, wait = world.hostile.kind(schedule, world.faults.on)
        roll = rng.random()  # drawn either way, so the seed's other answers stay where they were
        received, result = True, DeliveryResult.delivered(attempt, 200)
        if hostile:
            try:
                received, result = False, world.hostile.answer(schedule, attempt, wait, world.retry.max_attempts)
            except RuntimeError:  # an attempt that failed, maybe received: the oracle sees it tried (seed 400029)
                self._record(schedule, attempt, epoch, ok=False)
                raise
        elif roll < endpoint.reject_p:
            result = DeliveryResult.failed(attempt, "HTTP 400", retriable=False, status_code=400)
        elif roll < endpoint.reject_p + endpoint.fail_p:
            received, result = False, DeliveryResult.failed(attempt, "HTTP 503", retriable=True, status_code=503)
        elif roll < endpoint.reject_p + endpoint.fail_p + endpoint.throttle_p:
            wait = rng.uniform(0.5, 5.0)
            received = False
            result = DeliveryResult.failed(attempt, "HTTP 429", retriable=True, retry_after_s=wait, status_code=429)
        elif roll < endpoint.reject_p + endpoint.fail_p + endpoint.throttle_p + endpoint.hang_p:
            await asyncio.sleep(5.0)
            result = DeliveryResult.failed(attempt, "timeout", retriable=True, maybe_received=True)
        if not result.ok and result.retriable and attempt >= world.retry.max_attempts:
            result = replace(result, retriable=False)  # the HTTP dispatcher's give-up rule
        ok = result.ok
        self._record(schedule, attempt, epoch, ok)
        key = schedule.event_id or schedule.fire_id
        if not result.ok and not result.retriable:
            world.oracle.dead_letters.add(key)
        if result.ok or not result.retriable:
            world.oracle.completed_us.setdefault(key, micros(world.true_clock()))
        if result.ok:
            world.oracle.delivered_us.setdefault(key, micros(world.true_clock()))
        if ok and received:
            world.on_received(schedule)
        return result

    def _record(self, schedule: Schedule, attempt: int, epoch: int, ok: bool) -> None:
        world = self._world
        if ok and schedule.debounce is not None:  # which version's payload went out (oracle: the latest)
            world.oracle.payloads.setdefault(schedule.fire_id, set()).add(schedule.payload)
        world.oracle.deliveries.append(
            Delivery(
                world.loop.time(),
                self._actor,
                schedule.instance,
                epoch,
                schedule.fire_id,
                schedule.event_id,
                schedule.public_id,
                attempt,
                ok,
            )
        )

    async def deliver_many(self, schedules: Sequence[Schedule], fired_at: datetime) -> list[DeliveryResult]:
        """A pass's group of fires (``CallbackRouter.deliver_many``): each answered as ``deliver`` would."""
        return list(await asyncio.gather(*(self.deliver(s, s.attempts + 1, fired_at) for s in schedules)))

    def _epoch(self, instance: InstanceKey) -> int:
        running = self.node.running.get(instance) if self.node is not None else None
        return running.claim.epoch if running is not None else -1

    async def close(self) -> None:
        return None


@dataclass
class NodeHandle:
    name: str  # the node id
    incarnation: int
    node: Node
    stop: asyncio.Event
    task: asyncio.Task[None]

    @property
    def actor(self) -> str:
        return f"{self.name}#{self.incarnation}"


class World:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.loop = _running_loop()
        start = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=self.rng.randrange(0, 86400))
        self.start = start
        self.true_clock = VirtualClock(self.loop, start)
        self.retry = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=10.0, inline_budget_s=0.0)
        self.faults = Faults(random.Random(self.rng.getrandbits(64)), config, on=config.faults)
        self.faults.side_rng.seed(f"stats-{config.seed}")
        self.hostile = Hostile(config.seed, config.hostile_p)
        page_size = self.rng.choice([3, 7, 50, 5000])
        self.store_settings = StoreSettings(keyspace="sim", page_size=page_size)
        # How nodes stream minutes in: drawn apart from ``rng``, so that earlier seeds keep their runs.
        knobs = random.Random(f"stream-{config.seed}")
        self.read_slice_s = knobs.choice([0.5, 3.0, 10.0, 60.0])
        self.plan_max_rows = knobs.choice([2, 20, 5000])
        self.sweep_spread_s = random.Random(f"sweep-{config.seed}").choice([0.0, 5.0, 15.0, 30.0])
        self.tables = Tables(self.true_clock)
        self.memory = memory_store(MemoryConnection(self.tables, self.faults), self.store_settings)
        self.store = CheckedStore(self.memory, self)
        self.oracle = Oracle(guard_s=2.0, start=start)
        self.endpoints: dict[str, Endpoint] = {}
        self.nodes: dict[str, NodeHandle] = {}
        self._incarnations: dict[str, int] = {}
        self._received: list[Callable[[Schedule], None]] = []
        # Checks run at the moment a fire leaves a node (the workload adds the throttle check).
        self.delivery_checks: list[Callable[[Schedule], None]] = []

    # -- nodes ----------------------------------------------------------------------------------------

    def poller_settings(self, node_id: str) -> PollerSettings:
        return PollerSettings(
            node_id=node_id,
            metrics_port=0,
            drain_grace_s=20.0,
            shutdown_deadline_s=5.0,
            store=self.store_settings,
            retry=self.retry,
            read_slice_s=self.read_slice_s,
            plan_max_rows=self.plan_max_rows,
            sweep_spread_s=self.sweep_spread_s,
        )

    def start_node(self, name: str) -> NodeHandle:
        incarnation = self._incarnations.get(name, 0) + 1
        self._incarnations[name] = incarnation
        actor = f"{name}#{incarnation}"
        skew = self.rng.uniform(-self.config.max_skew_s, self.config.max_skew_s)
        self.oracle.skews[actor] = skew
        subscriber = Subscriber(self, actor)
        node = Node(
            self.poller_settings(name),
            self.store,
            subscriber,  # type: ignore[arg-type]
            Metrics(),
            VirtualClock(self.loop, self.start, skew),
            rng=random.Random(self.rng.getrandbits(64)),
        )
        subscriber.node = node
        stop = asyncio.Event()
        task = self.loop.create_task(_as_actor(actor, node.run(stop)))
        task.add_done_callback(self._node_exited)
        handle = NodeHandle(name, incarnation, node, stop, task)
        self.nodes[name] = handle
        return handle

    def _node_exited(self, task: asyncio.Task[None]) -> None:
        """A node process never exits by itself: whatever the store or the network did, it waits it out."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.oracle.saw(f"t={self.loop.time():.2f} a node exited: {exc!r}")

    def kill(self, name: str) -> None:
        """kill -9: the process stops between two instructions; nothing of it runs again."""
        handle = self.nodes.pop(name)
        self.loop.kill(handle.actor)

    def pause(self, name: str) -> None:
        self.loop.pause(self.nodes[name].actor)

    def resume(self, name: str) -> None:
        self.loop.resume(self.nodes[name].actor)

    async def terminate(self, name: str) -> None:
        """SIGTERM: the node hands its instances over and exits, within its deadlines. One that does not
        (seed 56448: an instance that swallowed its own cancel) is a violation, then killed."""
        handle = self.nodes.pop(name)
        self.loop.resume(handle.actor)
        handle.stop.set()
        try:
            async with asyncio.timeout(STOP_LIMIT_S):
                await asyncio.gather(handle.task, return_exceptions=True)
        except TimeoutError:
            self.oracle.saw(
                f"t={self.loop.time():.2f} {handle.actor} did not stop within {STOP_LIMIT_S:.0f} s of SIGTERM"
            )
            self.loop.kill(handle.actor)

    # -- checks made while running ----------------------------------------------------------------------

    async def oracle_call(self, call: Callable[[], Awaitable[T]]) -> T:
        token = ACTOR.set(ORACLE)
        try:
            return await call()
        finally:
            ACTOR.reset(token)

    def check_owner(self, actor: str, instance: InstanceKey, epoch: int) -> None:
        """At the moment a fire leaves a node, that node holds the instance's claim at its epoch."""
        claim = peek.claim(self.tables, instance)
        name = actor.split("#")[0]
        if claim is None or claim.owner != name or claim.epoch != epoch:
            self.oracle.saw(
                f"t={self.loop.time():.2f} {actor} fired {instance} at epoch {epoch} while the claim is {claim}"
            )

    def on_received(self, schedule: Schedule) -> None:
        for hook in self._received:
            hook(schedule)

    def subscribe(self, hook: Callable[[Schedule], None]) -> None:
        self._received.append(hook)

    def left_behind(self, row: Schedule) -> bool:
        """Whether a row still scheduled behind a checkpoint is a loss. It is not when its fire (event)
        was delivered and never given up on, or when every write to it was sent before its fire was
        delivered or given up on by someone: a stale owner's
        request (a durable retry of an event, which no compare-and-set fences) sent before a freeze and
        applied after the next owner had completed the fire and closed the minute (simulation seed
        12016). Such a row is a copy of a finished fire; the only lossless fix would be a fencing
        check inside the store on every write."""
        key = row.event_id or row.fire_id
        completed = self.oracle.completed_us.get(key)
        if completed is None and row.event_id is None and row.repeat is not None:
            # An occurrence its missed-fire policy gave up is finished when its skip was recorded (seed
            # 540330 at the branch timed-pause: a stale owner's retry row of it landed after the next
            # owner had skipped it, past its start deadline, and closed the minute).
            completed = peek.skipped_at(self.tables, row.client_id, row.public_id, row.fire_at)
        if completed is None:
            return True
        written_us = peek.written_us(self.tables, "schedules", _row_key(row))
        if written_us is None:
            return True
        delivered = self.oracle.delivered_us.get(key)
        copy = delivered is not None and key not in self.oracle.dead_letters
        if written_us >= completed and not copy:
            return True
        # Written before its fire was completed; or its fire was delivered and never given up on, so no
        # row of it is owed any more: a node that delivered it and crashed before recording it sent it again
        # after a restart, failed, and its retry row, sent just before the node froze, landed after the
        # next owner had delivered and recorded the fire and closed the minute (simulation seed 631861).
        self.oracle.stale_rows.add(str(row.schedule_id))
        return False

    async def check_checkpoint(self, checkpoint: Checkpoint | None, instance: InstanceKey) -> None:
        """No checkpoint passes a row whose outcome is not stored (but see ``left_behind``)."""
        if checkpoint is None:
            return
        rows = await self.oracle_call(lambda: _rows(self.memory, instance, checkpoint.minute))
        for row in rows:
            if row.status is Status.SCHEDULED and (row.event_id or row.fire_id) not in self.oracle.completed_us:
                # Its fire is not finished yet: the row may be a stale owner's copy of a fire another row
                # of it is still retrying (seed 76093). It stays behind this checkpoint, so the sweep at
                # the end of the run (run._sweep_checkpoints) judges it, once every fire has settled.
                continue
            if row.status is Status.SCHEDULED and self.left_behind(row):
                self.oracle.saw(
                    f"t={self.loop.time():.2f} checkpoint {checkpoint.minute} of {instance} (epoch "
                    f"{checkpoint.epoch}) passes {row.schedule_id} due {row.location.due_at}, still scheduled"
                )


class CheckedStore:
    """The store as the nodes see it: the memory store, plus a check after every checkpoint write."""

    def __init__(self, inner: CassandraStore, world: World) -> None:
        self._inner = inner
        self._world = world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def add_events(self, rows: Sequence[Schedule], now: datetime) -> None:
        """A batch trigger's fire expands: the oracle notes when it first did (before the write, which
        may fail and be sent again)."""
        expanded = self._world.oracle.expanded_at
        at = self._world.loop.time()
        for row in rows:
            event = row.options.event if row.options is not None else None
            if event is not None:
                expanded.setdefault(timing.fire_id(event.parent, row.fire_at), at)
        await self._inner.add_events(rows, now)

    async def write_checkpoint(self, claim: Claim, minute: datetime) -> None:
        try:
            await self._inner.write_checkpoint(claim, minute)
        finally:
            world = self._world
            current = await world.oracle_call(lambda: self._inner.get_checkpoint(claim.instance))
            await world.check_checkpoint(current, claim.instance)


def _row_key(row: Schedule) -> dict[str, Any]:
    loc = row.location
    key = {"client_id": row.client_id, "poller_id": loc.poller_id, "minute": loc.minute, "due_at": loc.due_at}
    return key | {"schedule_id": row.schedule_id}


async def _rows(store: CassandraStore, instance: InstanceKey, minute: datetime) -> list[Schedule]:
    return [row async for page in store.read_minute(instance, minute) for row in page]


async def _as_actor(actor: str, work: Awaitable[Any]) -> None:
    ACTOR.set(actor)
    await work


def _running_loop() -> VirtualLoop:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, VirtualLoop):
        raise RuntimeError("the simulation runs on tests.simulation.vloop.VirtualLoop")
    return loop
