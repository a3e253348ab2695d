"""Who is calling: the admin (a bearer token from TICKD_ADMIN_TOKEN) or a client (its API key).

A client key is ``<client_id>.<secret>``; only sha256(secret) is stored, compared in constant time.
Client rows are cached in-process for TICKD_CLIENT_CACHE_S, so a rotation or deactivation made on
another replica takes effect here within that time (at once on the replica that made it).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from aiohttp import web

from tickd.schema.model import Client
from tickd.schema.store import ClientStore
from tickd.service.errors import Forbidden, Unauthorized, Unavailable

_SCHEME = "bearer "
# What a key can look like: anything else is refused before any lookup, with the answer an unknown key
# gets, so a malformed secret (non-ASCII, invalid UTF-8) cannot tell a registered client id from another.
_TOKEN = re.compile(r"[\x21-\x7e]{1,512}")
_KEY = re.compile(r"([a-z0-9_-]{1,64})\.([A-Za-z0-9_-]{16,128})")
_NO_HASH = "0" * 64


def new_api_key(client_id: str) -> tuple[str, str]:
    """A fresh key and the hash to store: (``<client_id>.<secret>``, sha256(secret) hex)."""
    secret = secrets.token_urlsafe(32)
    return f"{client_id}.{secret}", hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer(request: web.Request) -> str:
    """The bearer token: visible ASCII, one Authorization header; 401 for anything else."""
    given = request.headers.getall("Authorization", [])
    header = given[0] if len(given) == 1 else ""
    token = header[len(_SCHEME) :].strip()
    if header[: len(_SCHEME)].lower() != _SCHEME or not _TOKEN.fullmatch(token):
        raise Unauthorized("send 'Authorization: Bearer <key>'", code="unauthorized", field="Authorization")
    return token


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
            raise Unauthorized("unknown API key", code="unauthorized", field="Authorization")
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
        raise Unauthorized("unknown admin token", code="unauthorized", field="Authorization")

    async def _client_for(self, key: str) -> Client | None:
        """The client the key belongs to; None for a malformed key, an unknown client or a wrong secret
        (the same work and answer for each: the secret is hashed and compared either way)."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        client = await self.cache.get(match[1])
        expected = client.api_key_hash if client is not None else _NO_HASH
        if not hmac.compare_digest(hash_secret(match[2]), expected) or client is None:
            return None
        return client
