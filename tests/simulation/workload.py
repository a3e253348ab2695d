"""The seeded workload: what clients and admins ask of the API, and what goes wrong meanwhile.

The API's schedule operations are made here the way its handlers make them (the same placement, due
time, mutation guard and store calls); each one that returns is recorded as a promise in the oracle,
each that raises is "not acknowledged" and leaves its schedule uncertain.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

import msgspec
from aiohttp import web

from tests.simulation import peek
from tests.simulation.oracle import Promise
from tests.simulation.vloop import ACTOR, VirtualClock
from tests.simulation.world import API, Endpoint, World
from tickd.schema import backfills, events, timing
from tickd.schema import calendars as cal
from tickd.schema.errors import Conflict, NotFound, StoreUnavailable
from tickd.schema.missed import Missed
from tickd.schema.model import (
    BulkFilter,
    BulkJob,
    BulkState,
    Client,
    HttpCallback,
    KafkaCallback,
    Location,
    Options,
    PauseNote,
    Repeat,
    Schedule,
    Status,
    ThrottlePolicy,
)
from tickd.service import actions, debounce
from tickd.service import keys as api_keys
from tickd.service.bulk import BulkRunner
from tickd.service.confirm import confirmed
from tickd.service.settings import ApiSettings
from tickd.service.validation import DebounceFields

T = TypeVar("T")
_CALLBACK = HttpCallback(url="http://subscriber.invalid/cb")
# Half the schedules call back over Kafka (by their id, so no random draw changes): a node fires those of
# a pass as one group (``FirePipeline._deliver_group``), the others each on its own.
_KAFKA = KafkaCallback(topic="sim-callbacks")
_GUARD_S = 2.0


class Api:
    """The API replica: its own (skewed) clock, its store calls made as the ``api`` actor."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.rng
        skew = self.rng.uniform(-world.config.max_skew_s, world.config.max_skew_s)
        self.clock = VirtualClock(world.loop, world.start, skew)
        self.store = world.memory
        self.clients: dict[str, Client] = {}
        self.policies: dict[str, ThrottlePolicy] = {}
        self.calendars: dict[str, cal.Calendar] = {}  # each client's one calendar ("quiet"), as saved last

    async def call(self, op: Callable[[], Awaitable[T]]) -> T:
        token = ACTOR.set(API)
        try:
            return await op()
        finally:
            ACTOR.reset(token)

    async def retrying(self, op: Callable[[], Awaitable[T]], tries: int = 30) -> T:
        """Admin set-up that must happen: retried through faults, like an operator would."""
        for _ in range(tries - 1):
            try:
                return await self.call(op)
            except StoreUnavailable:
                await asyncio.sleep(1.0)
        return await self.call(op)

    # -- admin ----------------------------------------------------------------------------------------

    async def register(self, client_id: str, pollers: int) -> None:
        now = self.clock()
        client = Client(client_id, pollers, True, "hash", now - timedelta(minutes=5), now)
        await self.retrying(lambda: self.store.create_client(client))
        self.clients[client_id] = client

    async def resize(self, client_id: str, pollers: int) -> bool:
        current = await self.call(lambda: self.store.get_client(client_id))
        assert current is not None
        now = self.clock()
        changes: dict[str, object] = {"updated_at": now, "poller_count": pollers}
        if pollers < current.poller_count:
            changes["poller_span"] = max(current.poller_span, current.poller_count)
            changes["resized_at"] = now
        client = dataclasses.replace(current, **changes)  # type: ignore[arg-type]
        await self.call(lambda: self.store.update_client(client))
        self.clients[client_id] = client
        return True

    async def add_policy(self, client_id: str, name: str, limit: int, timeout_s: int) -> None:
        now = self.clock()
        policy = ThrottlePolicy(client_id, name, limit, timeout_s, now, now)
        await self.retrying(lambda: self.store.put_policy(policy))
        self.policies[client_id] = policy

    async def save_calendar(self, client_id: str, calendar: cal.Calendar) -> None:
        """Set-up that must happen (retried through faults; a save whose answer was lost finds itself)."""
        saved = await self.retrying(lambda: self.store.save_calendar(client_id, calendar, self.clock()))
        assert saved, f"calendar {calendar.name} v{calendar.version} of {client_id} not saved"
        self.calendars[client_id] = calendar

    # -- schedules --------------------------------------------------------------------------------------

    def _new_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    async def create(self, client_id: str, delay_s: float, options: Options | None) -> Schedule:
        client = await self.call(lambda: self.store.get_client(client_id))
        assert client is not None
        at = timing.truncate_ms(self.clock())
        sid = self._new_id()
        if options is not None and options.repeat is not None:
            start = timing.truncate_ms(at + timedelta(seconds=max(delay_s, 1.0)))
            repeat = msgspec.structs.replace(options.repeat, start_at=start)
            options = msgspec.structs.replace(options, repeat=repeat)
            # As the API: the first occurrence the calendars it names leave, read as they stand now.
            calendars = [await self._calendar(client_id, name) for name in repeat.calendars]
            fire_at, _ = cal.next_allowed(repeat.recurrence(), at, calendars)
            assert fire_at is not None
            seq = 1
        else:
            fire_at, seq = timing.truncate_ms(at + timedelta(seconds=delay_s)), 0
        poller_id = timing.poller_id_for(sid, client.poller_count)
        location = Location(poller_id, timing.stored_due_at(sid, fire_at, options, at))
        callback = _KAFKA if sid.int % 2 else _CALLBACK
        schedule = Schedule(client_id, sid, location, fire_at, b'{"n":1}', callback, at, options=options, seq=seq)
        await self.confirmed(at, [location.due_at], None, lambda: self.store.create_schedules([schedule], at))
        return schedule

    async def _calendar(self, client_id: str, name: str) -> cal.Calendar:
        stored = await self.call(lambda: self.store.get_calendar(client_id, name))
        assert stored is not None, f"{client_id} has no calendar {name}"
        return stored.calendar

    async def cancel(self, client_id: str, sid: uuid.UUID) -> datetime:
        """Cancel as the handler does (guard, then compare-and-set, retried on a poller's race)."""
        for attempt in range(3):
            current = await self.call(lambda: self.store.get_schedule(client_id, sid))
            if current is None:
                raise NotFound("gone")
            at = self.clock()
            left_s = self._check_mutable(current, at)
            try:
                cancel = lambda c=current, a=at: self.store.cancel_schedule(c, a)  # type: ignore[misc]  # noqa: E731
                await self.confirmed(at, [current.location.due_at], left_s, cancel)
                return at
            except Conflict:
                if current.repeat is None or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def reschedule(
        self, client_id: str, sid: uuid.UUID, delay_s: float, intended: list[datetime] | None = None
    ) -> Schedule:
        current = await self.call(lambda: self.store.get_schedule(client_id, sid))
        if current is None:
            raise NotFound("gone")
        at = timing.truncate_ms(self.clock())
        left_s = self._check_mutable(current, at)
        # The client as stored, as create reads it (the API's cache is at most TICKD_CLIENT_CACHE_S old):
        # the workload's own copy misses a resize whose answer was lost, and a row placed by a poller
        # count that stale can land on an instance drained long before (seed 40244, a workload defect).
        client = await self.call(lambda: self.store.get_client(client_id))
        assert client is not None
        fire_at = timing.truncate_ms(at + timedelta(seconds=delay_s))
        poller_id = timing.poller_id_for(sid, client.poller_count)
        location = Location(poller_id, timing.stored_due_at(sid, fire_at, current.options, at))
        if intended is not None:
            intended.append(fire_at)
        updated = dataclasses.replace(current, location=location, fire_at=fire_at, attempts=0, last_error=None)
        dues = [current.location.due_at, location.due_at]
        return await self.confirmed(at, dues, left_s, lambda: self.store.replace_schedule(current, updated, at))

    async def debounce_put(
        self, client_id: str, current: Schedule | None, spec: DebounceFields, payload: bytes, intended: list[datetime]
    ) -> tuple[Schedule, bool]:
        """A debounced by-key PUT as the handler makes it (``service.debounce``): the key's schedule as read
        (``current``, read again here) pushed back with the new payload, a client change the mutation
        guard does not hold; or, for a new key or one whose schedule ended, a new schedule. Returns the
        schedule and whether it is new."""
        if current is not None:
            current = await self.call(lambda c=current: self.store.get_schedule(client_id, c.schedule_id))  # type: ignore[misc]
        client = await self.call(lambda: self.store.get_client(client_id))
        assert client is not None
        at = timing.truncate_ms(self.clock())
        fire_at, state = debounce.plan(spec, current, at)
        options = Options(debounce=state)
        if current is None or current.status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
            sid = self._new_id()
            location = Location(timing.poller_id_for(sid, client.poller_count), fire_at)
            callback = _KAFKA if sid.int % 2 else _CALLBACK
            schedule = Schedule(client_id, sid, location, fire_at, payload, callback, at, options=options)
            await self.confirmed(at, [fire_at], None, lambda: self.store.create_schedules([schedule], at))
            return schedule, True
        self._check_mutable(current, at)
        intended.append(fire_at)
        location = Location(timing.poller_id_for(current.schedule_id, client.poller_count), fire_at)
        updated = dataclasses.replace(
            current, location=location, fire_at=fire_at, payload=payload, options=options, attempts=0, last_error=None
        )
        dues = [current.location.due_at, fire_at]
        return await self.confirmed(at, dues, None, lambda: self.store.replace_schedule(current, updated, at)), False

    async def pause_until(self, client_id: str, sid: uuid.UUID, for_s: float) -> Schedule:
        """A timed pause as the handler makes it (``service.actions.pause``): the schedule's row parked,
        paused, at ``until``, where the instance owning that minute resumes it (``poller.wakes``)."""
        client = await self.call(lambda: self.store.get_client(client_id))
        current = await self.call(lambda: self.store.get_schedule(client_id, sid))
        if client is None or current is None:
            raise NotFound("gone")
        if current.status is not Status.SCHEDULED:
            raise Conflict(f"status {current.status}")
        at = timing.truncate_ms(self.clock())
        note = PauseNote(at=at, until=timing.truncate_ms(at + timedelta(seconds=for_s)), note="sim")
        parked = actions.parked_at(current, client, note, at)
        dues = [current.location.due_at, parked.location.due_at]
        return await self.confirmed(at, dues, None, lambda: self.store.pause_schedule(current, at, parked))

    async def confirmed(
        self, at: datetime, dues: list[datetime], left_s: float | None, op: Callable[[], Awaitable[T]]
    ) -> T:
        """As the handlers do: ``service.confirm.confirmed``, on this replica's clock."""
        settings = self.world.store_settings
        return await confirmed(
            self.call(op),
            at=at,
            dues=dues,
            left_s=left_s,
            hot_window_s=settings.hot_window_s,
            deadline_s=settings.hot_write_deadline_s,
            now=self.clock,
        )

    @staticmethod
    def _check_mutable(schedule: Schedule, at: datetime) -> float | None:
        if schedule.status is not Status.SCHEDULED:
            raise Conflict(f"status {schedule.status}")
        if schedule.repeat is not None or schedule.debounce is not None:
            return None  # a debounced row is read again before it is sent: no guard (``actions.check_mutable``)
        left_s = (schedule.location.due_at - at).total_seconds() - _GUARD_S
        if left_s < 0:
            raise Conflict("fire imminent")
        return left_s


class Workload:
    """Random operations and faults over ``config.run_s``, then a quiet settle period."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = world.rng
        self.api = Api(world)
        self.client_ids = [f"c{i}" for i in range(world.config.clients)]
        self._tasks: set[asyncio.Task[None]] = set()
        # Bulk jobs (service.bulk, run as the API replicas run them): the jobs made, and each replica's
        # runner task by name.
        self.bulk_jobs: list[tuple[str, uuid.UUID, str]] = []  # (client, job id, tag value)
        self._groups: dict[uuid.UUID, tuple[str, str]] = {}  # schedule id: (client, tag value) it was made with
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._bulk_app = self._bulk_app_of(world)
        # Calendars: which clients have one, which schedules name it, when it changes. A stream of their
        # own, so the rest of a seed's draws stay where they were.
        self._calendar_rng = random.Random(f"calendars-{world.config.seed}")
        # Missed-fire policies (``schema.missed``), from a stream of their own too.
        self._missed_rng = random.Random(f"missed-{world.config.seed}")
        # Timed pauses of recurring schedules (``poller.wakes``), from a stream of their own.
        self._pause_rng = random.Random(f"pauses-{world.config.seed}")
        # Debounced by-key PUT bursts (``service.debounce``), from a stream of their own.
        self._debounce_rng = random.Random(f"debounce-{world.config.seed}")
        # Backfills (``schema.backfills``): the jobs made, (client, job id, schedule, from, to), from a
        # stream of their own.
        self._backfill_rng = random.Random(f"backfill-{world.config.seed}")
        self.backfill_jobs: list[tuple[str, uuid.UUID, uuid.UUID, datetime, datetime]] = []
        world.delivery_checks.append(self._check_throttle)
        world.subscribe(self._consume)

    async def run(self) -> None:
        world, config = self.world, self.world.config
        for client_id in self.client_ids:
            await self.api.register(client_id, self.rng.choice([1, 2, 4]))
            if self.rng.random() < 0.5:
                await self.api.add_policy(client_id, "p", self.rng.randint(1, 4), self.rng.randint(2, 20))
            world.endpoints[client_id] = Endpoint()
            if self._calendar_rng.random() < 0.5:
                await self.api.save_calendar(client_id, self._quiet(1, world.loop.time(), 3))
        for i in range(config.nodes):
            world.start_node(f"n{i}")
        end = world.loop.time() + config.run_s
        for name in ("api-a", "api-b"):
            self._start_runner(name)
        actors = [
            asyncio.create_task(self._clients(end)),
            asyncio.create_task(self._bulk(end)),
            asyncio.create_task(self._calendar_change(end)),
            asyncio.create_task(self._timed_pauses(end)),
            asyncio.create_task(self._debounces(end)),
            asyncio.create_task(self._backfills(end)),
        ]
        if config.faults:
            actors.append(asyncio.create_task(self._chaos(end)))
            actors.append(asyncio.create_task(self._replica_crashes(end)))
        await asyncio.gather(*actors)
        await self._heal()
        await asyncio.sleep(config.settle_s)
        await self._wait_for_throttled_backlog()
        for name in list(self._runners):
            await self._stop_runner(name)
        await self._close_bulk()
        await self._close_backfills()
        self._close_promises()

    # -- clients ----------------------------------------------------------------------------------------

    async def _clients(self, end: float) -> None:
        loop = self.world.loop
        while loop.time() < end:
            await asyncio.sleep(self.rng.expovariate(1.0))
            op = self.rng.random()
            client_id = self.rng.choice(self.client_ids)
            if op < 0.55:
                await self._create(client_id)
            elif op < 0.7:
                await self._cancel()
            elif op < 0.82:
                await self._reschedule()
            elif op < 0.86:
                await self._resize(client_id)
            # else: nothing this second

    def _options(self, client_id: str) -> Options | None:
        kind = self.rng.random()
        if kind < 0.5:
            return None
        if kind < 0.65:
            # Some pause after a few failed fires in a row (the endpoints fail in streaks under faults).
            pause_after = self.rng.choice([None, None, 1, 2, 3])
            repeat = Repeat(every_s=self.rng.choice([5, 10, 30, 60]))
            if client_id in self.api.calendars and self._calendar_rng.random() < 0.6:
                repeat = msgspec.structs.replace(repeat, calendars=("quiet",))
            if self._missed_rng.random() < 0.4:
                policy = self._missed_rng.choice(["skip", "fire_once"])
                repeat = msgspec.structs.replace(repeat, missed=Missed(policy, self._missed_rng.randint(3, 20)))
            return Options(repeat=repeat, pause_after_failures=pause_after)
        if kind < 0.75:
            return Options(jitter_ms=self.rng.randint(1, 10_000))
        if kind < 0.88:
            return Options(events=self.rng.randint(2, 6), window_ms=self.rng.choice([0, 2000, 15_000]))
        if client_id in self.api.policies:
            return Options(events=self.rng.randint(1, 6), window_ms=self.rng.choice([0, 3000]), throttle="p")
        return None

    async def _create(self, client_id: str) -> None:
        delay = self.rng.choice([-30.0, 0.0, 0.5, 3.0]) if self.rng.random() < 0.2 else self.rng.uniform(1, 150)
        options = self._options(client_id)
        group = self.rng.choice(["a", "b"]) if self.rng.random() < 0.3 else None  # a group a bulk job may act on
        if group is not None:
            tags = (("grp", group),)
            options = Options(tags=tags) if options is None else msgspec.structs.replace(options, tags=tags)
        try:
            schedule = await self.api.create(client_id, delay, options)
        except StoreUnavailable:
            return  # not acknowledged: may or may not exist, no promise either way
        events_ = schedule.options.events if schedule.options is not None and schedule.options.batch else 0
        repeat = schedule.repeat
        promise = Promise(client_id, schedule.schedule_id, schedule.fire_at, events=events_, repeat=repeat)
        promise.pause_after = (schedule.options.pause_after_failures or 0) if schedule.options is not None else 0
        self.world.oracle.promises[schedule.schedule_id] = promise
        if group is not None:
            self._groups[schedule.schedule_id] = (client_id, group)
        if self.rng.random() < 0.1:
            # Changed the moment it is acknowledged (a client correcting itself, a by-key storm): the
            # change's compare-and-set then runs in the create's millisecond, against its plain write.
            await (self._cancel(promise) if self.rng.random() < 0.5 else self._reschedule(promise))

    def _pick(self) -> Promise | None:
        live = [p for p in self.world.oracle.promises.values() if p.cancelled_at is None]
        # Often one whose last change was not acknowledged: the next change must work (it adopts a change
        # whose pointer moved and whose rows were lost) and its outcome is certain again.
        uncertain = [p for p in live if p.uncertain]
        if uncertain and self.rng.random() < 0.5:
            return self.rng.choice(uncertain)
        return self.rng.choice(live) if live else None

    async def _cancel(self, promise: Promise | None = None) -> None:
        promise = promise or self._pick()
        if promise is None:
            return
        try:
            at = await self.api.cancel(promise.client_id, promise.schedule_id)
        except (Conflict, NotFound):
            return
        except StoreUnavailable:
            promise.unsure(promise.fire_id)
            return
        promise.cancelled_at, promise.cancelled_t = at, asyncio.get_running_loop().time()
        promise.settled(promise.cancelled_t)

    async def _reschedule(self, promise: Promise | None = None) -> None:
        promise = promise or self._pick()
        if promise is None or promise.repeat is not None:
            return
        intended: list[datetime] = []
        try:
            moved = await self.api.reschedule(
                promise.client_id, promise.schedule_id, self.rng.uniform(3, 120), intended
            )
        except (Conflict, NotFound):
            return
        except StoreUnavailable:
            # Either version may fire now (or, if the change half-landed and nothing else happens, the old).
            promise.unsure(promise.fire_id, *(timing.fire_id(promise.schedule_id, f) for f in intended))
            return
        if promise.uncertain:
            promise.unsure(promise.fire_id)
            promise.settled(asyncio.get_running_loop().time())
        elif moved.fire_at != promise.fire_at:
            promise.old_fire_ids[promise.fire_id] = asyncio.get_running_loop().time()
        promise.fire_at = moved.fire_at
        if promise.payload is not None:  # a debounced one keeps the payload it read: a PUT in doubt's, maybe
            promise.payload = moved.payload
        # The acknowledged version must fire, whatever came before: a change can land on the time of a
        # version in doubt or superseded earlier (it adopts a change whose pointer moved), and then shares
        # its fire id (seed 95018).
        promise.maybe.pop(promise.fire_id, None)
        promise.old_fire_ids.pop(promise.fire_id, None)

    async def _timed_pauses(self, end: float) -> None:
        """Now and then a recurring schedule paused for 5-60 s, as a client does it: retried on a race
        with its poller's chain (as the handler retries), its outcome in doubt on a store error."""
        loop, rng = self.world.loop, self._pause_rng
        while loop.time() < end - 60:
            await asyncio.sleep(rng.expovariate(1 / 15))
            live = [
                p
                for p in self.world.oracle.promises.values()
                if p.repeat is not None and p.cancelled_at is None and not p.uncertain and not p.paused_until
                and p.schedule_id not in self._groups  # a bulk pause of a paused schedule leaves it to its end
            ]  # fmt: skip
            if not live:
                continue
            promise = rng.choice(live)
            for_s = rng.uniform(5, 60)
            for _ in range(3):
                try:
                    parked = await self.api.pause_until(promise.client_id, promise.schedule_id, for_s)
                except Conflict:
                    continue  # its chain moved it on meanwhile, or it was paused by its failures: read again
                except NotFound:
                    break
                except StoreUnavailable:
                    promise.unsure()  # paused or not, resumed or not: only its timeline's shape is checked
                    break
                assert parked.pause is not None and parked.pause.until is not None
                promise.paused_until.append((parked.fire_at, parked.pause.until))
                break

    async def _debounces(self, end: float) -> None:
        """Now and then a key PUT in a burst with a debounce of 1-5 s (inside the mutation guard, too), as
        a client typing or a cart filling does: each acknowledged PUT pushes the key's pending fire back
        (a superseded version fired only if it was already going out when the PUT landed), a PUT after
        the fire went out starts the key's next schedule; the latest acknowledged version must fire."""
        loop, rng = self.world.loop, self._debounce_rng
        bursts: list[asyncio.Task[None]] = []
        while loop.time() < end - 30:
            await asyncio.sleep(rng.expovariate(1 / 12))
            client_id = rng.choice(self.client_ids)
            window = rng.choice([1.0, 1.5, 2.0, 3.0, 5.0])
            spec = DebounceFields(
                window_s=window,
                max_wait_s=rng.choice([msgspec.UNSET, 2 * window, 4 * window]),
                edge=rng.choice(["trailing", "trailing", "leading"]),
            )
            bursts.append(asyncio.create_task(self._burst(client_id, spec, rng.randint(2, 8), rng.random())))
        await asyncio.gather(*bursts)

    async def _burst(self, client_id: str, spec: DebounceFields, puts: int, pace: float) -> None:
        rng, loop = self._debounce_rng, self.world.loop
        current: Schedule | None = None
        for n in range(puts):
            kept = current.debounce if current is not None else None
            capped = not isinstance(spec.max_wait_s, msgspec.UnsetType) and kept is not None and kept.first_at
            if n and capped and pace < 0.25:  # right before max_wait_s caps it: PUTs at the capped time
                assert kept is not None and kept.first_at is not None and isinstance(spec.max_wait_s, float)
                due = kept.first_at + timedelta(seconds=spec.max_wait_s - rng.uniform(0.0, 0.6))
                await asyncio.sleep(max(0.0, (due - self.api.clock()).total_seconds()))
            elif n and pace < 0.5:  # right before the pending fire is due: inside the guard, on the wire
                await asyncio.sleep(max(0.0, spec.window_s - rng.uniform(0.0, 1.2)))
            elif n:
                await asyncio.sleep(rng.uniform(0.05, spec.window_s * (0.6 + pace)))
            intended: list[datetime] = []
            try:
                schedule, new = await self.api.debounce_put(client_id, current, spec, b'{"n":%d}' % n, intended)
            except (Conflict, NotFound):
                continue
            except StoreUnavailable:
                doubt = self.world.oracle.promises.get(current.schedule_id) if current is not None else None
                if doubt is not None:  # a push not acknowledged: either version may fire
                    doubt.unsure(doubt.fire_id, *(timing.fire_id(doubt.schedule_id, f) for f in intended))
                continue
            current = schedule
            if new:
                self.world.oracle.promises[schedule.schedule_id] = Promise(
                    client_id, schedule.schedule_id, schedule.fire_at, debounced=True, payload=schedule.payload
                )
                continue
            promise = self.world.oracle.promises.get(schedule.schedule_id)
            if promise is None:
                continue  # its create was not acknowledged: no promise either way
            if promise.uncertain:
                promise.unsure(promise.fire_id)
                promise.settled(loop.time())
            elif schedule.fire_at != promise.fire_at:
                promise.old_fire_ids[promise.fire_id] = loop.time()
            promise.fire_at, promise.payload = schedule.fire_at, schedule.payload
            promise.maybe.pop(promise.fire_id, None)
            promise.old_fire_ids.pop(promise.fire_id, None)

    async def _resize(self, client_id: str) -> None:
        pollers = self.rng.choice([1, 2, 3, 4, 6])
        try:
            await self.api.resize(client_id, pollers)
        except StoreUnavailable:
            return

    # -- calendars --------------------------------------------------------------------------------------

    def _quiet(self, version: int, from_t: float, ranges: int) -> cal.Calendar:
        """Calendar "quiet" (UTC): ``ranges`` blackouts of 5-40 s, the first starting 30 s after ``from_t``
        (virtual seconds) or later: by then every node reads it (TICKD_CLIENTS_REFRESH_S is 5 s), so each
        occurrence in one is excluded, whether its row was written before the change or after."""
        rng = self._calendar_rng
        spans = []
        for _ in range(ranges):
            begins = from_t + 30 + rng.uniform(0, self.world.config.run_s + 60)
            start = (self.world.start + timedelta(seconds=round(begins))).replace(tzinfo=None)
            spans.append((start, start + timedelta(seconds=rng.randint(5, 40))))
        return cal.Calendar("quiet", version, "UTC", ranges=cal.merged(spans))

    async def _calendar_change(self, end: float) -> None:
        """Once in the run, maybe: a client's calendar gets a new version with more blackouts (added only,
        so what it excluded before stays excluded and the oracle reads the last version)."""
        rng, loop = self._calendar_rng, self.world.loop
        await asyncio.sleep(rng.uniform(0.2, 0.8) * self.world.config.run_s)
        owners = sorted(self.api.calendars)
        if not owners or loop.time() >= end or rng.random() < 0.3:
            return
        client_id = rng.choice(owners)
        current = self.api.calendars[client_id]
        more = self._quiet(current.version + 1, loop.time(), rng.randint(1, 3))
        changed = msgspec.structs.replace(more, ranges=cal.merged([*current.ranges, *more.ranges]))
        await self.api.save_calendar(client_id, changed)

    # -- bulk jobs --------------------------------------------------------------------------------------

    def _bulk_app_of(self, world: World) -> web.Application:
        """What ``service.bulk`` reads of an API replica: its settings, the store, its (skewed) clock."""
        store_settings = world.store_settings
        app = web.Application()
        app[api_keys.SETTINGS] = ApiSettings(
            mutation_guard_s=_GUARD_S,
            hot_window_s=store_settings.hot_window_s,
            hot_write_deadline_s=store_settings.hot_write_deadline_s,
            bulk_poll_s=1.0,
            bulk_lease_s=10.0,
            bulk_page=5,
            bulk_rate_per_s=20.0,
        )
        app[api_keys.STORE] = world.memory
        app[api_keys.CLOCK] = self.api.clock
        return app

    def _start_runner(self, name: str) -> None:
        """An API replica's bulk runner, its store calls made as the API (faults apply)."""
        token = ACTOR.set(API)
        try:
            self._runners[name] = asyncio.create_task(BulkRunner(self._bulk_app, owner=name).run())
        finally:
            ACTOR.reset(token)

    async def _stop_runner(self, name: str) -> None:
        """The replica dies: its jobs stop where they are, their leases held until they run out."""
        task = self._runners.pop(name, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _bulk(self, end: float) -> None:
        """Once in the run: a bulk pause or cancel of a tagged group, and the replica running it killed."""
        loop, rng = self.world.loop, self.rng
        await asyncio.sleep(rng.uniform(0.3, 0.6) * self.world.config.run_s)
        client_id = rng.choice(self.client_ids)
        at = timing.truncate_ms(self.api.clock())
        job_id = uuid.UUID(int=rng.getrandbits(128), version=1)
        action, group = rng.choice(["pause", "cancel"]), rng.choice(["a", "b"])
        job = BulkJob(client_id, job_id, action, BulkFilter(("grp", group)), False, BulkState.QUEUED, at, at)
        try:
            await self.api.retrying(lambda: self.api.store.create_bulk_job(job), tries=5)
        except StoreUnavailable:
            return
        self.bulk_jobs.append((client_id, job_id, group))
        await asyncio.sleep(rng.uniform(1.0, 12.0))
        victim = rng.choice(sorted(self._runners))
        await self._stop_runner(victim)
        if loop.time() < end:
            self._later(rng.uniform(5.0, 40.0), lambda: self._start_runner(victim))

    async def _close_bulk(self) -> None:
        """Each bulk job finished, and changed each schedule once; a schedule it paused or cancelled is,
        from its change on, a cancelled promise to the oracle (nothing fires after it). The change's time
        is its audit record's; a change whose record was lost (the store failed it: the change stands) is
        told by the schedule's state: a recurring one's from its pointer's write, a one-time one's
        unknown (it may have fired first, or not)."""
        world = self.world
        skew = self.api.clock.skew_s
        for client_id, job_id, group in self.bulk_jobs:
            job = await world.oracle_call(lambda c=client_id, j=job_id: world.memory.get_bulk_job(c, j))  # type: ignore[misc]
            if job is None or job.state is not BulkState.DONE:
                world.oracle.saw(f"bulk job {job_id} of {client_id} did not finish ({job.state if job else 'gone'})")
            for target, _reason in job.failures if job is not None else ():
                # A change the job lists as failed is one not acknowledged, as a 503 from the API is: it
                # may have landed or not (seed 402440: a cancel whose pointer moved and whose status write
                # was lost, then the fire's retry dropped as changed; a user re-runs the failed ones).
                promise = world.oracle.promises.get(uuid.UUID(target))
                if promise is not None and promise.cancelled_at is None:
                    promise.unsure(promise.fire_id)
            seen: set[str] = set()
            for target, at in peek.bulk_changes(world.tables, client_id, f"bulk:{job_id}"):
                if target in seen:
                    world.oracle.saw(f"bulk job {job_id} changed {target} twice")
                seen.add(target)
                promise = world.oracle.promises.get(uuid.UUID(target))
                if promise is None or promise.cancelled_at is not None:
                    continue
                promise.cancelled_at = at
                promise.cancelled_t = (at - world.start).total_seconds() - skew
                promise.settled(promise.cancelled_t)
            for schedule_id, made_in in self._groups.items():
                promise = world.oracle.promises.get(schedule_id)
                if made_in != (client_id, group) or promise is None or promise.cancelled_at is not None:
                    continue
                found = peek.current_status(world.tables, client_id, schedule_id)
                if found is None or found[0] not in ("paused", "cancelled"):
                    continue
                if promise.repeat is not None:
                    promise.cancelled_at = found[1]
                    promise.cancelled_t = (found[1] - world.start).total_seconds()
                else:
                    promise.unsure(promise.fire_id)

    # -- backfills --------------------------------------------------------------------------------------

    async def _backfills(self, end: float) -> None:
        """Once in the run: a recurring schedule made with no start (its timeline reaches back before it
        was made), backfilled a while later over a range from before it was made into its own timeline;
        and sometimes another that has run a while, over its timeline, where what it skipped (missed-fire
        policies, timed pauses) is fired and what it sent or is sending is not. Each is started as the API
        starts one (a bulk job of kind backfill, run by the replicas' runners, one of which ``_bulk``
        kills meanwhile)."""
        rng, world = self._backfill_rng, self.world
        await asyncio.sleep(rng.uniform(0.1, 0.3) * world.config.run_s)
        made = await self._unanchored(rng.choice(self.client_ids), rng.choice([5, 10]))
        await asyncio.sleep(rng.uniform(10.0, 60.0))
        if made is not None and world.loop.time() < end:
            at = timing.truncate_ms(self.api.clock())
            await self._backfill(made, at - timedelta(seconds=rng.uniform(40, 120)), at)
        if rng.random() < 0.5 or world.loop.time() >= end:
            return
        at = timing.truncate_ms(self.api.clock())
        ran = [
            p
            for p in world.oracle.promises.values()
            if p.repeat is not None and p.cancelled_at is None and p.fire_at < at - timedelta(seconds=40)
        ]
        if ran:
            promise = rng.choice(sorted(ran, key=lambda p: str(p.schedule_id)))
            await self._backfill(promise, promise.fire_at - timedelta(seconds=rng.uniform(0, 20)), at)

    async def _unanchored(self, client_id: str, every_s: int) -> Promise | None:
        """A recurring schedule as the API makes one from ``every`` alone: anchored one interval after now
        (None: not acknowledged, the store failed it)."""
        try:
            client = await self.api.call(lambda: self.api.store.get_client(client_id))
        except StoreUnavailable:
            return None
        assert client is not None
        at = timing.truncate_ms(self.api.clock())
        sid = uuid.UUID(int=self._backfill_rng.getrandbits(128), version=4)
        first = at + timedelta(seconds=every_s)
        repeat = Repeat(every_s=every_s, start_at=first, implicit_start=True)
        location = Location(timing.poller_id_for(sid, client.poller_count), first)
        callback = _KAFKA if sid.int % 2 else _CALLBACK
        schedule = Schedule(
            client_id, sid, location, first, b'{"n":1}', callback, at, options=Options(repeat=repeat), seq=1
        )
        try:
            await self.api.confirmed(at, [first], None, lambda: self.api.store.create_schedules([schedule], at))
        except StoreUnavailable:
            return None
        promise = Promise(client_id, sid, first, repeat=repeat)
        self.world.oracle.promises[sid] = promise
        return promise

    async def _backfill(self, promise: Promise, start: datetime, now: datetime) -> None:
        rng = self._backfill_rng
        start, stop = timing.truncate_ms(start), timing.truncate_ms(now - timedelta(seconds=rng.uniform(0, 15)))
        wanted = BulkFilter(None, None, start, stop, None, promise.schedule_id, rng.choice([2.0, 5.0, 20.0]))
        job_id = uuid.UUID(int=rng.getrandbits(128), version=1)
        job = BulkJob(promise.client_id, job_id, backfills.ACTION, wanted, False, BulkState.QUEUED, now, now)
        try:
            await self.api.retrying(lambda: self.api.store.create_bulk_job(job), tries=5)
        except StoreUnavailable:
            return
        self.backfill_jobs.append((promise.client_id, job_id, promise.schedule_id, start, stop))

    async def _close_backfills(self) -> None:
        """Each backfill finished; the fires each wrote (read from the store) are the oracle's to check:
        delivered, and never an occurrence the timeline delivered too."""
        world = self.world
        world.oracle.backfill_until = self.api.clock() - timedelta(seconds=world.config.settle_s - 60)
        for client_id, job_id, sid, start, stop in self.backfill_jobs:
            job = await world.oracle_call(lambda c=client_id, j=job_id: world.memory.get_bulk_job(c, j))  # type: ignore[misc]
            if job is None or job.state is not BulkState.DONE:
                world.oracle.saw(f"backfill {job_id} of {sid} did not finish ({job.state if job else 'gone'})")
            repeat = world.oracle.promises[sid].repeat
            assert repeat is not None
            written = world.oracle.backfilled.setdefault(sid, {})
            for nominal in backfills.occurrences(repeat, start, stop, 10_000):
                row_id = backfills.backfill_id(sid, nominal)
                row = await world.oracle_call(lambda c=client_id, r=row_id: world.memory.get_schedule(c, r))  # type: ignore[misc]
                if row is not None:
                    written[timing.to_epoch_ms(nominal)] = row.location.due_at

    # -- subscribers ------------------------------------------------------------------------------------

    def _consume(self, schedule: Schedule) -> None:
        """A throttled event is released by its consumer a little later (or never: its timeout does it)."""
        options = schedule.options
        if options is None or options.throttle is None or schedule.event_id is None:
            return
        if self.rng.random() < 0.8:
            delay = self.rng.uniform(0.05, 3.0)
            asyncio.get_running_loop().call_later(delay, self._release, schedule.client_id, schedule.event_id)

    def _release(self, client_id: str, event_id: str) -> None:
        async def release() -> None:
            try:
                await self.api.call(lambda: events.release_event(self.api.store, client_id, event_id))
            except (StoreUnavailable, NotFound):
                return

        task = asyncio.get_running_loop().create_task(release())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _check_throttle(self, schedule: Schedule) -> None:
        """A throttled event goes out only holding a token of its policy, and never more than the
        policy's limit are held at once."""
        options = schedule.options
        if options is None or options.throttle is None or schedule.event_id is None:
            return
        policy = self.api.policies.get(schedule.client_id)
        if policy is None:
            return
        tokens = peek.tokens(self.world.tables, schedule.client_id, "p")
        holders = {t.event_id for t in tokens}
        if schedule.event_id not in holders or len(tokens) > policy.max_in_flight:
            self.world.oracle.saw(
                f"t={self.world.loop.time():.2f} throttled event {schedule.event_id} out with tokens "
                f"{sorted(holders)} (limit {policy.max_in_flight})"
            )

    # -- faults -----------------------------------------------------------------------------------------

    async def _chaos(self, end: float) -> None:
        world = self.world
        while world.loop.time() < end:
            await asyncio.sleep(self.rng.uniform(5, 30))
            if world.loop.time() >= end:
                return
            await self._one_fault()

    async def _one_fault(self) -> None:
        world, rng = self.world, self.rng
        kind = rng.random()
        names = sorted(world.nodes)
        if kind < 0.2 and names:
            name = rng.choice(names)
            world.kill(name)
            self._later(rng.uniform(1, 40), lambda: world.start_node(name))
        elif kind < 0.35 and names:
            name = rng.choice(names)
            world.pause(name)
            self._later(rng.uniform(1, 30), lambda: self._resume(name))
        elif kind < 0.45 and names:
            name = rng.choice(names)
            await world.terminate(name)
            self._later(rng.uniform(1, 20), lambda: world.start_node(name))
        elif kind < 0.55 and names:
            handle = world.nodes[rng.choice(names)]
            world.faults.cut_off.add(handle.actor)
            self._later(rng.uniform(2, 40), lambda: world.faults.cut_off.discard(handle.actor))
        elif kind < 0.62:
            world.faults.outage = True
            self._later(rng.uniform(2, 25), self._end_outage)
        elif kind < 0.85:
            client_id = rng.choice(self.client_ids)
            world.endpoints[client_id] = Endpoint(
                fail_p=rng.choice([0.0, 0.3, 0.8]),
                throttle_p=rng.choice([0.0, 0.2]),
                hang_p=rng.choice([0.0, 0.1]),
                reject_p=rng.choice([0.0, 0.0, 0.05]),
            )
        else:
            for client_id in self.client_ids:
                world.endpoints[client_id] = Endpoint()

    def _end_outage(self) -> None:
        self.world.faults.outage = False

    def _resume(self, name: str) -> None:
        if name in self.world.nodes:
            self.world.resume(name)

    async def _replica_crashes(self, end: float) -> None:
        """Windows in which a Cassandra node is down and not yet convicted (``Faults.replica_down``),
        timed by a stream of their own so the other faults of a seed stay where they were."""
        world, config = self.world, self.world.config
        rng = random.Random(f"replica-{config.seed}")
        while True:
            await asyncio.sleep(rng.expovariate(1 / config.replica_down_every_s))
            if world.loop.time() >= end:
                return
            world.faults.replica_down = True
            await asyncio.sleep(rng.uniform(*config.replica_down_s))
            world.faults.replica_down = False

    def _later(self, delay_s: float, action: Callable[[], object]) -> None:
        self.world.loop.call_later(delay_s, action)

    async def _heal(self) -> None:
        """The end of the faults: every node up and reachable, the store answering, endpoints healthy."""
        world = self.world
        await asyncio.sleep(45)  # let pending restarts and resumes happen first
        world.faults.on = False
        world.faults.outage = False
        world.faults.replica_down = False
        world.faults.cut_off.clear()
        for client_id in self.client_ids:
            world.endpoints[client_id] = Endpoint()
        for i in range(world.config.nodes):
            name = f"n{i}"
            if name not in world.nodes:
                world.start_node(name)
            else:
                world.resume(name)

    async def _wait_for_throttled_backlog(self) -> None:
        """A tenant's throttle paces its events: each holds its policy's token until its consumer releases it
        or its timeout does (up to 20 s here; a failing or unreleased event holds it the full timeout, each
        attempt), so one client's backlog can outlast ``settle_s`` with nothing wrong (seed 95603: a hostile
        event's five attempts behind a limit of one). Wait while fires are pending and their number falls,
        up to ``settle_extra_s``: a lost fire is pending however long the run waits."""
        world = self.world
        waited, pending = 0.0, world.oracle.pending()
        while pending and waited < world.config.settle_extra_s:
            await asyncio.sleep(60.0)
            waited += 60.0
            now = world.oracle.pending()
            if now >= pending:
                return
            pending = now

    def _close_promises(self) -> None:
        """Recurring promises are checked up to a point every occurrence before it had time to fire,
        against the calendars they name as they stand at the end."""
        until = self.api.clock() - timedelta(seconds=self.world.config.settle_s - 60)
        tables = self.world.tables
        for promise in self.world.oracle.promises.values():
            if promise.repeat is None:
                continue
            promise.until = until
            calendar = self.api.calendars.get(promise.client_id)
            promise.calendars = tuple(c for c in [calendar] if c is not None and c.name in promise.repeat.calendars)
            if (promise.repeat.missed is not None and promise.repeat.missed.applies) or promise.paused_until:
                promise.skipped = peek.skipped_runs(tables, promise.client_id, promise.schedule_id)
            if promise.paused_until:
                promise.superseded = peek.superseded_runs(tables, promise.client_id, promise.schedule_id)
            if promise.cancelled_at is not None:
                continue  # cancelled, or paused by a bulk job (``_close_bulk``): nothing fires after it
            # The workload pauses a schedule only in bulk: one paused now otherwise was auto-paused.
            paused = peek.paused_since(tables, promise.client_id, promise.schedule_id)
            if paused is None:
                continue
            found = peek.auto_pauses(tables, promise.client_id, promise.schedule_id)
            # When it landed (its pointer's write), not the time it was made for (the dead letter's): a
            # pause waits for the store and for the schedule's other pause, and fires go on until it lands
            # (seed 1171). Which fire set it off is in its audit record.
            promise.paused_at, promise.paused_by = paused, found[0][1] if found else None
            target = str(promise.schedule_id)
            promise.pause_notices = peek.notices(tables, promise.client_id, "schedule.auto_paused", target)
