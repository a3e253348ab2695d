"""``make bench-ring``: how evenly placement spreads poller instances, and how many move on a join or a leave.

No servers: ``poller.ring`` is a pure function of the instances and the membership. For each size (nodes,
instances), many random memberships are drawn (random node ids, random client ids with 16 poller ids
each); each is placed by plain consistent hashing (``ring.assign``, what the nodes ran before issue 29)
and with bounded loads (``ring.assign_bounded``, what they run now, at ``--load-factor``). Per draw: the
busiest node's instances over the average; after one random node joins or one leaves, the instances that
moved over the least that must: on a join the new node's fair share (instances / (nodes + 1)), on a leave
the instances the leaving node held; and the instances already placed that move when one more client
(16 poller ids) registers (the least is none).
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
from functools import partial

from tickd.poller import ring
from tickd.schema.model import InstanceKey

Place = Callable[[Sequence[InstanceKey], Sequence[str]], dict[InstanceKey, str]]
# (nodes, instances): the sizes issue 29 names (3 x 12, 6 x 48, 10 x 160), and 30 nodes at 16 each.
SIZES = ((3, 12), (6, 48), (10, 160), (30, 480))
POLLERS_PER_CLIENT = 16
TARGET = 1.5  # issue 29: moves at most 1.5x the least possible


@dataclass
class Draws:
    busiest: list[float] = field(default_factory=list)
    join: list[float] = field(default_factory=list)
    leave: list[float] = field(default_factory=list)
    client_added: list[int] = field(default_factory=list)


def node_ids(rng: random.Random, count: int) -> list[str]:
    return [f"node-{rng.getrandbits(40):010x}" for _ in range(count)]


def instances(rng: random.Random, count: int) -> list[InstanceKey]:
    clients = -(-count // POLLERS_PER_CLIENT)
    keys = [InstanceKey(f"c{rng.getrandbits(40):010x}", p) for _ in range(clients) for p in range(POLLERS_PER_CLIENT)]
    return keys[:count]


def moved(before: dict[InstanceKey, str], after: dict[InstanceKey, str]) -> int:
    return sum(before[k] != after[k] for k in before)


def measure(place: Place, keys: list[InstanceKey], nodes: list[str], rng: random.Random, out: Draws) -> None:
    placed = place(keys, nodes)
    load = Counter(placed.values())
    out.busiest.append(max(load[n] for n in nodes) / (len(keys) / len(nodes)))
    joined = place(keys, [*nodes, *node_ids(rng, 1)])
    out.join.append(moved(placed, joined) / (len(keys) / (len(nodes) + 1)))
    gone = nodes[rng.randrange(len(nodes))]
    out.leave.append(moved(placed, place(keys, [n for n in nodes if n != gone])) / max(1, load[gone]))
    grown = place([*keys, *instances(rng, POLLERS_PER_CLIENT)], nodes)
    out.client_added.append(sum(placed[k] != grown[k] for k in keys))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def row(nodes_n: int, keys_n: int, plain: Draws, bounded: Draws, cap: int, cpu_ms: float) -> str:
    over = sum(v > TARGET + 1e-9 for v in bounded.join + bounded.leave)
    return (
        f"| {nodes_n} | {keys_n} | {len(plain.busiest)} | {max(plain.busiest):.2f} | {spread(plain.join)} | "
        f"{spread(plain.leave)} | {max(bounded.busiest):.2f} ({cap}) | {spread(bounded.join)} | "
        f"{spread(bounded.leave)} | {over} | {statistics.median(bounded.client_added):.0f} / "
        f"{max(bounded.client_added)} | {cpu_ms:.0f} |"
    )


def run(draws: int, seed: int, load_factor: float) -> list[str]:
    rows = []
    bounded_place: Place = partial(ring.assign_bounded, load_factor=load_factor)
    for nodes_n, keys_n in SIZES:
        rng = random.Random(seed * 1000 + nodes_n)
        plain, bounded = Draws(), Draws()
        started = time.process_time()
        for _ in range(draws):
            nodes, keys = node_ids(rng, nodes_n), instances(rng, keys_n)
            state = rng.getstate()
            measure(ring.assign, keys, nodes, rng, plain)
            rng.setstate(state)  # the same joining and leaving node, and the same new client, for both
            measure(bounded_place, keys, nodes, rng, bounded)
        cpu_ms = 1000 * (time.process_time() - started) / draws
        rows.append(row(nodes_n, keys_n, plain, bounded, ring.capacity(keys_n, nodes_n, load_factor), cpu_ms))
        print(f"  {nodes_n} nodes x {keys_n} instances: done", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-ring", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--draws", type=int, default=200, help="random memberships per size")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--load-factor", type=float, default=ring.LOAD_FACTOR)
    args = parser.parse_args(argv)
    rows = run(args.draws, args.seed, args.load_factor)
    print(f"\n### bench-ring: load factor {args.load_factor}, {args.draws} memberships per size (seed {args.seed})\n")
    print(
        "| nodes | instances | draws | plain: busiest / average, max | plain: join moves / ideal, median / max | "
        "plain: leave moves / ideal | bounded: busiest / average, max (cap) | bounded: join moves / ideal | "
        f"bounded: leave moves / ideal | bounded: joins and leaves over {TARGET}x | bounded: placed instances "
        "moved by a new client, median / max | CPU ms per draw |"
    )
    print("|---:|---:|---:|---:|---|---|---|---|---|---:|---|---:|")
    print("\n".join(rows))
    print(
        "\nIdeal moves: on a join, instances / (nodes + 1), the new node's fair share; on a leave, what the "
        "leaving node held; for a new client, none (plain hashing moves none). A draw's CPU covers both "
        "placements of its membership, its join, its leave and its new client."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
