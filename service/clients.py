"""Clients (tenants) as an admin manages them, over the store port: register, list, read, change quota,
state or Kafka grants, rotate the API key and the callback signing secret. The rules live here, not in
the handlers (``routes.clients`` authenticates the admin, decodes the request, calls one of these and
encodes the answer), so they run without aiohttp: with the in-memory store in a unit test, with Cassandra
in the API.

Quota resize contract: raising ``poller_count`` spreads new schedules over more pollers at once.
Lowering it sets ``poller_span = max(old poller_span, old poller_count)`` (never lowered here) and
``resized_at = now``; pollers keep running instances ``[poller_count, poller_span)`` until drained, so a
schedule already written to a poller id above the new count is never stranded.

Failure edges: an unknown client is ``NotFound`` naming ``client_id`` (404); a registered id again is
``AlreadyExists`` (409); a patch that changes nothing is ``Invalid`` (422 ``missing_field``); a grant of
a reserved topic, or one overlapping another client's when refused by configuration, is ``service.grants``'
422 or 409; a signing-secret rotation that lost a race is ``Conflict`` (409); a store that does not answer
raises ``StoreUnavailable`` from the port (503). Changes to one client are serialised per replica
(``update_client`` writes the whole row): ``locks[client_id]``, then the grants lock, always in that order.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from tickd.schema.errors import AlreadyExists, Conflict, NotFound
from tickd.schema.events import new_ack_secret
from tickd.schema.model import Client
from tickd.schema.signing import new_signing_secret
from tickd.schema.store import Store
from tickd.service import grants
from tickd.service.auth import new_api_key
from tickd.service.errors import Invalid
from tickd.service.settings import ApiSettings
from tickd.service.validation import ClientPatch, topic_grants

log = structlog.get_logger("tickd.api")


@dataclass(frozen=True)
class Granted:
    """A client as written, and the warning its new grants earned (an overlap with another client's)."""

    client: Client
    warning: str | None = None


@dataclass(frozen=True)
class Keyed:
    """A client with a new API key, shown only now (and, registered, the warning its grants earned)."""

    client: Client
    api_key: str
    warning: str | None = None


@dataclass(frozen=True)
class Rotated:
    """A new signing secret, shown only now, and until when the previous one keeps signing too."""

    client_id: str
    secret: str
    previous_until: datetime | None


@dataclass
class ClientAdmin:
    """The admin's operations on clients. ``remember`` is told every client written, so this replica's
    authentication sees a change at once (``service.auth.ClientCache.put``)."""

    store: Store
    settings: ApiSettings
    locks: defaultdict[str, asyncio.Lock]
    remember: Callable[[Client], None]

    async def register(self, client_id: str, poller_count: int, kafka_topics: list[str], at: datetime) -> Keyed:
        """A new active client with a fresh API key and fresh ack and signing secrets."""
        api_key, key_hash = new_api_key(client_id)
        client = Client(
            client_id,
            poller_count,
            True,
            key_hash,
            at,
            at,
            kafka_topics=topic_grants(kafka_topics),
            ack_secret=new_ack_secret(),
            signing_secret=new_signing_secret(),
        )
        async with self.locks[grants.LOCK]:
            warning = await self._check_grants(client_id, kafka_topics, frozenset())
            if not await self.store.create_client(client):
                raise AlreadyExists(f"client {client_id!r} already exists", field="client_id")
        self.remember(client)
        log.info("client_registered", client_id=client_id, poller_count=poller_count)
        return Keyed(client, api_key, warning)

    async def listed(self) -> list[Client]:
        return sorted(await self.store.list_clients(), key=lambda c: c.client_id)

    async def get(self, client_id: str) -> Client:
        client = await self.store.get_client(client_id)
        if client is None:
            raise NotFound(f"no client {client_id!r}", field="client_id")
        return client

    async def change(self, client_id: str, patch: ClientPatch, at: datetime) -> Granted:
        """The patch laid over the client: quota (see the resize contract above), state, grants."""
        async with self.locks[client_id], self.locks[grants.LOCK]:  # a register takes the second only
            current, warning = await self.get(client_id), None
            if isinstance(patch.kafka_topics, list):
                warning = await self._check_grants(client_id, patch.kafka_topics, current.kafka_topics)
            client = patched(current, patch, at)
            await self.store.update_client(client)
        self.remember(client)
        log.info(
            "client_updated",
            client_id=client_id,
            poller_count=client.poller_count,
            poller_span=client.poller_span,
            active=client.active,
        )
        return Granted(client, warning)

    async def rotate_key(self, client_id: str, at: datetime) -> Keyed:
        """A new API key; the old one stops working (at once on this replica, within the client cache's
        lifetime on the others)."""
        async with self.locks[client_id]:
            current = await self.get(client_id)
            api_key, key_hash = new_api_key(client_id)
            client = dataclasses.replace(current, api_key_hash=key_hash, updated_at=at)
            await self.store.update_client(client)
        self.remember(client)
        log.info("api_key_rotated", client_id=client_id)
        return Keyed(client, api_key)

    async def rotate_signing_secret(self, client_id: str, at: datetime) -> Rotated:
        """A new signing secret; the previous one keeps signing too for ``signing_overlap_s``."""
        overlap_s = self.settings.signing_overlap_s
        async with self.locks[client_id]:
            current = await self.get(client_id)
            previous = current.signing_secret or await self.store.ensure_signing_secret(client_id, new_signing_secret())
            secret, until = new_signing_secret(), at + timedelta(seconds=overlap_s)
            if previous is None or not await self.store.rotate_signing_secret(client_id, previous, secret, until):
                raise Conflict("the signing secret changed meanwhile (another rotation); try again", field="client_id")
        log.info("signing_secret_rotated", client_id=client_id, previous_valid_until=until.isoformat())
        return Rotated(client_id, secret, until if overlap_s > 0 else None)

    async def _check_grants(self, client_id: str, wanted: list[str], held: frozenset[str]) -> str | None:
        """Refuse reserved topics, and grants overlapping another client's when so configured
        (``service.grants``); the warning to answer with otherwise. Called under the grants lock, so two
        admin requests of one replica cannot grant overlapping topics unseen."""
        grants.refuse_reserved(wanted, self.settings.reserved_topics)
        if all(grant in held for grant in wanted):
            return None
        index = grants.overlapping(client_id, wanted, held, await self.store.list_clients())
        if index is None:
            return None
        if self.settings.refuse_grant_overlaps:
            raise grants.overlap_conflict(wanted, index)
        log.warning("kafka_grant_overlaps", client_id=client_id, grant=wanted[index])
        return f"kafka_topics.{index} overlaps a Kafka grant another client holds"


def patched(client: Client, patch: ClientPatch, at: datetime) -> Client:
    """``client`` with ``patch`` laid over it (``Invalid`` if the patch names nothing to change)."""
    changes: dict[str, object] = {"updated_at": at}
    if isinstance(patch.active, bool):
        changes["active"] = patch.active
    if isinstance(patch.kafka_topics, list):
        changes["kafka_topics"] = topic_grants(patch.kafka_topics)
    if isinstance(patch.poller_count, int):
        count = patch.poller_count
        if count < client.poller_count:
            changes["poller_span"] = max(client.poller_span, client.poller_count)
            changes["resized_at"] = at
        changes["poller_count"] = count
    if len(changes) == 1:
        raise Invalid("give at least one of poller_count, active, kafka_topics", code="missing_field")
    return dataclasses.replace(client, **changes)  # type: ignore[arg-type]
