"""The deterministic simulation in the suite: a sample of seeds with faults on, the seeds that once
found a defect (kept as regression cases), and a check that a seed replays exactly.

``make test`` runs ``TICKD_SIM_SEEDS`` seeds (default 200) on every core; ``make simulate SEEDS=N``
runs more. A failing seed is printed with the command that replays it.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.simulation.run import Outcome, run_seed

SAMPLE = int(os.environ.get("TICKD_SIM_SEEDS", "200"))
FIRST = int(os.environ.get("TICKD_SIM_FIRST", "100000"))
# Seeds that found a defect once (with what they found); each stays so the defect cannot come back.
REGRESSIONS: list[tuple[int, str]] = []


def _one(seed: int) -> Outcome:
    return run_seed(seed)


@pytest.mark.timeout(900)
def test_a_sample_of_seeds_breaks_no_invariant() -> None:
    seeds = range(FIRST, FIRST + SAMPLE)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        outcomes = list(pool.map(_one, seeds, chunksize=4))
    failed = [o for o in outcomes if not o.ok]
    assert len(outcomes) == SAMPLE
    assert not failed, "\n".join(o.report() for o in failed[:10])


@pytest.mark.parametrize(("seed", "found"), REGRESSIONS, ids=[f"seed{s}" for s, _ in REGRESSIONS])
def test_regression_seed(seed: int, found: str) -> None:
    outcome = run_seed(seed)
    assert outcome.ok, f"{found}\n{outcome.report()}"


def test_a_seed_replays_exactly() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.deliveries > 0
    assert (first.fingerprint, first.violations) == (second.fingerprint, second.violations)


def test_a_run_without_faults_delivers_everything() -> None:
    outcome = run_seed(11, faults=False)
    assert outcome.ok, outcome.report()
    assert outcome.promises > 50 and outcome.deliveries >= outcome.promises
