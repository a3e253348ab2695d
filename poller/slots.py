"""Fair shares of a node's send capacity: slots per client, handed out in turn over the waiting clients.

A node bounds what it sends at once (``node_max_inflight``: a callback's timeout includes time queued in
the Kafka producer, so the node must not take on more than it can send within that timeout), and caps
each client's share of it (``node_client_max_inflight``), of its HTTP connections (``http.per_client_limit``)
and of its Kafka producer (``kafka.per_client_limit``).

A fire takes its slots only once it can go out: after its throttle token, its client's channel slot
(HTTP or Kafka) first, then the node's. Waiting for one of them never holds the other, so one tenant's
fires stuck behind a throttle policy or a slow endpoint hold nothing another tenant needs (issue 25: a
node slot taken first let one tenant's waiting fires hold every slot while another's due fires waited).

When a slot frees, it goes to the next client in turn that has a fire waiting and is under its cap: a
client with a thousand fires waiting gets a slot in its turn, like a client with one.

Within one instance, ``FireLanes`` bounds its fires in flight (``instance_max_inflight``) and runs them:
each in a task of its own, or through the instance's HTTP workers (as many as a client may have requests
out per node, so a slow endpoint holds back only this client's HTTP fires).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tickd.poller.settings import PollerSettings
from tickd.schema.model import HttpCallback, Schedule

T = TypeVar("T")


class FairSlots:
    """``total`` slots shared by clients, each client holding at most ``per_client`` of them.

    Invariant between calls: no client waits while a slot is free and it is under its cap (a freed slot
    is handed to a waiter at once), so ``try_acquire`` never jumps ahead of an eligible waiter."""

    def __init__(self, total: int, per_client: int) -> None:
        if total < 1 or per_client < 1:
            raise ValueError("slots: total and per_client must be >= 1")
        self.total = total
        self.per_client = per_client
        self._free = total
        self._held: dict[str, int] = {}
        # Clients with fires waiting, in turn order (a dict keeps insertion order): served from the front,
        # a served client goes to the back.
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        # Per client, the times it had to wait while under its own cap: every slot was held by others.
        # A tenant crowded out by another shows here; one waiting at its own cap does not.
        self._crowded_out: dict[str, int] = {}

    @property
    def free(self) -> int:
        return self._free

    def held(self, client_id: str) -> int:
        return self._held.get(client_id, 0)

    def waiting(self, client_id: str) -> int:
        return len(self._waiting.get(client_id, ()))

    def describe(self) -> dict[str, object]:
        """For the node's /status: what is free, and per client what it holds and how many wait."""
        waiting = {client: len(queue) for client, queue in self._waiting.items()}
        return {
            "total": self.total,
            "free": self._free,
            "held": dict(self._held),
            "waiting": waiting,
            "crowded_out": dict(self._crowded_out),
        }

    def crowded_out(self, client_id: str) -> int:
        """How often ``client_id`` waited while under its own cap, since the node started."""
        return self._crowded_out.get(client_id, 0)

    def try_acquire(self, client_id: str) -> bool:
        """Take a slot for ``client_id`` if one is free to it now, without waiting."""
        if self._free == 0 or self.held(client_id) >= self.per_client:
            return False
        self._take(client_id)
        return True

    async def acquire(self, client_id: str) -> None:
        """Wait for a slot, in turn with the other clients waiting. Cancel-safe: a slot granted to a
        cancelled waiter is given back."""
        if self.try_acquire(client_id):
            return
        if self.held(client_id) < self.per_client:
            self._crowded_out[client_id] = self._crowded_out.get(client_id, 0) + 1
        granted = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(client_id, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release(client_id)  # granted as it was cancelled: the slot goes on to the next
            else:
                self._forget(client_id, granted)
            raise

    def release(self, client_id: str) -> None:
        held = self.held(client_id)
        if held <= 0:
            raise RuntimeError(f"slot released for {client_id!r}, which holds none")
        if held == 1:
            del self._held[client_id]
        else:
            self._held[client_id] = held - 1
        self._free += 1
        self._grant()

    @asynccontextmanager
    async def hold(self, client_id: str) -> AsyncIterator[None]:
        await self.acquire(client_id)
        try:
            yield
        finally:
            self.release(client_id)

    def _take(self, client_id: str) -> None:
        self._free -= 1
        self._held[client_id] = self.held(client_id) + 1

    def _grant(self) -> None:
        """Hand free slots to waiting clients under their cap, one each in turn."""
        while self._free > 0:
            client = next((c for c in self._waiting if self.held(c) < self.per_client), None)
            if client is None:
                return
            queue = self._waiting.pop(client)
            granted = queue.popleft()
            if queue:
                self._waiting[client] = queue  # to the back of the turn order
            if granted.done():
                continue  # cancelled, its waiter not run yet: nothing to hand it
            self._take(client)
            granted.set_result(None)

    def _forget(self, client_id: str, granted: asyncio.Future[None]) -> None:
        queue = self._waiting.get(client_id)
        if queue is None:
            return
        try:
            queue.remove(granted)
        except ValueError:
            return
        if not queue:
            del self._waiting[client_id]


@dataclass(frozen=True)
class SendSlots:
    """The node's slots a fire takes to go out: its client's channel slot, then the node's."""

    node: FairSlots
    http: FairSlots
    kafka: FairSlots

    @classmethod
    def of(cls, settings: PollerSettings) -> SendSlots:
        return cls(
            node=FairSlots(settings.node_max_inflight, settings.client_max_inflight),
            http=FairSlots(settings.http.connection_limit, settings.http.per_client_limit),
            kafka=FairSlots(settings.node_max_inflight, settings.kafka.per_client_limit),
        )

    def describe(self) -> dict[str, object]:
        return {"node": self.node.describe(), "http": self.http.describe(), "kafka": self.kafka.describe()}

    def channel(self, row: Schedule) -> FairSlots:
        return self.http if isinstance(row.callback, HttpCallback) else self.kafka

    def try_take(self, row: Schedule) -> bool:
        """Both of ``row``'s slots if both are free to its client now; else neither."""
        channel = self.channel(row)
        if not channel.try_acquire(row.client_id):
            return False
        if self.node.try_acquire(row.client_id):
            return True
        channel.release(row.client_id)
        return False

    async def take(self, row: Schedule) -> None:
        """Wait for ``row``'s channel slot, then the node's (none held while waiting for the first)."""
        channel = self.channel(row)
        await channel.acquire(row.client_id)
        try:
            await self.node.acquire(row.client_id)
        except BaseException:
            channel.release(row.client_id)
            raise

    def give_back(self, row: Schedule) -> None:
        self.node.release(row.client_id)
        self.channel(row).release(row.client_id)


class FireLanes(Generic[T]):
    """An instance's fires in flight: at most ``limit`` at once, each run in a task of its own (``spawn``)
    or queued for a worker (``queue``), which runs queued fires one after another. A fire that raises
    (in its task or in a worker) is handed to ``crashed``; a worker goes on with the next."""

    def __init__(
        self,
        limit: int,
        workers: int,
        run: Callable[[T], Coroutine[Any, Any, None]],
        crashed: Callable[[BaseException], None],
    ) -> None:
        self._limit = limit
        self._worker_limit = workers
        self._run = run
        self._crashed = crashed
        self._inflight = 0
        self._room = asyncio.Event()  # set when a fire ends
        self._idle = asyncio.Event()  # set when no fire is in flight
        self._tasks: set[asyncio.Task[None]] = set()  # fires (or groups) with a task of their own
        self._queue: asyncio.Queue[T] = asyncio.Queue()
        self._workers: set[asyncio.Task[None]] = set()
        self._waiting_workers = 0  # workers waiting for a fire

    @property
    def count(self) -> int:
        """Fires taken and not ended yet (delivering, or waiting for their outcome write)."""
        return self._inflight

    async def room(self) -> int:
        """Wait until fewer than ``limit`` fires are in flight; how many more may start."""
        while self._inflight >= self._limit:
            await self._room.wait()
            self._room.clear()
        return self._limit - self._inflight

    def taken(self) -> None:
        """One more fire is in flight (until ``release``)."""
        self._inflight += 1

    def release(self, count: int) -> None:
        """``count`` fires ended."""
        self._inflight -= count
        self._room.set()
        if self._inflight == 0:
            self._idle.set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def queue(self, item: T) -> None:
        """Run ``item`` on a worker, starting one if every worker is busy and there is room for another."""
        self._queue.put_nowait(item)
        if self._queue.qsize() > self._waiting_workers and len(self._workers) < self._worker_limit:
            worker = asyncio.create_task(self._work())
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    async def wait(self, timeout_s: float) -> None:
        """Until the fires in flight have ended, or ``timeout_s`` passes."""
        if self._inflight == 0:
            return
        self._idle.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            pass

    def abandon(self) -> list[T]:
        """Cancel the fires still running, and drop (and release) those queued for a worker: returned."""
        for task in [*self._tasks, *self._workers]:
            task.cancel()
        dropped: list[T] = []
        while not self._queue.empty():
            dropped.append(self._queue.get_nowait())
            self.release(1)
        return dropped

    async def _work(self) -> None:
        """One worker: runs queued fires one after another until cancelled (``abandon``)."""
        while True:
            self._waiting_workers += 1
            try:
                item = await self._queue.get()
            finally:
                self._waiting_workers -= 1
            try:
                await self._run(item)
            except Exception as exc:
                self._crashed(exc)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task that raised is handed to ``crashed``; a cancelled one (a drain deadline) is not."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._crashed(exc)
