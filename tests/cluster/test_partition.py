"""C2: one of three Cassandra nodes silently cut off (its packets dropped, the process still running).

Two replicas of three are reachable, so LOCAL_QUORUM and LOCAL_SERIAL can be met. The driver routes each
statement to a shuffled replica, sends an idempotent one to the next replica too after 0.5 s (speculative
execution; every statement of a create and a read is, the Idempotency-Key reservation included), and its
5 s idle heartbeat declares a silent connection dead; a request the driver then gives up on only because
that connection died is sent once more, with its first send's client timestamp
(schema.cassandra.bridge.connections_lost). Before a create's batch was sent again too, such a create was
a 503, seen once in four runs. The test pins the bound on what is left: failures only as timely 503s
(within the API's store budget), only within ``CUT_GRACE_S`` of the cut; after it every answer is a
fast 2xx.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.cluster.conftest import Stage
from tests.cluster.harness import Answer, report
from tests.cluster.test_quorum import create, read, with_one_schedule

WINDOW_S = 40.0
FAST_S = 2.0


# The driver's heartbeat (5 s interval) plus its timeout, and the store timeout of a request sent just
# before the connection was declared defunct.
CUT_GRACE_S = 20.0


@pytest.mark.timeout(900)
async def test_c2_one_node_cut_fails_only_until_the_driver_drops_it(stage: Stage) -> None:
    api = stage.api().start()
    try:
        key, made = await with_one_schedule(stage, api)
        await stage.cluster.cut(3)
        cut_at = time.monotonic()
        answers: list[tuple[float, Answer]] = []
        while time.monotonic() - cut_at < WINDOW_S:
            sent = time.monotonic() - cut_at
            answers.append((sent, await create(stage, api.base, key, idempotency_key=f"c2-{uuid.uuid4().hex}")))
            sent = time.monotonic() - cut_at
            answers.append((sent, await read(stage, api.base, key, str(made.body["schedule_id"]))))
        failed = [(t, a) for t, a in answers if a.status not in (200, 201)]
        after = [(t, a) for t, a in answers if t > CUT_GRACE_S]
        report(
            "C2 one node cut",
            requests=len(answers),
            failed=len(failed),
            last_failure_after_cut_s=max((t for t, _ in failed), default=0.0),
            slow_over_2s=sum(1 for _, a in answers if a.elapsed_s > FAST_S),
            max_s=max(a.elapsed_s for _, a in answers),
        )
        for t, a in failed:  # in full: which request failed, when, and how (pytest's repr cuts it)
            print(f"  failed at {t:.2f} s: {a.status} after {a.elapsed_s:.2f} s: {a.body}", flush=True)
        # A request that hung would end at the client's deadline with status 0, not 503.
        assert all(a.status == 503 for _, a in failed), failed[:3]
        # A request the driver still sends to the cut node waits out the store timeout (10 s, the whole store
        # budget) and answers 503: no failure after the grace is also no request waiting on the cut node.
        assert all(t <= CUT_GRACE_S for t, _ in failed), f"failures after {CUT_GRACE_S} s: {failed[:3]}"
        assert len(after) >= 20, f"only {len(after)} requests after the grace: widen WINDOW_S"
    finally:
        api.stop()
        await stage.cluster.heal(3)
