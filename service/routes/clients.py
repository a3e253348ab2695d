"""Admin endpoints: register clients, list them, change quota/state/topics, rotate API keys and signing
secrets. The handlers authenticate the admin, decode, call ``service.clients.ClientAdmin`` (where the
rules and the resize contract live) and encode the answer."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from tickd.schema.model import Client
from tickd.service import audit, keys, params
from tickd.service.clients import ClientAdmin
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now, read_json
from tickd.service.validation import ClientCreate, ClientPatch, decode
from tickd.service.views import ApiKeyView, ClientList, ClientView, SigningSecretView, client_view

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
    raw = await read_json(request, _MAX_ADMIN_BODY)
    body = decode(request.app[keys.TYPES].client_create, raw)
    made = await _admin(request).register(body.client_id, body.poller_count, body.kafka_topics, now())
    await audit.changed(request, body.client_id, None, "client.create", body.client_id, raw)
    view = client_view(made.client, made.api_key, made.client.signing_secret)
    return json_response(view, 201, _warned(made.warning))


@routes.get("/v1/clients", "List clients", response=ClientList)
async def list_clients(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    return json_response(ClientList([client_view(c) for c in await _admin(request).listed()]))


def _admin(request: web.Request) -> ClientAdmin:
    app = request.app
    return ClientAdmin(app[keys.STORE], app[keys.SETTINGS], app[keys.ADMIN_LOCKS], _remember(request))


def _remember(request: web.Request) -> Callable[[Client], None]:
    cache = request.app[keys.AUTH].cache
    return lambda client: cache.put(client.client_id, client)


def _client_id(request: web.Request) -> str:
    return params.path(params.ClientPath, request).client_id


def _warned(warning: str | None) -> dict[str, str] | None:
    return None if warning is None else {"X-Tickd-Warning": warning}


@routes.get("/v1/clients/{client_id}", "Get a client", response=ClientView)
async def get_client(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    return json_response(client_view(await _admin(request).get(_client_id(request))))


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
    client_id = _client_id(request)
    raw = await read_json(request, _MAX_ADMIN_BODY)
    patch = decode(request.app[keys.TYPES].client_patch, raw)
    changed = await _admin(request).change(client_id, patch, now())
    await audit.changed(request, client_id, None, "client.update", client_id, raw)
    return json_response(client_view(changed.client), headers=_warned(changed.warning))


@routes.post(
    "/v1/clients/{client_id}/api-keys",
    "Rotate the client's API key (the old one stops working)",
    ok=201,
    response=ApiKeyView,
)
async def rotate_key(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    keyed = await _admin(request).rotate_key(_client_id(request), now())
    await audit.changed(request, keyed.client.client_id, None, "client.rotate_key", keyed.client.client_id)
    return json_response(ApiKeyView(keyed.client.client_id, keyed.api_key), 201)


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
    rotated = await _admin(request).rotate_signing_secret(_client_id(request), now())
    await audit.changed(request, rotated.client_id, None, "client.rotate_signing_secret", rotated.client_id)
    return json_response(SigningSecretView(rotated.client_id, rotated.secret, rotated.previous_until), 201)
