"""Admin endpoints: register clients, list them, change quota/state/topics, rotate API keys and signing
secrets.

Quota resize contract: raising ``poller_count`` spreads new schedules over more pollers at once.
Lowering it sets ``poller_span = max(old poller_span, old poller_count)`` (never lowered here) and
``resized_at = now``; pollers keep running instances ``[poller_count, poller_span)`` until drained,
so a schedule already written to a poller id above the new count is never stranded.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import structlog
from aiohttp import web

from tickd.schema.errors import AlreadyExists, Conflict, NotFound
from tickd.schema.events import new_ack_secret
from tickd.schema.model import Client
from tickd.schema.signing import new_signing_secret
from tickd.service import grants, keys, params
from tickd.service.auth import new_api_key
from tickd.service.declare import Routes
from tickd.service.errors import Invalid, json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import ClientCreate, ClientPatch, decode, topic_grants
from tickd.service.views import ApiKeyView, ClientList, ClientView, SigningSecretView, client_view

log = structlog.get_logger("tickd.api")
_MAX_ADMIN_BODY = 64 * 1024


routes = Routes("clients", auth="admin", path_params=(params.ClientPath,))


@routes.post(
    "/v1/clients",
    "Register a client; the API key and the callback signing secret are shown only here",
    ok=201,
    response=ClientView,
    request=ClientCreate,
    errors=(409,),
    description="422 topic_reserved: a kafka_topics entry reaching Kafka's __* or tickd's own topics. A grant "
    "overlapping another client's is answered with an X-Tickd-Warning header (409 grant_overlaps when "
    "TICKD_KAFKA_REFUSE_GRANT_OVERLAPS is set).",
)
async def create_client(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    body = decode(request.app[keys.TYPES].client_create, await read_json(request, _MAX_ADMIN_BODY))
    count = body.poller_count
    api_key, key_hash = new_api_key(body.client_id)
    at = now()
    client = Client(
        body.client_id,
        count,
        True,
        key_hash,
        at,
        at,
        kafka_topics=topic_grants(body.kafka_topics),
        ack_secret=new_ack_secret(),
        signing_secret=new_signing_secret(),
    )
    async with request.app[keys.ADMIN_LOCKS][grants.LOCK]:
        warning = await _check_grants(request, client.client_id, body.kafka_topics, frozenset())
        if not await request.app[keys.STORE].create_client(client):
            raise AlreadyExists(f"client {body.client_id!r} already exists", field="client_id")
    request.app[keys.AUTH].cache.put(client.client_id, client)
    log.info("client_registered", client_id=client.client_id, poller_count=count)
    return json_response(client_view(client, api_key, client.signing_secret), 201, _warned(warning))


@routes.get("/v1/clients", "List clients", response=ClientList)
async def list_clients(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    clients = sorted(await request.app[keys.STORE].list_clients(), key=lambda c: c.client_id)
    return json_response(ClientList([client_view(c) for c in clients]))


async def _load(request: web.Request) -> Client:
    client_id = params.path(params.ClientPath, request).client_id
    client = await request.app[keys.STORE].get_client(client_id)
    if client is None:
        raise NotFound(f"no client {client_id!r}", field="client_id")
    return client


async def _check_grants(request: web.Request, client_id: str, wanted: list[str], held: frozenset[str]) -> str | None:
    """Refuse reserved topics, and grants overlapping another client's when so configured
    (``service.grants``); the warning to answer with otherwise. Called under the grants lock, so two
    admin requests of one replica cannot grant overlapping topics unseen."""
    settings = request.app[keys.SETTINGS]
    grants.refuse_reserved(wanted, settings.reserved_topics)
    if all(grant in held for grant in wanted):
        return None
    index = grants.overlapping(client_id, wanted, held, await request.app[keys.STORE].list_clients())
    if index is None:
        return None
    if settings.refuse_grant_overlaps:
        raise grants.overlap_conflict(wanted, index)
    log.warning("kafka_grant_overlaps", client_id=client_id, grant=wanted[index])
    return f"kafka_topics.{index} overlaps a Kafka grant another client holds"


def _warned(warning: str | None) -> dict[str, str] | None:
    return None if warning is None else {"X-Tickd-Warning": warning}


@routes.get("/v1/clients/{client_id}", "Get a client", response=ClientView)
async def get_client(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    return json_response(client_view(await _load(request)))


def _patched(client: Client, patch: ClientPatch) -> Client:
    changes: dict[str, object] = {"updated_at": now()}
    if isinstance(patch.active, bool):
        changes["active"] = patch.active
    if isinstance(patch.kafka_topics, list):
        changes["kafka_topics"] = topic_grants(patch.kafka_topics)
    if isinstance(patch.poller_count, int):
        count = patch.poller_count
        if count < client.poller_count:
            changes["poller_span"] = max(client.poller_span, client.poller_count)
            changes["resized_at"] = changes["updated_at"]
        changes["poller_count"] = count
    if len(changes) == 1:
        raise Invalid("give at least one of poller_count, active, kafka_topics", code="missing_field")
    return dataclasses.replace(client, **changes)  # type: ignore[arg-type]


@routes.patch(
    "/v1/clients/{client_id}",
    "Change poller_count, active or kafka_topics",
    response=ClientView,
    request=ClientPatch,
    errors=(409,),
    description="Lowering poller_count keeps poller_span at the old count so pollers drain the old ids.",
)
async def patch_client(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    client_id = params.path(params.ClientPath, request).client_id
    patch = decode(request.app[keys.TYPES].client_patch, await read_json(request, _MAX_ADMIN_BODY))
    locks = request.app[keys.ADMIN_LOCKS]
    async with locks[client_id], locks[grants.LOCK]:  # always in this order (a create takes the second only)
        current, warning = await _load(request), None
        if isinstance(patch.kafka_topics, list):
            warning = await _check_grants(request, client_id, patch.kafka_topics, current.kafka_topics)
        client = _patched(current, patch)
        await request.app[keys.STORE].update_client(client)
    request.app[keys.AUTH].cache.put(client.client_id, client)
    log.info(
        "client_updated",
        client_id=client.client_id,
        poller_count=client.poller_count,
        poller_span=client.poller_span,
        active=client.active,
    )
    return json_response(client_view(client), headers=_warned(warning))


@routes.post(
    "/v1/clients/{client_id}/api-keys",
    "Rotate the client's API key (the old one stops working)",
    ok=201,
    response=ApiKeyView,
)
async def rotate_key(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    async with request.app[keys.ADMIN_LOCKS][params.path(params.ClientPath, request).client_id]:
        current = await _load(request)
        api_key, key_hash = new_api_key(current.client_id)
        client = dataclasses.replace(current, api_key_hash=key_hash, updated_at=now())
        await request.app[keys.STORE].update_client(client)
    request.app[keys.AUTH].cache.put(client.client_id, client)
    log.info("api_key_rotated", client_id=client.client_id)
    return json_response(ApiKeyView(client.client_id, api_key), 201)


@routes.post(
    "/v1/clients/{client_id}/signing-secrets",
    "Rotate the client's callback signing secret; the new one is shown only here",
    ok=201,
    response=SigningSecretView,
    errors=(409,),
    description=(
        "Deliveries are signed with the new secret at once (within the pollers' client refresh, a few "
        "seconds) and with the previous one as well until previous_valid_until "
        "(TICKD_SIGNING_OVERLAP_S, a day by default): switch subscribers over meanwhile. Rotating again "
        "drops the older secret at once. 409: a concurrent rotation won; rotate again."
    ),
)
async def rotate_signing_secret(request: web.Request) -> web.Response:
    """A new signing secret, shown once; the previous one keeps signing too for ``signing_overlap_s``."""
    await request.app[keys.AUTH].admin(request)
    store, overlap_s = request.app[keys.STORE], request.app[keys.SETTINGS].signing_overlap_s
    async with request.app[keys.ADMIN_LOCKS][params.path(params.ClientPath, request).client_id]:
        current = await _load(request)
        previous = current.signing_secret or await store.ensure_signing_secret(current.client_id, new_signing_secret())
        secret, until = new_signing_secret(), now() + timedelta(seconds=overlap_s)
        if previous is None or not await store.rotate_signing_secret(current.client_id, previous, secret, until):
            raise Conflict("the signing secret changed meanwhile (another rotation); try again", field="client_id")
    log.info("signing_secret_rotated", client_id=current.client_id, previous_valid_until=until.isoformat())
    view = SigningSecretView(current.client_id, secret, until if overlap_s > 0 else None)
    return json_response(view, 201)
