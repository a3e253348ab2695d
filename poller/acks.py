"""Kafka subscribers release throttled events by a record on the ack topic (``TICKD_KAFKA_ACK_TOPIC``).

Each record's value is JSON ``{"client_id": "...", "event_id": "...", "ack_token": "..."}``. The token is
the one the event's delivery carried (body ``ack_token``, header ``X-Tickd-Ack-Token``):
base64url(HMAC-SHA256(the client's ack secret, event_id)), unpadded. Only tickd knows the secret, so a
writer of the topic can release only events whose deliveries it has seen: not another tenant's.

Every poller node joins one consumer group, so each ack is handled by one node; offsets are committed
only after a batch's releases are written, so an ack is never lost (a release applied twice is harmless:
the second finds no token). A record that is not a valid, authentic ack of a known event (not UTF-8, not
JSON, wrong fields, too large, unknown client or event, wrong token) is counted in
``tickd_throttle_acks_total{outcome}``, logged and skipped: never retried, never fatal, committed with
the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from tickd.poller.callbacks.kafka_security import KafkaSecurity, client_config
from tickd.poller.metrics import Metrics
from tickd.schema import events
from tickd.schema.errors import InvalidInput, NotFound, StoreUnavailable, TickdError
from tickd.schema.model import Schedule
from tickd.schema.store import Store

log = structlog.get_logger("tickd.acks")
GROUP_ID = "tickd-throttle-acks"
# An ack is about 200 bytes; anything much larger is not one (and is not parsed).
MAX_ACK_BYTES = 4096
T = TypeVar("T")


class Ack(msgspec.Struct, forbid_unknown_fields=True):
    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    event_id: Annotated[str, msgspec.Meta(min_length=1, max_length=96)]
    ack_token: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


@dataclasses.dataclass(frozen=True, slots=True)
class Rejected:
    """Why a record is not an ack: ``reason`` is a metric label (a fixed set), ``detail`` for the log."""

    reason: str
    detail: str


_decoder = msgspec.json.Decoder(Ack)


def parse_ack(value: bytes | None) -> Ack | Rejected:
    """The ack in a record, or why the record is not one. Never raises."""
    if not value:
        return Rejected("empty", "empty record")
    if len(value) > MAX_ACK_BYTES:
        return Rejected("too_large", f"{len(value)} bytes, an ack is at most {MAX_ACK_BYTES}")
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejected("not_utf8", f"not UTF-8 (byte {exc.start})")
    try:
        ack = _decoder.decode(value)
    except msgspec.ValidationError as exc:
        return Rejected("invalid_fields", f"not an ack ({exc})")
    except msgspec.DecodeError as exc:
        return Rejected("not_json", f"not JSON ({exc})")
    try:
        events.event_schedule_id(ack.event_id)
    except InvalidInput as exc:
        return Rejected("bad_event_id", exc.message)
    return ack


class AckSecrets:
    """Clients' ack secrets, read (or created, for a client registered before they existed) once per
    client and kept: a secret never changes. Unknown clients are not remembered."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._known: dict[str, str] = {}

    async def get(self, client_id: str) -> str | None:
        secret = self._known.get(client_id)
        if secret is None:
            secret = await self._store.ensure_ack_secret(client_id, events.new_ack_secret())
            if secret is not None:
                self._known[client_id] = secret
        return secret


class AckSigner:
    """The router's stamp (``poller.delivery.Stamp``): a throttled event's delivery carries its ack token."""

    def __init__(self, secrets: AckSecrets) -> None:
        self._secrets = secrets

    async def __call__(self, schedule: Schedule) -> Schedule:
        event_id = schedule.event_id
        if event_id is None or schedule.options is None or schedule.options.throttle is None:
            return schedule
        secret = await self._secrets.get(schedule.client_id)
        if secret is None:
            return schedule
        return dataclasses.replace(schedule, ack_token=events.ack_token(secret, event_id))


class AckConsumer:
    def __init__(
        self,
        store: Store,
        bootstrap: str,
        topic: str,
        *,
        secrets: AckSecrets | None = None,
        metrics: Metrics | None = None,
        retry_s: float = 1.0,
        security: KafkaSecurity | None = None,
    ) -> None:
        self._store = store
        self._bootstrap = bootstrap
        self._topic = topic
        self._secrets = secrets if secrets is not None else AckSecrets(store)
        self._metrics = metrics if metrics is not None else Metrics()
        self._retry_s = retry_s
        self._security = security if security is not None else KafkaSecurity()
        self.released = 0
        self.skipped = 0

    async def run(self) -> None:
        """Consume until cancelled; a broker outage is waited out, not fatal to the node."""
        while True:
            consumer = AIOKafkaConsumer(
                self._topic,
                bootstrap_servers=self._bootstrap,
                group_id=GROUP_ID,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **client_config(self._security),
            )
            try:
                await consumer.start()
                log.info("throttle_acks_consuming", topic=self._topic)
                await self._consume(consumer)
            except KafkaError as exc:
                log.warning("throttle_acks_unavailable", topic=self._topic, error=str(exc))
                await asyncio.sleep(self._retry_s)
            finally:
                await consumer.stop()

    async def _consume(self, consumer: Any) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            for records in batches.values():
                for record in records:
                    await self._handle(record.value)
            if batches:
                await consumer.commit()

    async def _handle(self, value: bytes | None) -> None:
        ack = parse_ack(value)
        if isinstance(ack, Rejected):
            self._skip(ack.reason, ack.detail)
            return
        try:
            outcome = await self._release(ack)
        except TickdError as exc:  # a typed error about this record (not storage: that is waited out)
            self._skip("invalid", exc.message)
            return
        if outcome in ("released", "not_held"):
            self.released += outcome == "released"
            self._metrics.throttle_acks.labels(outcome).inc()
            log.info("throttle_event_released", client_id=ack.client_id, event_id=ack.event_id, outcome=outcome)
        else:
            self._skip(outcome, f"client {ack.client_id!r}, event {ack.event_id!r}")

    async def _release(self, ack: Ack) -> str:
        """``released``, ``not_held`` (released before, or timed out), or why the ack is refused. The
        token is checked before the event is looked up: a forger learns nothing about what exists."""
        secret = await self._waiting_out_storage(lambda: self._secrets.get(ack.client_id))
        if secret is None:
            return "unknown_client"
        if not events.ack_token_matches(secret, ack.event_id, ack.ack_token):
            return "bad_token"
        try:
            released = await self._waiting_out_storage(
                lambda: events.release_event(self._store, ack.client_id, ack.event_id)
            )
        except NotFound:
            return "unknown_event"
        return "released" if released else "not_held"

    async def _waiting_out_storage(self, call: Callable[[], Awaitable[T]]) -> T:
        """An ack is not dropped because storage did not answer: its offset is not committed before it is."""
        while True:
            try:
                return await call()
            except StoreUnavailable as exc:
                self._metrics.store_error("throttle_ack")
                log.warning("throttle_ack_retry", topic=self._topic, error=str(exc))
                await asyncio.sleep(self._retry_s)

    def _skip(self, reason: str, detail: str) -> None:
        self.skipped += 1
        self._metrics.throttle_acks.labels(reason).inc()
        log.warning("throttle_ack_invalid", topic=self._topic, reason=reason, error=detail[:200])
