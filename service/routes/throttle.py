"""Throttle policies (client endpoints) and the consumer's release of an event: each handler decodes the
request, calls ``service.policies`` (where the rules are) and encodes the answer.

A policy caps the events of a client's throttled schedules that are delivered and not yet released, across
all poller nodes (see ``poller.throttle``). A schedule names one with ``"throttle": "<name>"``.
"""

from __future__ import annotations

from aiohttp import web

from tickd.schema.model import Client
from tickd.service import audit, keys, params, policies
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import PolicyPut, decode
from tickd.service.views import PolicyList, PolicyView, ReleaseView, policy_view

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
    found = await policies.listed(request.app[keys.STORE], client.client_id)
    return json_response(PolicyList([policy_view(p, None) for p in found]))


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
    raw = await read_json(request, _MAX_BODY)
    body = decode(request.app[keys.TYPES].policy_put, raw)
    store = request.app[keys.STORE]
    saved = await policies.save(store, client.client_id, name, body.max_in_flight, body.release_timeout_s, at=now())
    await audit.changed(request, client.client_id, client, "policy.put", name, raw)
    in_flight = 0 if saved.created else None  # a new policy holds nothing; a replaced one is not read again
    return json_response(policy_view(saved.policy, in_flight), 201 if saved.created else 200)


@routes.get(
    "/v1/throttle-policies/{name}",
    "Get a throttle policy and the events it holds now (in_flight)",
    response=PolicyView,
)
async def get_policy(request: web.Request) -> web.Response:
    client = await _client(request)
    policy, in_flight = await policies.held(request.app[keys.STORE], client.client_id, _name(request))
    return json_response(policy_view(policy, in_flight))


@routes.delete(
    "/v1/throttle-policies/{name}",
    "Delete a throttle policy (events naming it then go out unthrottled)",
    response=PolicyView,
)
async def delete_policy(request: web.Request) -> web.Response:
    client = await _client(request)
    deleted = await policies.delete(request.app[keys.STORE], client.client_id, _name(request))
    await audit.changed(request, client.client_id, client, "policy.delete", deleted.name)
    return json_response(policy_view(deleted, None))


@routes.post(
    "/v1/events/{event_id}/release",
    "The consumer is done with an event: free its throttle token (idempotent)",
    response=ReleaseView,
)
async def release_event(request: web.Request) -> web.Response:
    """Releasing twice (or after the timeout) is 200 with ``released: false``."""
    client = await _client(request)
    event_id = params.path(params.EventPath, request).event_id
    released = await policies.release(request.app[keys.STORE], client.client_id, event_id)
    return json_response(ReleaseView(event_id, released))
