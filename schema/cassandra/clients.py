"""Clients (tenants): their row in ``clients``."""

from __future__ import annotations

from datetime import datetime

import structlog

from tickd.schema.cassandra.bridge import Part, Row, Values, unset_if_none, utc
from tickd.schema.model import Client, ClientSettings, decode_client_settings, encode_client_settings


class ClientRows(Part):
    """``schema.store.ClientStore`` on Cassandra."""

    async def create_client(self, client: Client) -> bool:
        values = {
            **_fields(client),
            "created_at": client.created_at,
            "ack_secret": unset_if_none(client.ack_secret or None),
            "signing_secret": unset_if_none(client.signing_secret or None),
        }
        applied, _ = await self._db.applied("insert_client", values)
        return applied

    async def get_client(self, client_id: str) -> Client | None:
        rows = await self._db.rows("get_client", {"client_id": client_id})
        return self._seen(_client(rows[0])) if rows else None

    async def list_clients(self) -> list[Client]:
        found = [self._seen(_client(row)) for row in await self._db.rows("list_clients", {})]
        return [client for client in found if client is not None]

    def _seen(self, client: Client | None) -> Client | None:
        """Keep the client's settings for the writes of its records (``Part._retention``)."""
        if client is not None:
            self._clients_seen[client.client_id] = client.settings
        return client

    async def update_client(self, client: Client) -> None:
        await self._db.write("update_client", _fields(client))

    async def set_client_settings(self, client_id: str, settings: ClientSettings) -> None:
        values = {"client_id": client_id, "settings": encode_client_settings(settings)}
        await self._db.write("set_client_settings", values)
        self._clients_seen[client_id] = settings

    async def ensure_ack_secret(self, client_id: str, candidate: str) -> str | None:
        return await self._ensure_secret(client_id, "ack_secret", candidate)

    async def ensure_signing_secret(self, client_id: str, candidate: str) -> str | None:
        return await self._ensure_secret(client_id, "signing_secret", candidate)

    async def _ensure_secret(self, client_id: str, column: str, candidate: str) -> str | None:
        """The client's secret in ``column``; ``candidate`` lands only where there is none yet
        (``set_<column>``: UPDATE ... IF <column> = null)."""
        client = await self.get_client(client_id)
        if client is None or getattr(client, column):
            return getattr(client, column) if client is not None else None
        applied, row = await self._db.applied(f"set_{column}", {"client_id": client_id, column: candidate})
        return candidate if applied else str(getattr(row, column))

    async def rotate_signing_secret(self, client_id: str, current: str, new: str, previous_until: datetime) -> bool:
        values = {"client_id": client_id, "signing_secret": new, "previous": current, "previous_until": previous_until}
        applied, _ = await self._db.applied("rotate_signing_secret", values)
        return applied


def _fields(client: Client) -> Values:
    """The values both the insert and the update bind."""
    return {
        "client_id": client.client_id,
        "poller_count": client.poller_count,
        "poller_span": client.poller_span,
        "active": client.active,
        "api_key_hash": client.api_key_hash,
        "kafka_topics": set(client.kafka_topics),
        "updated_at": client.updated_at,
        "resized_at": unset_if_none(client.resized_at),
    }


def _client(row: Row) -> Client | None:
    """The client a row holds; None for a row no ``insert_client`` wrote. Cassandra applies an ``UPDATE ...
    IF col = null`` (``set_ack_secret``) and a plain UPDATE (``update_client``) where no row is, leaving
    one without ``created_at``: read as a client it failed every ``list_clients``, and with it every
    poller's client refresh and the admin's list, for all tenants."""
    if row.created_at is None or row.poller_count is None:
        structlog.get_logger("tickd.store").warning("client_row_partial", client_id=row.client_id)
        return None
    return Client(
        client_id=row.client_id,
        poller_count=row.poller_count,
        poller_span=row.poller_span or row.poller_count,
        active=bool(row.active),
        api_key_hash=row.api_key_hash or "",
        kafka_topics=frozenset(row.kafka_topics or ()),
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        resized_at=utc(row.resized_at) if row.resized_at else None,
        ack_secret=row.ack_secret or "",
        signing_secret=row.signing_secret or "",
        signing_secret_previous=row.signing_secret_previous or "",
        signing_previous_until=utc(row.signing_previous_until) if row.signing_previous_until else None,
        settings=decode_client_settings(row.settings),
    )
