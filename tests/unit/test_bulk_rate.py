"""``service.bulk.Rate``, the token bucket a tenant's bulk jobs and each backfill are paced by, on the
simulation's virtual clock (time moves only when every task waits): it hands out ``per_s`` tokens a
second after its burst, and always ends its wait (seed 1001 of the backfill branch: waiting in a loop for a
whole token, a rounding error short of 1 asked for sleeps too short to move the clock, for ever)."""

from __future__ import annotations

import asyncio

import pytest

from tests.simulation import vloop
from tickd.service.bulk import Rate

pytestmark = pytest.mark.timeout(60)  # the old wait spun for ever: a hang is this failure


async def _takes(rate: Rate, n: int, start_at: float = 0.0) -> list[float]:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(start_at)
    times = []
    for _ in range(n):
        await rate.wait("c1")
        times.append(loop.time())
    return times


@pytest.mark.parametrize(("per_s", "burst"), [(2.0, 1.0), (5.0, 1.0), (20.0, 20.0), (3.0, 1.0), (0.7, 1.0)])
def test_tokens_come_at_the_rate_after_the_burst_and_every_wait_ends(per_s: float, burst: float) -> None:
    times = vloop.run(_takes(Rate(per_s, burst), 40, start_at=105.98042632383017))
    start = times[0]
    for i, at in enumerate(times):
        owed = max(0.0, (i + 1 - burst) / per_s)
        assert at - start == pytest.approx(owed, abs=1e-6), (i, at - start, owed)


def test_two_waiters_share_the_rate() -> None:
    async def both() -> list[float]:
        rate = Rate(4.0, 1.0)
        a, b = await asyncio.gather(_takes(rate, 10), _takes(rate, 10))
        return sorted(a + b)

    times = vloop.run(both())
    assert times[-1] - times[0] == pytest.approx(19 / 4.0, abs=1e-6)  # 20 tokens at 4 a second, one at once
