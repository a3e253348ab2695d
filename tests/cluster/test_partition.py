"""C2: one of three Cassandra nodes silently cut off (its packets dropped, the process still running).

Two replicas of three are reachable, so LOCAL_QUORUM and LOCAL_SERIAL can be met: the real ``tickd-api``
should keep answering creates and reads 2xx, quickly. Today it does not: the driver routes each statement to
its partition's first replica (TokenAwarePolicy without shuffling), a request to the cut node waits the
whole store timeout (TICKD_CASSANDRA_TIMEOUT_S, 10 s) and is not retried elsewhere (a client-side
timeout), and the connection is only declared defunct by the driver's idle heartbeat (30 s interval, 30 s
timeout by default). So about a third of the requests answer 503 after 10 s for up to a minute. The test
states the behaviour we want and is an expected failure until the store's driver settings change (see the
report of issue 13); strict, so it turns red the day it passes.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.cluster.conftest import Stage
from tests.cluster.harness import Answer, report, request
from tests.cluster.test_quorum import CLIENT_DEADLINE_S, create, register

WINDOW_S = 40.0
FAST_S = 2.0


@pytest.mark.timeout(900)
@pytest.mark.xfail(
    strict=True,
    reason="with replicas shuffled, a 5 s driver heartbeat and speculative retries of idempotent statements, "
    "a silent replica now fails 3 of 562 requests (was 4 of 10): the non-idempotent ones (LWTs) whose "
    "coordinator is the cut node, in the ~5 s before its heartbeat defuncts it (issue 13)",
)
async def test_c2_one_node_cut_keeps_answering(stage: Stage) -> None:
    api = stage.api().start()
    try:
        await api.wait_ready(stage.session)
        key = await register(stage, api.base)
        made = await create(stage, api.base, key)
        assert made.status == 201, made
        await stage.cluster.cut(3)
        answers: list[Answer] = []
        began = time.monotonic()
        while time.monotonic() - began < WINDOW_S:
            answers.append(await create(stage, api.base, key, idempotency_key=f"c2-{uuid.uuid4().hex}"))
            answers.append(
                await request(
                    stage.session,
                    "GET",
                    f"{api.base}/v1/schedules/{made.body['schedule_id']}",
                    headers=key,
                    deadline_s=CLIENT_DEADLINE_S,
                )
            )
        failed = [a for a in answers if a.status not in (200, 201)]
        slow = [a for a in answers if a.elapsed_s > FAST_S]
        report(
            "C2 one node cut",
            requests=len(answers),
            failed=len(failed),
            slow_over_2s=len(slow),
            max_s=max(a.elapsed_s for a in answers),
        )
        assert not failed, f"{len(failed)} of {len(answers)} answers failed with a quorum available: {failed[:3]}"
        assert not slow, f"{len(slow)} of {len(answers)} answers took over {FAST_S} s with a quorum available"
    finally:
        api.stop()
        await stage.cluster.heal(3)
