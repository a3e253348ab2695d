"""The in-memory store's fault points (what the simulation injects through): which requests a method of
the Cassandra adapter sends, and what each kind of failure leaves behind. Memory only: Cassandra cannot
be stopped mid-call on demand, which is why the simulation runs in memory."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta

import pytest

from tests.contract.conftest import START, Env, Factory, FailOn, ManualClock, read_all
from tests.waiting import until
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import NoFaults, StoreFaults
from tickd.schema.model import Chain, Client, EventOf, FireOutcome, InstanceKey, Location, NodeInfo, Options, Status
from tickd.schema.store import Store

pytestmark = pytest.mark.parametrize("env", ["memory"], indirect=True)


@pytest.fixture
def clock(env: Env) -> ManualClock:
    assert isinstance(env.now, ManualClock)
    return env.now


def faults(env: Env, **points: tuple[str, ...]) -> FailOn:
    injected = FailOn(**points)
    env.inject(injected)
    return injected


async def test_each_method_sends_the_requests_of_the_cassandra_adapter(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    seen = faults(env).seen
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    await store.create_schedule(s, START)
    assert seen == ["batch:insert_schedule"]
    seen.clear()
    retried = await store.requeue_schedule(s, START + timedelta(minutes=20), 2, "HTTP 503", START)
    assert seen == ["get_ref", "move_ref", "batch:insert_schedule", "record_outcome"]
    seen.clear()
    await store.cancel_schedule(retried, START)
    # The pointer first (its write timestamp), and again after the rows (no client change came after).
    assert seen == ["get_ref", "bump_ref", "batch:set_status", "get_ref"]
    seen.clear()
    assert await store.get_schedule(client_id, s.schedule_id) is not None
    assert seen == ["get_ref", "get_schedule"]


async def test_a_refused_request_applies_nothing(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(START + timedelta(minutes=10))
    faults(env, before=("batch:insert_schedule",))
    with pytest.raises(StoreUnavailable):
        await store.create_schedule(s, START)
    assert await store.get_schedule(client_id, s.schedule_id) is None


async def test_an_unknown_outcome_applied(env: Env, store: Store, new_schedule: Factory, client_id: str) -> None:
    s = new_schedule(START + timedelta(minutes=10))
    faults(env, after=("batch:insert_schedule",))
    with pytest.raises(StoreUnavailable):
        await store.create_schedule(s, START)
    assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_a_requeue_with_an_unknown_outcome_is_finished_by_calling_it_again(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(START + timedelta(seconds=30))
    await store.create_schedule(s, START)
    retry_at = START + timedelta(minutes=5)
    faults(env, after=("move_ref",))
    with pytest.raises(StoreUnavailable):
        await store.requeue_schedule(s, retry_at, 2, "timeout", START)
    assert await store.get_schedule(client_id, s.schedule_id) == s  # the pointer alone changes nothing
    retried = await store.requeue_schedule(s, retry_at, 2, "timeout", START)
    assert await store.get_schedule(client_id, s.schedule_id) == retried
    old = await read_all(store, s.instance, s.location.minute)
    assert [r.status for r in old] == [Status.MOVED]


async def test_a_half_done_cancel_leaves_the_row_live_and_the_next_change_adopts_it(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(START + timedelta(minutes=10))
    await store.create_schedule(s, START)
    faults(env, before=("batch:set_status",))
    with pytest.raises(StoreUnavailable):
        await store.cancel_schedule(s, START)
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.status is Status.SCHEDULED and got.version == 1  # the pointer says 2
    faults(env)
    # Before, every later change answered 409 here (the row says 1, the pointer 2) while the row fired.
    cancelled = await store.cancel_schedule(got, START)
    assert cancelled.status is Status.CANCELLED and cancelled.version == 3
    again = await store.get_schedule(client_id, s.schedule_id)
    assert again is not None and again.status is Status.CANCELLED


async def test_a_half_done_reschedule_is_fenced_by_the_next_change(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """The moved row's batch fails; the next change adopts the pointer's version and fences the target,
    so that the lost batch, had it landed later after all, would leave a moved row."""
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    await store.create_schedule(s, START)
    lost = dataclasses.replace(s, location=Location(2, START + timedelta(minutes=20)), fire_at=START)
    faults(env, before=("batch:insert_schedule",))
    with pytest.raises(StoreUnavailable):
        await store.replace_schedule(s, lost, START)
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got == s  # the old row is the truth: it fires if nothing else happens
    faults(env)
    final = dataclasses.replace(s, location=Location(3, START + timedelta(minutes=30)), fire_at=START)
    await store.replace_schedule(got, final, START)
    ref = await store.get_ref(client_id, s.schedule_id)
    assert ref is not None and ref.version == 3 and ref.stale == (lost.location,)
    live = [r for m in (s, lost, final) for r in await read_all(store, m.instance, m.location.minute)]
    assert [(r.location, r.status) for r in live] == [(s.location, Status.MOVED), (final.location, Status.SCHEDULED)]


async def test_a_row_a_lost_change_left_live_is_fenced_after_a_durable_retry_of_its_successor(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Simulation seed 401111: a reschedule whose batchlog failed lands piece by piece, all but the write
    retiring the old row (answered 503); the new row fires, fails and is retried (a poller's move, which
    rewrites the pointer's ``previous``); the next client change must still fence the old row, or it
    fires after that change was answered."""
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    await store.create_schedule(s, START)
    moved = dataclasses.replace(s, location=Location(1, START + timedelta(minutes=5)), fire_at=START)
    faults(env, batchlog=("batch:insert_schedule",), before=("batch:set_status",))
    with pytest.raises(StoreUnavailable):
        await store.replace_schedule(s, moved, START)
    faults(env)
    got = await store.get_schedule(client_id, s.schedule_id)
    assert got is not None and got.location == moved.location and got.version == 2
    old = await read_all(store, s.instance, s.location.minute)
    assert [r.status for r in old] == [Status.SCHEDULED]  # the retiring write was lost
    retried = await store.requeue_schedule(got, START + timedelta(minutes=7), 1, "HTTP 503", START)
    await store.cancel_schedule(retried, START)
    old = await read_all(store, s.instance, s.location.minute)
    assert [(r.version, r.status) for r in old] == [(1, Status.MOVED)]


async def test_an_unlogged_batch_over_two_partitions_can_half_apply(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """An event row due inside the hot window: its signals batch marks the minute (one partition) and
    raises the horizon (another); a failure between the two leaves the mark without the horizon."""
    at = START + timedelta(seconds=20)
    parent = uuid.uuid4()
    event = new_schedule(at, schedule_id=uuid.uuid5(parent, "0"), options=Options(event=EventOf(parent, 0, 1)))
    faults(env, after=("batch:mark_hot/partial",))
    with pytest.raises(StoreUnavailable):
        await store.add_events([event], START)
    assert [r.schedule_id for r in await read_all(store, event.instance, event.location.minute)] == [event.schedule_id]
    assert InstanceKey(client_id, 0) in {m.instance for m in await store.hot_marks(event.location.minute)}
    assert await store.get_horizon(InstanceKey(client_id, 0)) is None


async def test_outcomes_of_other_partitions_land_when_one_fails(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    made = [new_schedule(START + timedelta(minutes=10 + i), options=Options(jitter_ms=1)) for i in range(3)]
    await store.create_schedules(made, START)
    outcomes = [
        FireOutcome(client_id, s.schedule_id, s.location, Status.SUCCEEDED, 1, START, nominal_at=s.fire_at, seq=1)
        for s in made
    ]
    injected = faults(env, before=("batch:record_outcome",))
    with pytest.raises(StoreUnavailable):
        await store.record_outcomes(outcomes)
    # The runs first (all landed), then the rows' outcomes: the other partitions' complete (as under gather).
    await until(lambda: injected.seen.count("batch:record_outcome") == 3 and injected.seen.count("record_run") == 3)
    statuses = [(await store.get_schedule(client_id, s.schedule_id)).status for s in made]  # type: ignore[union-attr]
    assert statuses == [Status.SCHEDULED, Status.SUCCEEDED, Status.SUCCEEDED]
    assert len(await store.list_runs(client_id, made[0].schedule_id, None, 10)) == 1


async def test_a_run_not_written_leaves_its_row_scheduled(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """A fire's run goes before its row's outcome: a row no longer scheduled is redone by nobody, so with
    its run lost the occurrence would have no record (simulation seed 440269: a skip past the start
    deadline, its row marked, its run lost)."""
    made = new_schedule(START + timedelta(minutes=10), seq=1)
    await store.create_schedule(made, START)
    skipped = FireOutcome(
        client_id, made.schedule_id, made.location, Status.SKIPPED, 0, START, "skipped: missed", made.fire_at, seq=1
    )
    faults(env, before=("record_run",))
    with pytest.raises(StoreUnavailable):
        await store.record_outcomes([skipped])
    current = await store.get_schedule(client_id, made.schedule_id)
    assert current is not None and current.status is Status.SCHEDULED  # left for its next owner to redo
    assert await store.list_runs(client_id, made.schedule_id, None, 10) == []


async def test_a_chain_whose_pointer_move_failed_finds_nothing_to_finish(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    first = new_schedule(START + timedelta(minutes=10), seq=1)
    await store.create_schedule(first, START)
    nxt = dataclasses.replace(first, location=Location(0, START + timedelta(minutes=11)), seq=2)
    faults(env, before=("move_ref",))
    with pytest.raises(StoreUnavailable):
        await store.chain_schedule(first, nxt, START)
    assert (await store.chain_schedule(first, nxt, START)).outcome is Chain.CHAINED


class Hold(NoFaults):
    """Faults that hold one request in flight until released (a slow network call)."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.released = asyncio.Event()

    async def before(self, op: str) -> None:
        if op == self.op:
            await self.released.wait()

    async def after(self, op: str) -> None:
        return None


async def test_a_delayed_write_keeps_the_timestamp_it_was_sent_with(
    env: Env, store: Store, clock: ManualClock, client_id: str
) -> None:
    """Write timestamps are the client's, taken at send time: a request held up in the network that
    lands after a later write loses to it (last write wins by timestamp, not by arrival)."""
    client = Client(client_id, 2, True, "h", START, START)
    assert await store.create_client(client)
    hold: StoreFaults = Hold("update_client")
    slow = env.peer(hold)
    first = asyncio.create_task(slow.update_client(dataclasses.replace(client, poller_count=5)))
    await asyncio.sleep(0)
    clock.advance(1)
    await store.update_client(dataclasses.replace(client, poller_count=7))
    hold.released.set()  # type: ignore[attr-defined]
    await first
    got = await store.get_client(client_id)
    assert got is not None and got.poller_count == 7


async def test_ttls_count_whole_seconds(store: Store, clock: ManualClock) -> None:
    """Cassandra's expiry is ``floor(write second) + ttl``: written at x.9 with TTL 1, gone at x+1."""
    clock.now = START.replace(microsecond=900_000)
    node = NodeInfo("n1", "10.0.0.1", 9100, START, START)
    await store.heartbeat(node, ttl_s=1)
    clock.advance(0.099)
    assert await store.live_nodes() == [node]
    clock.advance(0.002)
    assert await store.live_nodes() == []


# -- a logged batch Cassandra could not log (a node down, not yet convicted) ---------------------------


async def test_a_create_whose_batchlog_fails_is_written_without_one(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    injected = faults(env, batchlog=("batch:insert_schedule",))
    await store.create_schedule(s, START)
    # The logged batch (nothing applied), then the pointer and signals, then the row alone.
    assert injected.seen == ["batch:insert_schedule", "batch:insert_ref", "batch:insert_schedule"]
    assert await store.get_schedule(client_id, s.schedule_id) == s
    assert [r.schedule_id for r in await read_all(store, s.instance, s.location.minute)] == [s.schedule_id]


async def test_a_create_cut_short_without_its_batchlog_is_not_found_and_fires_nothing(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    faults(env, batchlog=("batch:insert_schedule",), after=("batch:insert_ref",))
    with pytest.raises(StoreUnavailable):
        await store.create_schedule(s, START)  # cut short once the pointer landed
    assert await store.get_ref(client_id, s.schedule_id) is not None
    assert await store.get_schedule(client_id, s.schedule_id) is None
    assert await read_all(store, s.instance, s.location.minute) == []
    await store.create_schedule(s, START)  # the client's retry
    assert await store.get_schedule(client_id, s.schedule_id) == s


async def test_a_move_cut_short_without_its_batchlog_is_retired_by_the_next_change(
    env: Env, store: Store, new_schedule: Factory, client_id: str
) -> None:
    """Cut after the new row and before the old one is retired, a move leaves both live (never the
    old retired without its successor). The client reads the new version; its next change fences the
    old row at its own timestamp, so the old time never fires after an acknowledged change."""
    s = new_schedule(START + timedelta(minutes=10), poller_id=1)
    await store.create_schedule(s, START)
    later = Location(2, START + timedelta(minutes=20))
    faults(env, batchlog=("batch:insert_schedule",), before=("batch:set_status",))
    with pytest.raises(StoreUnavailable):
        await store.replace_schedule(s, dataclasses.replace(s, location=later, fire_at=later.due_at), START)
    both = [r.status for r in await read_all(store, s.instance, s.location.minute) if r.schedule_id == s.schedule_id]
    assert both == [Status.SCHEDULED]  # the old row is still live ...
    read = await store.get_schedule(client_id, s.schedule_id)
    assert read is not None and read.location == later and read.version == 2  # ... beside the new one
    env.inject(NoFaults())
    await store.cancel_schedule(read, START)
    old = [r.status for r in await read_all(store, s.instance, s.location.minute) if r.schedule_id == s.schedule_id]
    assert old == [Status.MOVED]
    new = await store.get_schedule(client_id, s.schedule_id)
    assert new is not None and new.status is Status.CANCELLED
