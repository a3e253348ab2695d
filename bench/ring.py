"""``make bench-ring``: how evenly the ring places poller instances, and how many move on a join or a leave.

No servers: ``poller.ring`` is a pure function of the instances and the membership. For each size (nodes,
instances), many random memberships are drawn (random node ids, random client ids with 16 poller ids
each); each is placed by plain consistent hashing (``ring.assign``) and with bounded loads
(``ring.assign_bounded``, load factor ``ring.LOAD_FACTOR``). Per draw: the busiest node's instances over
the average; an idle node (plain); and, after one random node joins or one leaves, the instances that moved
over the least that must: on a join the new node's fair share (instances / (nodes + 1)), on a leave the
instances the leaving node held.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tickd.poller import ring
from tickd.schema.model import InstanceKey

Place = Callable[[Sequence[InstanceKey], Sequence[str]], dict[InstanceKey, str]]
# (nodes, instances): the sizes issue 29 names (3 x 12, 6 x 48, 10 x 160), and 30 nodes at 16 each.
SIZES = ((3, 12), (6, 48), (10, 160), (30, 480))
POLLERS_PER_CLIENT = 16


@dataclass
class Draws:
    busiest: list[float] = field(default_factory=list)
    idle: int = 0
    join: list[float] = field(default_factory=list)
    leave: list[float] = field(default_factory=list)


def node_ids(rng: random.Random, count: int) -> list[str]:
    return [f"node-{rng.getrandbits(40):010x}" for _ in range(count)]


def instances(rng: random.Random, count: int) -> list[InstanceKey]:
    clients = -(-count // POLLERS_PER_CLIENT)
    keys = [InstanceKey(f"c{rng.getrandbits(40):010x}", p) for _ in range(clients) for p in range(POLLERS_PER_CLIENT)]
    return keys[:count]


def measure(place: Place, keys: list[InstanceKey], nodes: list[str], rng: random.Random, out: Draws) -> None:
    placed = place(keys, nodes)
    load = Counter(placed.values())
    out.busiest.append(max(load[n] for n in nodes) / (len(keys) / len(nodes)))
    out.idle += any(load[n] == 0 for n in nodes)
    joined = place(keys, [*nodes, *node_ids(rng, 1)])
    out.join.append(sum(placed[k] != joined[k] for k in keys) / (len(keys) / (len(nodes) + 1)))
    gone = nodes[rng.randrange(len(nodes))]
    left = place(keys, [n for n in nodes if n != gone])
    out.leave.append(sum(placed[k] != left[k] for k in keys) / max(1, load[gone]))


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):.2f} / {p90:.2f} / {ordered[-1]:.2f}"


def run(draws: int, seed: int) -> list[str]:
    rows = []
    for nodes_n, keys_n in SIZES:
        rng = random.Random(seed * 1000 + nodes_n)
        plain, bounded = Draws(), Draws()
        started = time.process_time()
        for _ in range(draws):
            nodes, keys = node_ids(rng, nodes_n), instances(rng, keys_n)
            state = rng.getstate()
            measure(ring.assign, keys, nodes, rng, plain)
            rng.setstate(state)  # the same joining and leaving node for both
            measure(ring.assign_bounded, keys, nodes, rng, bounded)
        cpu_ms = 1000 * (time.process_time() - started) / draws
        cap = ring.capacity(keys_n, nodes_n)
        rows.append(
            f"| {nodes_n} | {keys_n} | {draws} | {spread(plain.busiest)} | {100 * plain.idle / draws:.0f}% | "
            f"{spread(bounded.busiest)} ({cap}) | {bounded.idle} | {statistics.mean(plain.join):.2f} / "
            f"{spread(plain.join)} | {statistics.mean(bounded.join):.2f} / {spread(bounded.join)} | "
            f"{statistics.mean(plain.leave):.2f} / {spread(plain.leave)} | {statistics.mean(bounded.leave):.2f} / "
            f"{spread(bounded.leave)} | {cpu_ms:.0f} |"
        )
        print(f"  {nodes_n} nodes x {keys_n} instances: done", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-ring", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--draws", type=int, default=200, help="random memberships per size")
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args(argv)
    rows = run(args.draws, args.seed)
    print(f"\n### bench-ring: load factor {ring.LOAD_FACTOR}, {args.draws} memberships per size (seed {args.seed})\n")
    print(
        "| nodes | instances | draws | plain: busiest / average (median / p90 / max) | plain: an idle node | "
        "bounded: busiest / average (cap) | bounded: idle | plain: join moves / ideal (mean / median / p90 / "
        "max) | bounded: join moves / ideal | plain: leave moves / ideal | bounded: leave moves / ideal | "
        "CPU ms per draw |"
    )
    print("|---:|---:|---:|---|---:|---|---:|---|---|---|---|---:|")
    print("\n".join(rows))
    print(
        "\nIdeal moves: on a join, instances / (nodes + 1), the new node's fair share; on a leave, what the "
        "leaving node held. A draw's CPU covers both placements of its membership, its join and its leave."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
