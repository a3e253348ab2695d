"""A client's throttle policies, over the store port: create or replace one, read it with the events it
holds, list them, delete one, and release an event's token. The rules live here, not in the handlers
(``routes.throttle`` decodes the request, calls one of these, encodes the answer), so they run without
aiohttp: with the in-memory store in a unit test, with Cassandra in the API.

Failure edges: a policy that does not exist is ``NotFound`` naming ``name`` (404); a store that does not
answer raises ``StoreUnavailable`` from the port (503). Replacing a policy keeps its ``created_at``; two
replacements racing both write, and the later write wins whole (a policy is one row, with no version).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog

from tickd.schema import events
from tickd.schema.errors import NotFound
from tickd.schema.model import ThrottlePolicy
from tickd.schema.store import Store

log = structlog.get_logger("tickd.api")


@dataclass(frozen=True)
class Saved:
    """A policy as written, and whether the write created it (else it replaced one)."""

    policy: ThrottlePolicy
    created: bool


async def save(
    store: Store, client_id: str, name: str, max_in_flight: int, release_timeout_s: int, *, at: datetime
) -> Saved:
    """Create the policy, or replace its limits keeping when it was created."""
    existing = await store.get_policy(client_id, name)
    created_at = existing.created_at if existing is not None else at
    policy = ThrottlePolicy(client_id, name, max_in_flight, release_timeout_s, created_at, at)
    await store.put_policy(policy)
    log.info("throttle_policy_saved", client_id=client_id, policy=name, max_in_flight=max_in_flight)
    return Saved(policy, existing is None)


async def get(store: Store, client_id: str, name: str) -> ThrottlePolicy:
    policy = await store.get_policy(client_id, name)
    if policy is None:
        raise NotFound(f"no throttle policy named {name!r}", field="name")
    return policy


async def held(store: Store, client_id: str, name: str) -> tuple[ThrottlePolicy, int]:
    """The policy and how many of its tokens events hold now (delivered, not yet released)."""
    policy = await get(store, client_id, name)
    return policy, len(await store.tokens(client_id, name))


async def listed(store: Store, client_id: str) -> list[ThrottlePolicy]:
    """The client's policies by name."""
    return sorted(await store.list_policies(client_id), key=lambda p: p.name)


async def delete(store: Store, client_id: str, name: str) -> ThrottlePolicy:
    """Delete the policy; the policy as it was. Events naming it then go out unthrottled."""
    policy = await get(store, client_id, name)
    await store.delete_policy(client_id, name)
    log.info("throttle_policy_deleted", client_id=client_id, policy=name)
    return policy


async def release(store: Store, client_id: str, event_id: str) -> bool:
    """The consumer is done with an event: free its token. False if it holds none (released before, or
    timed out); ``NotFound`` naming ``event_id`` if no throttled schedule of the client has such an event."""
    released = await events.release_event(store, client_id, event_id)
    log.info("throttle_event_released", client_id=client_id, event_id=event_id, released=released)
    return released
