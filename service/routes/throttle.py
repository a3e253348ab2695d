"""Throttle policies (client endpoints) and the consumer's release of an event.

A policy caps the events of a client's throttled schedules that are delivered and not yet released, across
all poller nodes (see ``poller.throttle``). A schedule names one with ``"throttle": "<name>"``.
"""

from __future__ import annotations

import structlog
from aiohttp import web

from tickd.schema import events
from tickd.schema.errors import NotFound
from tickd.schema.model import Client, ThrottlePolicy
from tickd.service import keys, params
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import PolicyPut, decode
from tickd.service.views import PolicyList, PolicyView, ReleaseView, policy_view

log = structlog.get_logger("tickd.api")
_MAX_BODY = 4096
routes = Routes("throttle", path_params=(params.PolicyPath, params.EventPath))


def _name(request: web.Request) -> str:
    return params.path(params.PolicyPath, request).name


async def _client(request: web.Request) -> Client:
    client: Client = await request.app[keys.AUTH].client(request)
    return client


@routes.get("/v1/throttle-policies", "List the client's throttle policies", response=PolicyList)
async def list_policies(request: web.Request) -> web.Response:
    client = await _client(request)
    policies = await request.app[keys.STORE].list_policies(client.client_id)
    return json_response(PolicyList([policy_view(p, None) for p in sorted(policies, key=lambda p: p.name)]))


@routes.put(
    "/v1/throttle-policies/{name}",
    "Create (201) or replace (200) a throttle policy",
    ok=201,
    also={200: "Replaced"},
    response=PolicyView,
    request=PolicyPut,
    description="At most max_in_flight events of the policy delivered and not yet released, across all "
    "poller nodes; an event not released within release_timeout_s is released automatically.",
)
async def put_policy(request: web.Request) -> web.Response:
    client, name = await _client(request), _name(request)
    body = decode(request.app[keys.TYPES].policy_put, await read_json(request, _MAX_BODY))
    store = request.app[keys.STORE]
    existing = await store.get_policy(client.client_id, name)
    at = now()
    created_at = existing.created_at if existing is not None else at
    policy = ThrottlePolicy(client.client_id, name, body.max_in_flight, body.release_timeout_s, created_at, at)
    await store.put_policy(policy)
    log.info("throttle_policy_saved", client_id=client.client_id, policy=name, max_in_flight=body.max_in_flight)
    return json_response(policy_view(policy, 0 if existing is None else None), 200 if existing else 201)


async def _policy(request: web.Request) -> tuple[Client, ThrottlePolicy]:
    client, name = await _client(request), _name(request)
    policy = await request.app[keys.STORE].get_policy(client.client_id, name)
    if policy is None:
        raise NotFound(f"no throttle policy named {name!r}", field="name")
    return client, policy


@routes.get(
    "/v1/throttle-policies/{name}",
    "Get a throttle policy and the events it holds now (in_flight)",
    response=PolicyView,
)
async def get_policy(request: web.Request) -> web.Response:
    client, policy = await _policy(request)
    held = await request.app[keys.STORE].tokens(client.client_id, policy.name)
    return json_response(policy_view(policy, len(held)))


@routes.delete(
    "/v1/throttle-policies/{name}",
    "Delete a throttle policy (events naming it then go out unthrottled)",
    response=PolicyView,
)
async def delete_policy(request: web.Request) -> web.Response:
    client, policy = await _policy(request)
    await request.app[keys.STORE].delete_policy(client.client_id, policy.name)
    log.info("throttle_policy_deleted", client_id=client.client_id, policy=policy.name)
    return json_response(policy_view(policy, None))


@routes.post(
    "/v1/events/{event_id}/release",
    "The consumer is done with an event: free its throttle token (idempotent)",
    response=ReleaseView,
)
async def release_event(request: web.Request) -> web.Response:
    """The consumer is done with an event: free its token. Releasing twice (or after the timeout) is 200
    with ``released: false``."""
    client = await _client(request)
    event_id = params.path(params.EventPath, request).event_id
    released = await events.release_event(request.app[keys.STORE], client.client_id, event_id)
    log.info("throttle_event_released", client_id=client.client_id, event_id=event_id, released=released)
    return json_response(ReleaseView(event_id, released))
