"""Who is calling: the admin (a bearer token from TICKD_ADMIN_TOKEN) or a client (its API key).

A client key is ``<client_id>.<secret>``; only sha256(secret) is stored, compared in constant time.
Client rows are cached in-process for TICKD_CLIENT_CACHE_S, so a rotation or deactivation made on
another replica takes effect here within that time (at once on the replica that made it).

What a caller can make this cost, bounded here, the one point every client and admin request passes:
- the cache holds at most TICKD_CLIENT_CACHE_MAX clients (least recently used evicted) and, apart,
  TICKD_CLIENT_CACHE_MISSES_MAX unknown ids, so made-up ids cannot evict real clients;
- failed authentications (a well-formed key that is unknown or wrong, a wrong admin token) are limited
  per source address (TICKD_AUTH_FAILURE_*; an IPv6 source by its /64): past the limit, a source's
  requests are answered 429 before any store read, so unknown ids cost the store at most that rate.
  A third party can exhaust only its own source's budget; and even there (a shared NAT or balancer
  address) a key this replica has already seen to be right still passes, so it cannot lock a real
  client out;
- a client's reads (GET, and previews) spend its read bucket (TICKD_READ_*), 429 ``read_rate_limited``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import time

from aiohttp import web

from tickd.schema.model import Client
from tickd.schema.store import ClientStore
from tickd.service.errors import Forbidden, Unauthorized, Unavailable
from tickd.service.limits import Lru, RateLimiter

_SCHEME = "bearer "
# What a key can look like: anything else is refused before any lookup, with the answer an unknown key
# gets, so a malformed secret (non-ASCII, invalid UTF-8) cannot tell a registered client id from another.
_TOKEN = re.compile(r"[\x21-\x7e]{1,512}")
_KEY = re.compile(r"([a-z0-9_-]{1,64})\.([A-Za-z0-9_-]{16,128})")
_NO_HASH = "0" * 64
_READS = frozenset({"GET", "HEAD"})


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


def source_of(request: web.Request) -> str:
    """The address failed authentications are counted against: the peer, an IPv6 one by its /64 (one
    host usually holds a whole /64, so counting single addresses would be no limit)."""
    remote = request.remote or "unknown"
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else address)


class ClientCache:
    """Client rows by id for ``ttl_s``; misses too (so an unknown id costs one read per ``ttl_s``), kept
    apart and bounded on their own so that a flood of unknown ids cannot evict a real client."""

    def __init__(self, store: ClientStore, ttl_s: float, max_clients: int = 100_000, max_misses: int = 10_000) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._rows: Lru[str, tuple[Client, float]] = Lru(max_clients)
        self._misses: Lru[str, float] = Lru(max_misses)

    async def get(self, client_id: str) -> Client | None:
        now = time.monotonic()
        row = self._rows.get(client_id)
        if row is not None and row[1] > now:
            return row[0]
        missed_until = self._misses.get(client_id)
        if row is None and missed_until is not None and missed_until > now:
            return None
        client = await self._store.get_client(client_id)
        self.put(client_id, client)
        return client

    def known(self, client_id: str) -> Client | None:
        """The client's cached row whatever its age (None if not cached): enough to tell a key that was
        right, not to authenticate with."""
        row = self._rows.get(client_id)
        return row[0] if row is not None else None

    def put(self, client_id: str, client: Client | None) -> None:
        until = time.monotonic() + self._ttl_s
        if client is None:
            self._rows.pop(client_id)
            self._misses.put(client_id, until)
        else:
            self._misses.pop(client_id)
            self._rows.put(client_id, (client, until))


class Authenticator:
    def __init__(
        self, admin_token: str | None, cache: ClientCache, *, reads: RateLimiter, failures: RateLimiter
    ) -> None:
        self._admin_token = admin_token.encode() if admin_token else None
        self.cache = cache
        self.reads = reads
        self._failures = failures

    async def client(self, request: web.Request, *, read: bool | None = None) -> Client:
        """The client whose key the request carries; 401 for none or an unknown one. A read (by default a
        GET) spends a token of the client's read bucket."""
        found = await self._client_for(bearer(request), request)
        if found is None:
            raise Unauthorized("unknown API key", code="unauthorized", field="Authorization")
        if request.method in _READS if read is None else read:
            self.reads.take(found.client_id)
        return found

    async def admin(self, request: web.Request) -> None:
        """Pass for the admin token; 403 for a valid client key; 401 otherwise; 503 if no token is set."""
        if self._admin_token is None:
            raise Unavailable("admin endpoints are disabled: TICKD_ADMIN_TOKEN is not set", code="admin_disabled")
        token = bearer(request)
        if hmac.compare_digest(token.encode(), self._admin_token):
            return
        if await self._client_for(token, request) is not None:
            raise Forbidden("a client API key cannot use admin endpoints", code="forbidden")
        if _KEY.fullmatch(token) is None:  # a key-shaped token was counted by _client_for
            self._failures.take(source_of(request))
        raise Unauthorized("unknown admin token", code="unauthorized", field="Authorization")

    async def _client_for(self, key: str, request: web.Request) -> Client | None:
        """The client the key belongs to; None for a malformed key, an unknown client or a wrong secret
        (the same work and answer for each: the secret is hashed and compared either way). A well-formed
        key not known to be right pays a failure token of its source before the lookup (429 if none is
        left), refunded if it turns out right: paid in advance, concurrent requests cannot all slip
        through before the first failure is counted."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        source, secret_hash = source_of(request), hash_secret(match[2])
        charged = not self._known_right(match[1], secret_hash)
        if charged:
            self._failures.take(source)
        try:
            client = await self.cache.get(match[1])
        except BaseException:
            self._refund(source, charged)
            raise
        expected = client.api_key_hash if client is not None else _NO_HASH
        if not hmac.compare_digest(secret_hash, expected) or client is None:
            return None
        self._refund(source, charged)
        return client

    def _known_right(self, client_id: str, secret_hash: str) -> bool:
        known = self.cache.known(client_id)
        return known is not None and hmac.compare_digest(secret_hash, known.api_key_hash)

    def _refund(self, source: str, charged: bool) -> None:
        if charged:
            self._failures.refund(source)
