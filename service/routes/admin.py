"""Read-only admin views of the cluster, for operators and the dashboard (``/ui``).

``GET /v1/admin/nodes``: the poller nodes with a live heartbeat, the instances each one has claimed (with
the claim's epoch), and the instances no live node holds. Built from the store port's reads only: the
membership rows, the client list and one paged read of every claim. Fencing is a node's own state (its
``/status``); from the store it shows as a heartbeat that has gone quiet, then as claims whose owner has
left the membership.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from aiohttp import web
from msgspec import Struct

from tickd.schema.model import Claim, Client, InstanceKey, NodeInfo
from tickd.schema.store import CoordinationStore
from tickd.service import keys
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now


class InstanceView(Struct):
    client_id: str
    poller_id: int
    # The claim's fencing epoch; 0 when the instance was never claimed.
    epoch: int
    # The node id the claim names; None when it was never claimed or was released.
    owner: str | None
    # At or above the client's poller_count: kept running only until drained after a quota decrease.
    draining: bool


class NodeView(Struct):
    node_id: str
    address: str
    metrics_port: int
    started_at: datetime
    heartbeat_at: datetime
    # Seconds since the last heartbeat; a node silent past its TTL less 3 s has fenced itself.
    heartbeat_age_s: float
    instances: list[InstanceView]


class NodesView(Struct):
    at: datetime
    nodes: list[NodeView]
    # Instances that no live node holds: never claimed, released, or claimed by a node that is no longer
    # live (dead or fenced; the ring's next owner takes the claim over).
    unowned: list[InstanceView]


def instances_of(clients: Sequence[Client]) -> list[InstanceKey]:
    """Every instance that may hold rows: ids below each client's span (the pollers' own rule)."""
    return [InstanceKey(c.client_id, p) for c in clients for p in range(c.poller_span)]


async def _claims(store: CoordinationStore, instances: Sequence[InstanceKey]) -> list[Claim | None]:
    """The claim of each of ``instances`` (None: never claimed), from one paged read of every claim: a
    read per instance took seconds once hundreds of clients were registered."""
    claims = {claim.instance: claim for claim in await store.list_claims()}
    return [claims.get(instance) for instance in instances]


def _instance(key: InstanceKey, claim: Claim | None, counts: dict[str, int]) -> InstanceView:
    owner, epoch = (claim.owner, claim.epoch) if claim is not None else (None, 0)
    return InstanceView(key.client_id, key.poller_id, epoch, owner, key.poller_id >= counts[key.client_id])


def _node(node: NodeInfo, at: datetime, instances: list[InstanceView]) -> NodeView:
    age_s = round(max(0.0, (at - node.heartbeat_at).total_seconds()), 3)
    return NodeView(node.node_id, node.address, node.metrics_port, node.started_at, node.heartbeat_at, age_s, instances)


def nodes_view(
    nodes: Sequence[NodeInfo], clients: Sequence[Client], claims: Sequence[Claim | None], at: datetime
) -> NodesView:
    """Group the instances by the live node that holds them; the rest are unowned."""
    counts = {c.client_id: c.poller_count for c in clients}
    held: dict[str, list[InstanceView]] = {n.node_id: [] for n in nodes}
    unowned: list[InstanceView] = []
    for key, claim in zip(instances_of(clients), claims, strict=True):
        view = _instance(key, claim, counts)
        held.get(view.owner or "", unowned).append(view)
    ordered = sorted(nodes, key=lambda n: n.node_id)
    return NodesView(at, [_node(n, at, held[n.node_id]) for n in ordered], unowned)


routes = Routes("admin", auth="admin")


@routes.get(
    "/v1/admin/nodes",
    "The live poller nodes, the instances each one holds with their epochs, and the instances none holds",
    response=NodesView,
    description=(
        "Read from the store: membership, the client list and each instance's claim. A node fences itself "
        "when its heartbeat has not been answered for TICKD_NODE_TTL_S less 3 s; here that shows as a "
        "growing heartbeat_age_s, then as its claims listed under unowned with their old owner."
    ),
)
async def list_nodes(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    store = request.app[keys.STORE]
    nodes, clients = await asyncio.gather(store.live_nodes(), store.list_clients())
    clients = sorted(clients, key=lambda c: c.client_id)
    claims = await _claims(store, instances_of(clients))
    return json_response(nodes_view(nodes, clients, claims, now()))
