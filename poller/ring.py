"""Pure placement: which live node runs which poller instance.

``owned_by`` (what ``claims.Placement`` asks every reconcile tick) uses ``assign_bounded``: rendezvous
hashing with bounded loads. Every (node, instance) pair has a score, 64 bits of an md5 of both names (the
same in every process, whatever PYTHONHASHSEED); an instance belongs to its best-scored node, unless more
instances than ``capacity`` (``ceil(load_factor x average)``) score best on that node. Such a node keeps
its best-scored instances up to the cap; the others go, the best-scored (instance, node) pair first, to
the nodes with room. The answer is a pure function of the instances, the live node ids and the load
factor, in any order, so every node computes the same placement with no coordinator; claims and fencing
(``claims.py``) still decide who runs an instance while nodes disagree for a moment (a membership or a
client list read at different times).

Why rendezvous and not the ring walk this module had first (each instance, in the order of its ring point,
on the first node clockwise with room): over the same 200 random memberships per size (``make bench-ring``,
3 to 30 nodes) the worst join moved 1.51-1.75x the least possible instead of 1.86-2.33x, the worst leave
1.40-2.00x instead of 1.71-2.00x, and 65 of the 1,600 joins and leaves moved more than 1.5x instead of 118;
the medians are 1.0-1.33x for both. Neither keeps every move within 1.5x: a node more instances want than
its cap keeps only its best-scored ones, so when a join takes some of those, or a leave raises the cap,
instances it had passed on come back (moves no single join or leave needs). ``assign`` is the plain
consistent hashing (uhashring ketama) the nodes ran before issue 29, kept as the bench's baseline.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache

from uhashring import HashRing

from tickd.schema.model import Client, InstanceKey

# The cap on a node's instances, as a multiple of the average (HAProxy's hash-balance-factor 125, the usual).
LOAD_FACTOR = 1.25

Ranked = dict[str, list[tuple[int, str]]]  # instance name -> (score, node) for every node


def instances_of(clients: Iterable[Client]) -> list[InstanceKey]:
    """Every poller instance that may hold rows: ids below each client's span (not only its count)."""
    return [InstanceKey(c.client_id, p) for c in clients for p in range(c.poller_span)]


def owned_by(
    node_id: str, instances: Iterable[InstanceKey], node_ids: Iterable[str], load_factor: float = LOAD_FACTOR
) -> set[InstanceKey]:
    """The instances the bounded placement gives ``node_id``."""
    return {i for i, owner in assign_bounded(instances, node_ids, load_factor).items() if owner == node_id}


def capacity(instances: int, nodes: int, load_factor: float = LOAD_FACTOR) -> int:
    """The most instances one node may hold: ``load_factor x instances / nodes`` rounded down, so no node
    holds more than ``load_factor`` times the average where whole instances allow it, and never below the
    average rounded up (so the nodes can hold every instance). Rounded up instead, 2 instances on 2 nodes
    could both land on one (a cap of ceil(1.25) = 2), leaving the other idle (acceptance S11)."""
    if nodes <= 0:
        return 0
    average = instances / nodes
    return max(math.ceil(average - 1e-9), math.floor(load_factor * average + 1e-9))


def assign_bounded(
    instances: Iterable[InstanceKey], node_ids: Iterable[str], load_factor: float = LOAD_FACTOR
) -> dict[InstanceKey, str]:
    """Map each instance to one node, no node above ``capacity``. The same inputs give the same answer on
    every node, whatever their order or repeats."""
    if not load_factor >= 1.0:
        raise ValueError(f"load_factor must be at least 1, not {load_factor}")
    nodes = tuple(sorted(set(node_ids)))
    keys = {str(instance): instance for instance in instances}
    if not nodes:
        return {}
    placed = _bounded(nodes, tuple(sorted(keys)), load_factor)
    return {keys[name]: owner for name, owner in placed.items()}


@lru_cache(maxsize=8)
def _bounded(nodes: tuple[str, ...], names: tuple[str, ...], load_factor: float) -> dict[str, str]:
    """Built once per membership and instance set: the reconcile tick asks every second."""
    room = capacity(len(names), len(nodes), load_factor)
    ranked = {name: [(_score(node, name), node) for node in nodes] for name in names}
    placed, passed_on = _keep_best(ranked, room)
    return placed | _place_rest(passed_on, ranked, room, Counter(placed.values()))


def _score(node: str, name: str) -> int:
    digest = hashlib.md5(f"{node}\x00{name}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


def _keep_best(ranked: Ranked, room: int) -> tuple[dict[str, str], list[str]]:
    """Each instance on its best-scored node; a node more instances want keeps its best-scored ``room``."""
    wanted: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for name, scores in ranked.items():
        score, node = max(scores)
        wanted[node].append((score, name))
    placed: dict[str, str] = {}
    passed_on: list[str] = []
    for node, names in wanted.items():
        names.sort(reverse=True)
        placed.update((name, node) for _, name in names[:room])
        passed_on += [name for _, name in names[room:]]
    return placed, passed_on


def _place_rest(names: list[str], ranked: Ranked, room: int, load: Counter[str]) -> dict[str, str]:
    """Instances a full node passed on, onto nodes with room: the best-scored (instance, node) pair first."""
    pairs = sorted(((s, name, node) for name in names for s, node in ranked[name] if load[node] < room), reverse=True)
    placed: dict[str, str] = {}
    for _, name, node in pairs:
        if name not in placed and load[node] < room:
            placed[name] = node
            load[node] += 1
    return placed


def assign(instances: Iterable[InstanceKey], node_ids: Iterable[str]) -> dict[InstanceKey, str]:
    """Plain consistent hashing, no cap (the placement before issue 29; ``make bench-ring``'s baseline)."""
    nodes = sorted(set(node_ids))
    if not nodes:
        return {}
    members = tuple(nodes)
    return {instance: _owner(members, str(instance)) for instance in instances}


@lru_cache(maxsize=65536)
def _owner(nodes: tuple[str, ...], instance: str) -> str:
    owner: str = _ring(nodes).get_node(instance)
    return owner


@lru_cache(maxsize=32)
def _ring(nodes: tuple[str, ...]) -> HashRing:
    """160 md5 points per node, built once per membership."""
    return HashRing(nodes=list(nodes), hash_fn="ketama")
