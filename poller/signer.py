"""Which secrets a client's deliveries are signed with, known without a store read per fire.

``SigningKeys`` keeps each client's row for ``refresh_s`` (the node's ``TICKD_CLIENTS_REFRESH_S``), so a
rotation reaches every node within that time; the previous secret stays valid far longer (a day by
default), so deliveries signed meanwhile with the old secret only still verify. A client registered
before secrets existed gets one here (compare-and-set: every node ends up with the same). A failed
re-read keeps the secrets last read; only a client never read yet waits for the store. (The node reads
every client on the same period for the ring; feeding these rows from that read would save one read per
client and period, at the cost of an edge between the node and the router.)

``SigningStamp`` is the router's stamp (``poller.delivery.Stamp``): it puts the secrets valid now on the
schedule it delivers; the dispatchers sign the exact bytes they send (``poller.signing``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from tickd.poller.delivery import Stamp
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import Client, Schedule
from tickd.schema.signing import new_signing_secret
from tickd.schema.store import Store

log = structlog.get_logger("tickd.signing")
Clock = Callable[[], datetime]
Monotonic = Callable[[], float]


def utc_now() -> datetime:
    return datetime.now(UTC)


class SigningKeys:
    def __init__(self, store: Store, refresh_s: float, *, monotonic: Monotonic = time.monotonic) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._known: dict[str, tuple[float, Client | None]] = {}
        self._reading: dict[str, asyncio.Task[Client | None]] = {}

    async def client(self, client_id: str) -> Client | None:
        """The client's row as last read (re-read when older than ``refresh_s``); None if unknown."""
        known = self._known.get(client_id)
        if known is not None and self._monotonic() - known[0] < self._refresh_s:
            return known[1]
        try:
            return await self._read_once(client_id)
        except StoreUnavailable as exc:
            if known is None:
                raise
            log.warning("signing_keys_stale", client_id=client_id, error=str(exc))
            return known[1]

    async def _read_once(self, client_id: str) -> Client | None:
        """One read per client at a time, however many fires ask at once."""
        task = self._reading.get(client_id)
        if task is None:
            task = asyncio.ensure_future(self._read(client_id))
            self._reading[client_id] = task
            task.add_done_callback(lambda _: self._reading.pop(client_id, None))
        return await asyncio.shield(task)

    async def _read(self, client_id: str) -> Client | None:
        client = await self._store.get_client(client_id)
        if client is not None and not client.signing_secret:
            secret = await self._store.ensure_signing_secret(client_id, new_signing_secret())
            client = dataclasses.replace(client, signing_secret=secret or "")
        self._known[client_id] = (self._monotonic(), client)
        return client


class SigningStamp:
    """Puts the client's valid signing secrets (current first) on each delivery."""

    def __init__(self, keys: SigningKeys, clock: Clock = utc_now) -> None:
        self._keys = keys
        self._now = clock

    async def __call__(self, schedule: Schedule) -> Schedule:
        client = await self._keys.client(schedule.client_id)
        if client is None:
            return schedule
        return dataclasses.replace(schedule, signing_secrets=client.signing_secrets(self._now()))


class Stamps:
    """Several stamps, applied in order."""

    def __init__(self, *stamps: Stamp) -> None:
        self._stamps = stamps

    async def __call__(self, schedule: Schedule) -> Schedule:
        for stamp in self._stamps:
            schedule = await stamp(schedule)
        return schedule
