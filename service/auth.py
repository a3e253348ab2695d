"""Who is calling: the admin (a bearer token from TICKD_ADMIN_TOKEN) or a client (its API key).

A client key is ``<client_id>.<secret>``; only sha256(secret) is stored, compared in constant time.
Client rows are cached in-process for TICKD_CLIENT_CACHE_S, so a rotation or deactivation made on
another replica takes effect here within that time (at once on the replica that made it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from aiohttp import web

from schema.model import Client
from schema.store import ClientStore
from service.errors import Forbidden, Unauthorized, Unavailable

_SCHEME = "bearer "


def new_api_key(client_id: str) -> tuple[str, str]:
    """A fresh key and the hash to store: (``<client_id>.<secret>``, sha256(secret) hex)."""
    secret = secrets.token_urlsafe(32)
    return f"{client_id}.{secret}", hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    if not header[: len(_SCHEME)].lower() == _SCHEME or not header[len(_SCHEME) :].strip():
        raise Unauthorized("send 'Authorization: Bearer <key>'", code="unauthorized")
    return header[len(_SCHEME) :].strip()


class ClientCache:
    """Client rows by id for ``ttl_s`` (misses too, so unknown keys do not each cost a read)."""

    def __init__(self, store: ClientStore, ttl_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._rows: dict[str, tuple[Client | None, float]] = {}

    async def get(self, client_id: str) -> Client | None:
        cached = self._rows.get(client_id)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        client = await self._store.get_client(client_id)
        self.put(client_id, client)
        return client

    def put(self, client_id: str, client: Client | None) -> None:
        if len(self._rows) > 100_000:
            self._rows.clear()
        self._rows[client_id] = (client, time.monotonic() + self._ttl_s)


class Authenticator:
    def __init__(self, admin_token: str | None, cache: ClientCache) -> None:
        self._admin_token = admin_token.encode() if admin_token else None
        self.cache = cache

    async def client(self, request: web.Request) -> Client:
        """The client whose key the request carries; 401 for none or an unknown one."""
        found = await self._client_for(bearer(request))
        if found is None:
            raise Unauthorized("unknown API key", code="unauthorized")
        return found

    async def admin(self, request: web.Request) -> None:
        """Pass for the admin token; 403 for a valid client key; 401 otherwise; 503 if no token is set."""
        if self._admin_token is None:
            raise Unavailable("admin endpoints are disabled: TICKD_ADMIN_TOKEN is not set", code="admin_disabled")
        token = bearer(request)
        if hmac.compare_digest(token.encode(), self._admin_token):
            return
        if await self._client_for(token) is not None:
            raise Forbidden("a client API key cannot use admin endpoints", code="forbidden")
        raise Unauthorized("unknown admin token", code="unauthorized")

    async def _client_for(self, key: str) -> Client | None:
        client_id, dot, secret = key.partition(".")
        if not dot or not secret or len(client_id) > 64:
            return None
        client = await self.cache.get(client_id)
        if client is None or not hmac.compare_digest(hash_secret(secret), client.api_key_hash):
            return None
        return client
