"""An instance's fires in flight (``slots.FireLanes``), on its own: the bound on fires in flight, workers
that run queued fires one after another and survive a fire that raises, and an abandon that cancels what
runs and hands back what was queued."""

from __future__ import annotations

import asyncio

from tickd.poller.slots import FireLanes


async def turns(count: int = 10) -> None:
    """Let the ready tasks run ``count`` steps (turns of the event loop: the same on any machine)."""
    for _ in range(count):
        await asyncio.sleep(0)


class Fires:
    """Fires that each wait to be let go (``done``), noting which ran and which crashed."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.crashed: list[BaseException] = []
        self.done: dict[str, asyncio.Event] = {}

    async def run(self, name: str) -> None:
        self.ran.append(name)
        if name.startswith("bad"):
            raise ValueError(name)
        await self.done.setdefault(name, asyncio.Event()).wait()


async def test_room_waits_until_a_fire_ends() -> None:
    fires = Fires()
    lanes: FireLanes[str] = FireLanes(2, 1, fires.run, fires.crashed.append)
    assert await lanes.room() == 2
    lanes.taken()
    lanes.taken()
    waiting = asyncio.create_task(lanes.room())
    await turns()
    assert not waiting.done() and lanes.count == 2
    lanes.release(1)
    assert await asyncio.wait_for(waiting, 1.0) == 1


async def test_a_worker_runs_queued_fires_in_turn_and_goes_on_after_one_raises() -> None:
    fires = Fires()
    lanes: FireLanes[str] = FireLanes(10, 1, fires.run, fires.crashed.append)
    for name in ("bad-1", "a", "b"):
        lanes.taken()
        lanes.queue(name)
    await turns()
    assert fires.ran == ["bad-1", "a"]  # one worker: "b" waits for "a"
    assert [str(e) for e in fires.crashed] == ["bad-1"]
    fires.done["a"].set()
    await turns()
    assert fires.ran == ["bad-1", "a", "b"]


async def test_abandon_cancels_what_runs_and_returns_what_was_queued() -> None:
    fires = Fires()
    lanes: FireLanes[str] = FireLanes(10, 1, fires.run, fires.crashed.append)
    for _ in range(3):
        lanes.taken()
    lanes.spawn(fires.run("a"))
    lanes.queue("b")
    lanes.queue("c")
    await turns()
    assert fires.ran == ["a", "b"]
    assert lanes.abandon() == ["c"]  # released: only "a" and "b" still count until they end
    assert lanes.count == 2
    await turns()
    assert fires.crashed == []  # a cancelled fire is not a crash
