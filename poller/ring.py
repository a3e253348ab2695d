"""Pure placement: which live node runs which poller instance (consistent hashing with uhashring)."""

from __future__ import annotations

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


def owned_by(node_id: str, instances: Iterable[InstanceKey], node_ids: Iterable[str]) -> set[InstanceKey]:
    return {i for i, owner in assign(instances, node_ids).items() if owner == node_id}
