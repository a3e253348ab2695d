"""Issue 27, missed fires: the chain step of a recurring schedule whose occurrence comes up late, as an
instance runs it over the memory store. skip: a late occurrence is recorded skipped and the timeline goes
on at the first occurrence that can still start in time; fire_once: only the latest of the late ones
fires; fire_all (the default): every one fires; a schedule without a policy takes its client's."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import msgspec

from tests.unit.test_calendar_chain import Instance
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.fire import Fire, Sender
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.throttle import ThrottleGate
from tickd.schema.missed import Missed
from tickd.schema.model import Chain, Chained, ClientSettings, Repeat, Schedule, Status

EVERY_10S = Repeat(every_s=10)


async def late(inst: Instance, row: Schedule, by_s: float, *, deliver: bool = True) -> tuple[Schedule, Chained]:
    """The schedule's current occurrence comes up ``by_s`` after its due time: chained, then (unless
    skipped, or not ``deliver``) delivered. The fire is kept as ``inst.last_fire``."""
    current = await inst.current(row)
    inst.clock.now = current.location.due_at + timedelta(seconds=by_s)
    fire = inst.last_fire = Fire(current, OpenMinute(current.location.minute))
    chained = await inst.settler.chain(fire)
    assert chained is not None
    if deliver and chained.outcome in (Chain.CHAINED, Chain.ALREADY):
        fire.went_out(inst.clock.now)
        fire.result = DeliveryResult.delivered(1)
        await inst.settler.settle(fire)
    return current, chained


async def every_10s(inst: Instance, missed: Missed | None) -> Schedule:
    start = inst.clock.now + timedelta(seconds=10)
    repeat = msgspec.structs.replace(EVERY_10S, start_at=start, missed=missed)
    return await inst.create(repeat, start)


async def test_skip_goes_on_at_the_first_occurrence_that_can_still_start_in_time() -> None:
    inst = Instance()
    row = await every_10s(inst, Missed("skip", 60))
    start = row.fire_at
    skipped, chained = await late(inst, row, 95)
    assert chained.outcome is Chain.SKIPPED
    following = await inst.current(row)
    # 95 s late, a 60 s deadline: +40 s is the first occurrence meant due within 60 s of now.
    assert (following.fire_at, following.seq, following.status) == (start + timedelta(seconds=40), 1, Status.SCHEDULED)
    runs = {r.nominal_at: r for r in await inst.runs(row)}
    assert [(t - start).seconds for t in sorted(runs)] == [0, 10, 20, 30]
    assert all(r.status is Status.SKIPPED and r.fired_at is None for r in runs.values())
    assert runs[start].last_error == "skipped: missed (95.0 s late, start deadline 60 s)"
    _, chained = await late(inst, row, 0)  # +40 s, due now (55 s after it was meant to be): fires
    assert chained.outcome is Chain.CHAINED
    assert runs[start].seq == skipped.seq


async def test_fire_once_fires_only_the_latest_of_the_late_occurrences() -> None:
    inst = Instance()
    row = await every_10s(inst, Missed("fire_once", 30))
    start = row.fire_at
    _, chained = await late(inst, row, 95)
    assert chained.outcome is Chain.SKIPPED
    latest = await inst.current(row)
    assert latest.fire_at == start + timedelta(seconds=90)  # the last one due by now
    inst_now = inst.clock.now
    _, chained = await late(inst, row, 0)
    assert chained.outcome is Chain.CHAINED and inst.clock.now == max(inst_now, latest.location.due_at)
    runs = {r.nominal_at: r.status for r in await inst.runs(row)}
    assert runs.pop(start + timedelta(seconds=90)) is Status.SUCCEEDED
    assert set(runs.values()) == {Status.SKIPPED} and len(runs) == 9  # 0, 10, ... 80


async def test_fire_all_fires_every_late_occurrence_and_is_the_default() -> None:
    inst = Instance()
    row = await every_10s(inst, None)
    _, chained = await late(inst, row, 95)
    assert chained.outcome is Chain.CHAINED
    assert (await inst.current(row)).fire_at == row.fire_at + timedelta(seconds=10)  # the next, late too


async def test_a_schedule_without_a_policy_takes_its_clients_and_its_own_wins() -> None:
    inst = Instance()
    inst.client = dataclasses.replace(inst.client, settings=ClientSettings(missed=Missed("skip", 30)))
    row = await every_10s(inst, None)
    _, chained = await late(inst, row, 45)
    assert chained.outcome is Chain.SKIPPED
    own = await every_10s(inst, Missed())  # fire_all, said by the schedule itself
    _, chained = await late(inst, own, 45)
    assert chained.outcome is Chain.CHAINED


class _Refusing:
    """A dispatcher that must not be called."""

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: object) -> DeliveryResult:
        raise AssertionError(f"{schedule.fire_id} was sent past its start deadline")


async def test_a_skip_fire_whose_deadline_passes_while_it_waits_to_go_out_is_recorded_skipped_not_sent() -> None:
    inst = Instance()
    row = await every_10s(inst, Missed("skip", 5))
    current, chained = await late(inst, row, 2, deliver=False)
    assert chained.outcome is Chain.CHAINED  # on time when chained
    fire = inst.last_fire
    assert fire.start_by == current.fire_at + timedelta(seconds=5)
    inst.clock.now = fire.start_by + timedelta(milliseconds=1)  # its send slots came too late
    settings = PollerSettings(node_id="n0", metrics_port=0)
    ctx = inst.settler._ctx
    gate = ThrottleGate(inst.store, "n0", inst.clock, Metrics())
    sender = Sender(ctx, CallbackRouter(_Refusing(), _Refusing()), SendSlots.of(settings), gate)  # type: ignore[arg-type]
    await sender.send(fire)
    assert fire.skipped and fire.result is None
    await inst.settler.skip_late(fire)
    [run] = [r for r in await inst.runs(row) if r.nominal_at == current.fire_at]
    assert run.status is Status.SKIPPED and run.fired_at is None
    assert run.last_error == "skipped: missed (its start deadline passed 0.0 s before it could go out)"
    assert (await inst.current(row)).fire_at == current.fire_at + timedelta(seconds=10)  # the timeline goes on


async def test_a_fire_once_fire_held_up_until_its_next_occurrence_is_due_is_not_sent_that_one_is() -> None:
    """Seed 633980: chained in time, its send held up (an outage, slots) past its deadline and past its next
    occurrence's due time: that one is now the latest missed and fires once; this one is recorded skipped.
    Held up past its deadline only, it still goes out (it is the latest due)."""
    inst = Instance()
    row = await every_10s(inst, Missed("fire_once", 5))
    current, chained = await late(inst, row, 2, deliver=False)
    assert chained.outcome is Chain.CHAINED and chained.following is not None
    fire = inst.last_fire
    assert fire.start_by == chained.following.fire_at  # later than its own deadline (5 s)
    settings = PollerSettings(node_id="n0", metrics_port=0)
    ctx = inst.settler._ctx
    gate = ThrottleGate(inst.store, "n0", inst.clock, Metrics())
    inst.clock.now = current.fire_at + timedelta(seconds=8)  # past its deadline, before the next is due
    assert inst.clock.now <= fire.start_by
    inst.clock.now = fire.start_by + timedelta(milliseconds=1)  # the next occurrence is due now
    sender = Sender(ctx, CallbackRouter(_Refusing(), _Refusing()), SendSlots.of(settings), gate)  # type: ignore[arg-type]
    await sender.send(fire)
    assert fire.skipped and fire.result is None
    await inst.settler.skip_late(fire)
    [run] = [r for r in await inst.runs(row) if r.nominal_at == current.fire_at]
    assert run.status is Status.SKIPPED
    assert run.last_error == "skipped: missed (its next occurrence came due 0.0 s before it could go out)"
