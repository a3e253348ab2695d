"""Pure placement: which live node runs which poller instance (consistent hashing with uhashring).

``assign`` is plain consistent hashing: an instance goes to the first node clockwise from its point on the
ring. ``assign_bounded`` caps every node at ``ceil(load_factor x average)`` instances (bounded-load
consistent hashing, Mirrokni, Thorup and Zadimoghaddam 2018): instances are placed in the order of their
points on the ring, each on the first node clockwise that is below the cap. Both are pure functions of
the instances and the membership, so every node computes the same placement with no coordinator.
``make bench-ring`` measures both (the busiest node against the average, and the moves a join or a leave
causes).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from uhashring import HashRing

from tickd.schema.model import Client, InstanceKey


def instances_of(clients: Iterable[Client]) -> list[InstanceKey]:
    """Every poller instance that may hold rows: ids below each client's span (not only its count)."""
    return [InstanceKey(c.client_id, p) for c in clients for p in range(c.poller_span)]


def assign(instances: Iterable[InstanceKey], node_ids: Iterable[str]) -> dict[InstanceKey, str]:
    """Map each instance to one node. The same inputs give the same answer on every node."""
    nodes = sorted(set(node_ids))
    if not nodes:
        return {}
    members = tuple(nodes)
    return {instance: _owner(members, str(instance)) for instance in instances}


@lru_cache(maxsize=65536)
def _owner(nodes: tuple[str, ...], instance: str) -> str:
    """One instance's node for one membership: each reconcile tick asks again for every instance, and an
    md5 per instance per tick adds up when a node runs thousands of them."""
    owner: str = _ring(nodes).get_node(instance)
    return owner


@lru_cache(maxsize=32)
def _ring(nodes: tuple[str, ...]) -> HashRing:
    """Built once per membership (160 md5 points per node): the rebalance tick asks every few seconds."""
    return HashRing(nodes=list(nodes), hash_fn="ketama")


# The cap on a node's instances, as a multiple of the average (HAProxy's hash-balance-factor 125, the usual).
LOAD_FACTOR = 1.25


def capacity(instances: int, nodes: int, load_factor: float = LOAD_FACTOR) -> int:
    """The most instances one node may hold: ``ceil(load_factor x instances / nodes)``, never below the
    average rounded up (so the nodes can hold every instance)."""
    if nodes <= 0:
        return 0
    average = instances / nodes
    return max(math.ceil(average), math.ceil(load_factor * average - 1e-9))


def assign_bounded(
    instances: Iterable[InstanceKey], node_ids: Iterable[str], load_factor: float = LOAD_FACTOR
) -> dict[InstanceKey, str]:
    """Map each instance to one node, no node above ``capacity``. The same inputs give the same answer on
    every node, whatever their order: the instances are placed in the order of their points on the ring
    (ties by name), each on the first node clockwise from its point that has room."""
    if load_factor < 1.0:
        raise ValueError(f"load_factor must be at least 1, not {load_factor}")
    nodes = tuple(sorted(set(node_ids)))
    keys = {str(instance): instance for instance in instances}
    if not nodes:
        return {}
    placed = _bounded(nodes, tuple(sorted(keys)), load_factor)
    return {keys[name]: owner for name, owner in placed.items()}


@lru_cache(maxsize=8)
def _bounded(nodes: tuple[str, ...], names: tuple[str, ...], load_factor: float) -> dict[str, str]:
    ring = _ring(nodes)
    room = capacity(len(names), len(nodes), load_factor)
    load: Counter[str] = Counter()
    placed: dict[str, str] = {}
    for name in sorted(names, key=lambda n: (ring.get_key(n), n)):
        owner = next(node for node in ring.iterate_nodes(name) if load[node] < room)
        placed[name] = owner
        load[owner] += 1
    return placed


def owned_by(node_id: str, instances: Iterable[InstanceKey], node_ids: Iterable[str]) -> set[InstanceKey]:
    return {i for i, owner in assign(instances, node_ids).items() if owner == node_id}
