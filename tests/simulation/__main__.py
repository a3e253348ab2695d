"""``python -m tests.simulation``: run many seeds (``make simulate SEEDS=N``) or replay one."""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tests.simulation.run import Outcome, run_seed


def _one(seed: int) -> Outcome:
    return run_seed(seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run (from --first)")
    parser.add_argument("--first", type=int, default=0, help="the first seed of the range")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    parser.add_argument("--progress", type=int, default=0, help="print a progress line every N seeds")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the log tail of failing seeds")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    started = time.monotonic()
    failed = 0
    done = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for outcome in pool.map(_one, seeds, chunksize=4):
            if not outcome.ok or args.seed is not None:
                print(outcome.report(), flush=True)
                if args.verbose:
                    print("\n".join(f"    {line}" for line in outcome.log_tail[-200:]))
            failed += not outcome.ok
            done += 1
            if args.progress and done % args.progress == 0:
                took = time.monotonic() - started
                line = f"progress {done}/{len(seeds)} failed={failed} {took:.0f} s ({took / done:.2f} s per seed)"
                print(line, flush=True)
    took = time.monotonic() - started
    print(f"{len(seeds)} seeds, {failed} failed, {took:.0f} s ({took / max(1, len(seeds)):.2f} s per seed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
