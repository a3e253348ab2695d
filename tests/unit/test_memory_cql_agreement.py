"""Until the twin is deleted (issue 26): the hand-written ``MemoryStore`` and the Cassandra adapter on a
memory connection (``MemoryCassandraStore``) answer every call of a seeded mix of the API's and the
pollers' operations identically, and send the same requests, with the same random faults injected at
the same fault points. A difference is a bug in one of them (or a twin that no longer mirrors the
adapter): the step it shows first says which call."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickd.schema.errors import BatchNotLogged, StoreUnavailable, TickdError
from tickd.schema.memory import MemoryStore, memory_cassandra_store
from tickd.schema.model import Client, FireOutcome, HttpCallback, InstanceKey, Location, Schedule, Status
from tickd.schema.settings import StoreSettings

START = datetime(2026, 11, 23, 12, 0, 7, 250_000, tzinfo=UTC)
CLIENT = "c1"
POLLERS = 3


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class RandomFaults:
    """Refuses ``rate`` of the requests before or after they apply, and some batchlogs; records every point."""

    def __init__(self, seed: int, rate: float) -> None:
        self.random = random.Random(seed)
        self.rate = rate
        self.points: list[str] = []

    async def before(self, op: str) -> None:
        self._maybe(op, "before", StoreUnavailable)

    async def after(self, op: str) -> None:
        self._maybe(op, "after", StoreUnavailable)

    async def batchlog(self, op: str) -> None:
        self._maybe(op, "batchlog", BatchNotLogged, 5)

    def _maybe(self, op: str, point: str, error: type[StoreUnavailable], scale: float = 1) -> None:
        self.points.append(f"{point} {op}")
        if self.random.random() < self.rate * scale:
            raise error(f"injected {point} {op}")


class Mix:
    """One seeded run of the mix on one store, logging each call's answer (or the error type it raised)."""

    def __init__(self, store: Any, clock: Clock, seed: int) -> None:
        self.store, self.clock, self.random = store, clock, random.Random(seed)
        self.log: list[tuple[str, Any]] = []
        self.live: list[Schedule] = []

    async def call(self, name: str, answer: Awaitable[Any]) -> Any:
        try:
            result = await answer
        except TickdError as exc:
            result = type(exc).__name__
        self.log.append((name, result))
        return result

    async def run(self, rounds: int) -> list[tuple[str, Any]]:
        await self.call("create_client", self.store.create_client(Client(CLIENT, POLLERS, True, "h", START, START)))
        for _ in range(rounds):
            await self.creates()
            await self.changes()
            await self.pollers()
            self.clock.now += timedelta(seconds=self.random.randint(1, 40))
        return self.log

    async def creates(self) -> None:
        now, made = self.clock.now, []
        for _ in range(self.random.randint(1, 5)):
            due = (now + timedelta(seconds=self.random.randint(-5, 300))).replace(
                microsecond=self.random.randrange(1000) * 1000
            )
            sid = uuid.UUID(int=self.random.getrandbits(128), version=4)
            loc = Location(self.random.randrange(POLLERS), due)
            made.append(Schedule(CLIENT, sid, loc, due, b"{}", HttpCallback(url="http://127.0.0.1:9/cb"), now))
        await self.call("create_schedules", self.store.create_schedules(made, now))
        self.live += made

    async def changes(self) -> None:
        now = self.clock.now
        for s in self.random.sample(self.live, min(5, len(self.live))):
            got = await self.call("get_schedule", self.store.get_schedule(CLIENT, s.schedule_id))
            if not isinstance(got, Schedule) or got.status is not Status.SCHEDULED:
                continue
            change = self.random.choice(["cancel", "pause", "move", "retry", "none"])
            if change == "cancel":
                await self.call("cancel", self.store.cancel_schedule(got, now))
            elif change == "pause":
                await self.call("pause", self.store.pause_schedule(got, now))
            elif change == "move":
                due = got.location.due_at + timedelta(seconds=self.random.randint(1, 120))
                moved = dataclasses.replace(got, location=Location(self.random.randrange(POLLERS), due), fire_at=due)
                await self.call("replace", self.store.replace_schedule(got, moved, now))
            elif change == "retry":
                later = got.location.due_at + timedelta(seconds=30)
                await self.call("requeue", self.store.requeue_schedule(got, later, got.attempts + 1, "HTTP 503", now))

    async def pollers(self) -> None:
        now = self.clock.now
        minute = now.replace(second=0, microsecond=0)
        await self.call("hot_marks", self.store.hot_marks(minute))
        for poller in range(POLLERS):
            instance = InstanceKey(CLIENT, poller)
            seen = await self.call("get_claim", self.store.get_claim(instance))
            await self.call("claim", self.store.claim(instance, "n1", None if isinstance(seen, str) else seen, now))
            for m in (minute, minute + timedelta(minutes=1)):
                rows = await self.call("read_minute", self.read(instance, m))
                await self.call("read_minute_stamps", self.stamps(instance, m))
                rows = rows if isinstance(rows, list) else []  # refused: the error's name was logged
                due = [r for r in rows if r.status is Status.SCHEDULED and r.location.due_at <= now]
                done = self.random.choice([Status.SUCCEEDED, Status.FAILED])
                outcomes = [FireOutcome(CLIENT, r.schedule_id, r.location, done, 1, now) for r in due]
                if outcomes:
                    await self.call("record_outcomes", self.store.record_outcomes(outcomes))
            await self.call("get_horizon", self.store.get_horizon(instance))

    async def read(self, instance: InstanceKey, minute: datetime) -> list[Schedule]:
        return [s async for page in self.store.read_minute(instance, minute) for s in page]

    async def stamps(self, instance: InstanceKey, minute: datetime) -> list[Any]:
        return [s async for page in self.store.read_minute_stamps(instance, minute) for s in page]


async def _run(kind: str, seed: int, rate: float) -> tuple[list[tuple[str, Any]], list[str]]:
    clock, faults = Clock(), RandomFaults(seed, rate)
    settings = StoreSettings(page_size=4)  # small pages: reads page as they do under load
    store: Any
    if kind == "twin":
        store = MemoryStore.from_settings(settings, clock, faults=faults)
    else:
        store = memory_cassandra_store(clock, settings, faults=faults)
    log = await Mix(store, clock, seed).run(rounds=25)
    return log, faults.points


@pytest.mark.parametrize(("seed", "rate"), [(1, 0.0), (2, 0.0), (3, 0.04), (4, 0.04), (5, 0.08)])
async def test_the_twin_and_the_adapter_in_memory_answer_alike(seed: int, rate: float) -> None:
    twin, twin_points = await _run("twin", seed, rate)
    cql, cql_points = await _run("cql", seed, rate)
    for step, (expected, got) in enumerate(zip(twin, cql, strict=True)):
        assert got == expected, f"step {step}"
    assert cql_points == twin_points
