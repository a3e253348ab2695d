"""Throttle policies on the poller side: events of a throttled schedule wait for a token of their policy.

A policy allows ``max_in_flight`` events delivered and not yet released, across the whole cluster. The
tokens are the rows of one Cassandra partition, one per slot, each taken with ``INSERT ... IF NOT
EXISTS``: whatever the nodes do, a slot has at most one holder, so the limit holds globally by
construction.

On a node, the events waiting for one policy form one queue in due-time order; one pump per queue reads
the token partition (a single small read), tries the free slots for the queue's head events, and when
none is free waits ``poll_s`` or until this node frees one. Nobody else spins, so a thousand waiting
events cost one read per poll, not a thousand compare-and-sets.

A token is released by the consumer (``POST /v1/events/{event_id}/release`` deletes it if that event
still holds it), or, ``release_timeout_s`` after it was taken, by the node that took it (counted as an
automatic release), or, if that node died, by the row's TTL (the timeout plus a grace).
"""

from __future__ import annotations

import asyncio
import enum
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from tickd.poller.metrics import Metrics
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import ThrottlePolicy, Token
from tickd.schema.store import Store

log = structlog.get_logger("tickd.throttle")
Clock = Callable[[], datetime]
PolicyKey = tuple[str, str]  # (client_id, policy name)


@dataclass(order=True)
class _Waiter:
    due: datetime
    event_id: str
    future: asyncio.Future[Token | None] = field(compare=False)


@dataclass
class _Queue:
    waiters: list[_Waiter] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task[None] | None = None


class ThrottleGate:
    """Node-wide. ``acquire`` before delivering a throttled event; then ``delivered`` (the token stays
    held until released or timed out) or ``not_delivered`` (the token is given back at once)."""

    def __init__(
        self,
        store: Store,
        node_id: str,
        clock: Clock,
        metrics: Metrics,
        *,
        poll_s: float = 0.1,
        policy_refresh_s: float = 2.0,
        ttl_grace_s: int = 60,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._now = clock
        self._metrics = metrics
        self._poll_s = poll_s
        self._policy_refresh_s = policy_refresh_s
        self._ttl_grace_s = ttl_grace_s
        self._queues: dict[PolicyKey, _Queue] = {}
        self._policies: dict[PolicyKey, tuple[float, ThrottlePolicy | None]] = {}
        # The policy reads under way: events asking at once share one (5,000 events of one policy due
        # together sent 5,000 reads at once, and every other tenant's store requests on the node queued
        # behind them for seconds: issue 25).
        self._reading: dict[PolicyKey, asyncio.Task[ThrottlePolicy | None]] = {}
        self._timers: set[asyncio.Task[None]] = set()
        # Takes whose answer was lost (StoreUnavailable): the slot may be held for that event, by us.
        self._unknown: set[tuple[str, str, int, str]] = set()

    async def acquire(self, client_id: str, policy: str, event_id: str, due: datetime) -> Token | None:
        """Wait for a token (events of one policy get them in due-time order on this node). None: the
        policy no longer exists, so the event goes out unthrottled (and that is logged)."""
        key = (client_id, policy)
        if await self._policy_or_unknown(key) is None:
            log.warning("throttle_policy_missing", client_id=client_id, policy=policy, event_id=event_id)
            return None
        queue = self._queues.setdefault(key, _Queue())
        loop = asyncio.get_running_loop()
        waiter = _Waiter(due, event_id, loop.create_future())
        waited_from = loop.time()
        heapq.heappush(queue.waiters, waiter)
        queue.wake.set()
        if queue.pump is None or queue.pump.done():
            queue.pump = asyncio.create_task(self._pump(key, queue))
        try:
            token = await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled() and (token := waiter.future.result()):
                await asyncio.shield(self._release(token, "cancelled"))
            raise
        if token is not None:
            self._metrics.throttle_wait.labels(client_id).observe(loop.time() - waited_from)
        return token

    def delivered(self, token: Token, policy_timeout_s: float | None = None) -> None:
        """The event went out: its token stays held until the consumer releases it or it times out."""
        timeout = policy_timeout_s
        if timeout is None:
            cached = self._policies.get((token.client_id, token.policy))
            timeout = cached[1].release_timeout_s if cached and cached[1] else 0.0
        elapsed = (self._now() - token.taken_at).total_seconds()
        task = asyncio.create_task(self._time_out(token, max(0.0, timeout - elapsed)))
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def not_delivered(self, token: Token) -> None:
        """The event did not reach the consumer: its token is free again at once."""
        await self._release(token, "not_delivered")

    async def close(self) -> None:
        for queue in self._queues.values():
            if queue.pump is not None:
                queue.pump.cancel()
        for task in [*self._timers, *self._reading.values()]:
            task.cancel()
        await asyncio.gather(*self._timers, *self._reading.values(), return_exceptions=True)

    # -- internals ------------------------------------------------------------------------------------

    async def _policy_or_unknown(self, key: PolicyKey) -> ThrottlePolicy | _Unknown | None:
        """The policy, None if it is gone, or UNKNOWN while storage does not answer: then the event
        queues anyway and the pump, which retries its reads, decides."""
        try:
            return await self._policy(key)
        except StoreUnavailable as exc:
            self._metrics.store_error("throttle_policy")
            log.warning("throttle_store_unavailable", client_id=key[0], policy=key[1], error=str(exc))
            return UNKNOWN

    async def _policy(self, key: PolicyKey) -> ThrottlePolicy | None:
        now = asyncio.get_running_loop().time()
        cached = self._policies.get(key)
        if cached is not None and now - cached[0] < self._policy_refresh_s:
            return cached[1]
        reading = self._reading.get(key)
        if reading is None:
            # A task of its own, so a cancelled asker does not cancel the others' read (tasks do not
            # inherit a delivery's store guard: schema.guard).
            reading = asyncio.create_task(self._read_policy(key, now))
            self._reading[key] = reading
            reading.add_done_callback(lambda done: self._read_done(key, done))
        return await asyncio.shield(reading)

    async def _read_policy(self, key: PolicyKey, now: float) -> ThrottlePolicy | None:
        policy = await self._store.get_policy(*key)
        self._policies[key] = (now, policy)
        return policy

    def _read_done(self, key: PolicyKey, done: asyncio.Task[ThrottlePolicy | None]) -> None:
        if self._reading.get(key) is done:
            del self._reading[key]
        if not done.cancelled():
            done.exception()  # retrieved here too: every asker may have been cancelled meanwhile

    async def _pump(self, key: PolicyKey, queue: _Queue) -> None:
        while True:
            _drop_abandoned(queue)
            if not queue.waiters:
                return
            queue.wake.clear()
            try:
                granted = await self._grant(key, queue)
            except StoreUnavailable as exc:
                self._metrics.store_error("throttle_tokens")
                log.warning("throttle_store_unavailable", client_id=key[0], policy=key[1], error=str(exc))
                granted = 0
            if queue.waiters and not granted:
                try:
                    async with asyncio.timeout(self._poll_s):
                        await queue.wake.wait()
                except TimeoutError:
                    pass

    async def _grant(self, key: PolicyKey, queue: _Queue) -> int:
        """Hand the free slots to the head waiters; how many were granted."""
        policy = await self._policy(key)
        if policy is None:
            for waiter in queue.waiters:
                if not waiter.future.done():
                    waiter.future.set_result(None)
            queue.waiters.clear()
            return 0
        tokens = await self._store.tokens(*key)
        held = {t.slot for t in tokens}
        # A lost take not in the partition did not apply (or was freed): forget it. (A stale read may
        # forget one that did; its row's TTL frees that slot.)
        shown = {(t.client_id, t.policy, t.slot, t.event_id) for t in tokens}
        self._unknown -= {u for u in self._unknown if u[:2] == key and u not in shown}
        granted = self._hand_back_own(queue, tokens)
        for slot in range(policy.max_in_flight):
            _drop_abandoned(queue)
            if not queue.waiters:
                break
            if slot in held:
                continue
            head = queue.waiters[0]
            token = Token(key[0], key[1], slot, head.event_id, self._node_id, self._now())
            try:
                taken = await self._store.take_token(token, policy.release_timeout_s + self._ttl_grace_s)
            except StoreUnavailable:
                self._unknown.add((key[0], key[1], slot, head.event_id))
                raise
            if taken:
                # Not heappop: while the take was in flight an earlier-due waiter may have become the head,
                # and popping it would leave it waiting forever (found by the simulation).
                _remove(queue, head)
                if head.future.done():  # its fire was cancelled meanwhile
                    await self._release(token, "cancelled")
                    continue
                head.future.set_result(token)
                granted += 1
        return granted

    def _hand_back_own(self, queue: _Queue, tokens: list[Token]) -> int:
        """A token taken for a waiting event whose answer was lost (the take applied, the caller was told
        it failed) holds a slot under that event's id: it is that event's, not a stranger's. Only such a
        take's token: a read answered late can still show a token this node took and released since,
        and handing that out would send an event holding nothing (found by the simulation, seed 7173)."""
        mine = {
            t.event_id: t
            for t in tokens
            if t.holder == self._node_id and (t.client_id, t.policy, t.slot, t.event_id) in self._unknown
        }
        granted = 0
        for waiter in list(queue.waiters):
            token = mine.get(waiter.event_id)
            if token is not None and not waiter.future.done():
                self._unknown.discard((token.client_id, token.policy, token.slot, token.event_id))
                waiter.future.set_result(token)
                granted += 1
        if granted:
            queue.waiters = [w for w in queue.waiters if not w.future.done()]
            heapq.heapify(queue.waiters)
        return granted

    async def _time_out(self, token: Token, after_s: float) -> None:
        await asyncio.sleep(after_s)
        if await self._release(token, "timeout"):
            self._metrics.throttle_auto_released.labels(token.client_id, token.policy).inc()
            log.info(
                "throttle_auto_released",
                client_id=token.client_id,
                policy=token.policy,
                event_id=token.event_id,
                slot=token.slot,
                taken_at=token.taken_at.isoformat(),
            )

    async def _release(self, token: Token, why: str) -> bool:
        for wait_s in (0.1, 0.5, 2.0, None):
            try:
                released = await self._store.release_token(token.client_id, token.policy, token.slot, token.event_id)
            except StoreUnavailable as exc:
                self._metrics.store_error("throttle_release")
                log.warning("throttle_release_failed", event_id=token.event_id, why=why, error=str(exc))
                if wait_s is None:
                    return False  # the row's TTL frees the slot
                await asyncio.sleep(wait_s)
                continue
            queue = self._queues.get((token.client_id, token.policy))
            if queue is not None:
                queue.wake.set()
            return released
        return False


class _Unknown(enum.Enum):
    UNKNOWN = "unknown"


UNKNOWN = _Unknown.UNKNOWN


def _remove(queue: _Queue, waiter: _Waiter) -> None:
    queue.waiters.remove(waiter)
    heapq.heapify(queue.waiters)


def _drop_abandoned(queue: _Queue) -> None:
    while queue.waiters and queue.waiters[0].future.done():
        heapq.heappop(queue.waiters)
