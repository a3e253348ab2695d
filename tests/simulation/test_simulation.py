"""The deterministic simulation in the suite: a sample of seeds with faults on, the seeds that once
found a defect (kept as regression cases), and a check that a seed replays exactly.

``make test`` runs ``TICKD_SIM_SEEDS`` seeds (default 200) on every core; ``make simulate SEEDS=N``
runs more. A failing seed is printed with the command that replays it.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.simulation.run import Outcome, run_seed

SAMPLE = int(os.environ.get("TICKD_SIM_SEEDS", "200"))
FIRST = int(os.environ.get("TICKD_SIM_FIRST", "1000"))
# Seeds that found a defect (what it was, as first seen); each stays so the defect cannot come back. A
# seed's run changes with the code, so these are kept with the focused tests, not instead of them.
REGRESSIONS: list[tuple[int, bool, str]] = [
    (11, False, "a recurring schedule's next occurrence moved off a draining poller was fired by two nodes"),
    (1, True, "a failed minute read let a drain checkpoint past rows nobody had loaded"),
    (6, True, "a crashed owner's chain finished into the past; overdue occurrences overwrote each other"),
    (9, True, "a retry dropped after a half-landed client change left its row scheduled forever"),
    (17, True, "a fire expanded again after a crash turned delivered events back to scheduled"),
    (18, True, "a failed release left a claim the ring's new owner waited on forever"),
    (19, True, "a node paused past its TTL renewed its heartbeat and fired what another node had taken"),
    (30, True, "a fire expanded again put an event on a second row and delivered it twice"),
    (42, True, "a durable retry's hot mark carried an earlier clock, was ignored, and its row never fired"),
    (43, True, "a half-landed cancel left a dropped occurrence scheduled behind the checkpoint"),
    (55, True, "a claim answered after a fence left the node fenced for good; lost outcome futures"),
    (59, True, "a mark overwritten while marks could not be read hid a create from the re-reads"),
    (94, True, "a stopped move was moved again, past what the next owner recognised: the timeline ended"),
    (256, True, "a reschedule was acknowledged after its slow write outlived the guard"),
    (269, True, "an acknowledged reschedule lost to the old fire while hot marks were slow"),
    (317, True, "a retry row written again after a lost answer came back to life"),
    (416, True, "a node paused mid-delivery requeued a fire the new owner had delivered"),
    (430, True, "a throttle token went to the wrong waiter; an event waited forever"),
    (508, True, "two occurrences' retry rows came due in the same millisecond; one overwrote the other"),
    (5062, True, "a chain retried after its write landed unreported lost the next row; the timeline ended"),
    (5066, True, "a node resumed from a pause closed a minute before reading the marks of its late creates"),
    (5073, True, "a create acknowledged while its owner was paused was checkpointed past, never fired"),
    (5084, True, "a paused owner's recurring occurrence was checkpointed past; its timeline ended"),
    (6361, True, "a node back from a pause polled only the current minutes' hot marks and closed an older open one"),
    (6693, True, "the same: a create acknowledged while its owner was paused landed behind that owner's checkpoint"),
    (6152, True, "the same, for a minute re-read before the pause and never after"),
    (5188, True, "the same, with the row's minute closed by two owners in turn"),
    (8702, True, "a stale owner's retry row landed after the next owner delivered the fire, which sent it again"),
    (8406, True, "a lease guard leaked into tasks a delivery started (and a fix that dropped their context)"),
    (7812, True, "a node frozen mid-way through a durable retry's move finished it after the next owner fired the row"),
    (7584, True, "the oracle: a version in doubt that fired before an acknowledged cancel is not a violation"),
    (7173, True, "a late tokens read showed a token its node had released since, and the gate handed it out"),
    (6183, True, "a quota raised and lowered again between two client reads left a drained instance unclaimed"),
    (11393, True, "a chain moved again to now whose row failed again was taken for another's move; timeline ended"),
    (
        12016,
        True,
        "the oracle: a stale owner's event retry applied after the fire was given up on is a copy, not a loss",
    ),
    (40244, True, "the workload: a reschedule placed its row by a poller count cached before a lost-answer resize"),
    (54851, True, "the oracle: a doubtful version's events, expanded before a later change, may go out after it"),
    (56448, True, "a cancel racing a failed gathered write was swallowed; the instance, and SIGTERM, never ended"),
    (65464, True, "the oracle: an attempt delivered by a node that crashed before recording it, then a cancel"),
    (10, True, "a minute's stream waited for room held by rows stored past its horizon, which waited for it"),
    (71009, True, "a change made in the millisecond of its create lost to the create's pointer (LWT ballot clock)"),
    (73022, True, "a move written without its batchlog, cut short, left the old row live past a later change"),
    (74072, True, "the oracle: an attempt delivered unrecorded before a reschedule of its retry, then the reschedule"),
    (76093, True, "the oracle: a stale retry row behind a checkpoint while its fire was still being retried"),
    (1109, True, "a paused node's durable retry, settled in an unguarded task, landed after the next owner delivered"),
    (76091, True, "a poller's retry move written without its batchlog, cut short: the next owner sent an event twice"),
    (93769, True, "two client changes lost in a row: the third forgot the stale row the second listed; it fired"),
    (95018, True, "the workload: an acknowledged reschedule adopted the version in doubt; its fire id is required"),
    (95603, True, "the run: a throttled backlog (a hostile event behind a limit of one) outlasted settle_s"),
    (103286, True, "a renewal answered after the lease ran out carried it on: a claimed instance fired"),
    (102070, True, "a cancel in the millisecond of its create left the same hot mark and fired"),
    (102673, True, "an instance claimed while its node stopped ran on behind the hand-over"),
    (200056, True, "an auto-pause slower than the poller's superseded mark lost to it: neither paused nor firing"),
    (200181, True, "an auto-pause whose write was lost was not adopted by its retry"),
    (200222, True, "failures counted in a row across an occurrence still in retry"),
    (200531, True, "an auto-pause that landed with its answer lost went unrecorded"),
    (300029, True, "two dead letters at once announced one auto-pause twice"),
    (500082, True, "a bulk job listed before its row landed was dropped by a polling replica and never ran"),
    (1038, True, "a bulk cancel whose write was lost was passed over on retry: the schedule stopped firing"),
    (1171, True, "the oracle dated an auto-pause by its dead letter, not by when it landed"),
    (400029, True, "the oracle missed an attempt whose dispatcher raised: an occurrence in retry at a pause was owed"),
    (400359, True, "an auto-pause lost with its node (pointer moved, status not written) was never finished"),
    (401111, True, "a retry's pointer move forgot the row a lost change left live: it fired after a later change"),
    (402440, True, "the oracle: a change a bulk job lists as failed is not acknowledged (it may have landed)"),
    (404743, True, "an owed auto-pause missed: an occurrence delivered after its trigger hid the streak"),
    (421069, True, "a dropped occurrence marked moved before its owed auto-pause, the pause lost with its node"),
    (440102, True, "a batch re-sent unlogged from gathered tasks the lease guard did not cover, past a handover"),
    (440269, True, "a skip's run lost beside its row's outcome: the occurrence neither delivered nor recorded"),
    (530044, True, "a wake cut short by its node: the next owner dropped it and the schedule never fired again"),
    (530119, True, "a late wake's retried resume took a landed cancel for a lost change and undid it"),
    (601702, True, "a cancel fenced its own row (listed stale by an adopted change): moved won, a wake undid it"),
    (601925, True, "a missed-fire step passed over 25 occurrences, recorded 20: 4 neither fired nor recorded"),
    (601943, True, "the oracle: a timed pause's own occurrence recorded superseded had been stopped by it"),
    (631019, True, "a debounced PUT's new burst took the millisecond of its fire in retry: the new fire never sent"),
    (1046, True, "a backfill fired an occurrence recorded superseded that a crashed node had sent"),
    (631861, True, "the oracle: a stale retry row of a fire already delivered, left behind a checkpoint, was no loss"),
    (633980, True, "fire_once: chained in time, held up past its next occurrence's due time, sent anyway"),
]


def _one(seed: int) -> Outcome:
    return run_seed(seed)


@pytest.mark.timeout(900)
def test_a_sample_of_seeds_breaks_no_invariant() -> None:
    seeds = range(FIRST, FIRST + SAMPLE)
    # Spawned, not forked: the test process may hold threads (the Cassandra driver's) mid-lock.
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn")) as pool:
        outcomes = list(pool.map(_one, seeds, chunksize=4))
    failed = [o for o in outcomes if not o.ok]
    assert len(outcomes) == SAMPLE
    assert not failed, "\n".join(o.report() for o in failed[:10])


@pytest.mark.parametrize(("seed", "faults", "found"), REGRESSIONS, ids=[f"seed{s}" for s, _, _ in REGRESSIONS])
def test_regression_seed(seed: int, faults: bool, found: str) -> None:
    outcome = run_seed(seed, faults=faults)
    assert outcome.ok, f"{found}\n{outcome.report()}"


def test_a_seed_replays_exactly() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.deliveries > 0
    assert (first.fingerprint, first.violations) == (second.fingerprint, second.violations)


def test_a_run_without_faults_delivers_everything() -> None:
    outcome = run_seed(11, faults=False)
    assert outcome.ok, outcome.report()
    assert outcome.promises > 50 and outcome.deliveries >= outcome.promises
