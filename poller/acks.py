"""Kafka subscribers release throttled events by a record on the ack topic (``TICKD_KAFKA_ACK_TOPIC``).

Each record's value is JSON ``{"client_id": "...", "event_id": "..."}``. Every poller node joins one
consumer group, so each ack is handled by one node; offsets are committed only after a batch's releases
are written, so an ack is never lost (a release applied twice is harmless: the second finds no token).
A record that is not a valid ack is logged and skipped, never retried forever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from schema import events
from schema.errors import InvalidInput, NotFound, StoreUnavailable
from schema.store import Store

log = structlog.get_logger("tickd.acks")
GROUP_ID = "tickd-throttle-acks"


class Ack(msgspec.Struct, forbid_unknown_fields=True):
    client_id: str
    event_id: str


_decoder = msgspec.json.Decoder(Ack)


def parse_ack(value: bytes | None) -> Ack | str:
    """The ack in a record, or why the record is not one."""
    if value is None:
        return "empty record"
    try:
        ack = _decoder.decode(value)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        return f"not an ack ({exc})"
    try:
        events.event_schedule_id(ack.event_id)
    except InvalidInput as exc:
        return exc.message
    return ack


class AckConsumer:
    def __init__(self, store: Store, bootstrap: str, topic: str, *, retry_s: float = 1.0) -> None:
        self._store = store
        self._bootstrap = bootstrap
        self._topic = topic
        self._retry_s = retry_s
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
        if isinstance(ack, str):
            self.skipped += 1
            log.warning("throttle_ack_invalid", topic=self._topic, error=ack)
            return
        while True:
            try:
                released = await events.release_event(self._store, ack.client_id, ack.event_id)
            except NotFound:
                self.skipped += 1
                log.info("throttle_ack_unknown_event", client_id=ack.client_id, event_id=ack.event_id)
                return
            except StoreUnavailable as exc:
                log.warning("throttle_ack_retry", event_id=ack.event_id, error=str(exc))
                await asyncio.sleep(self._retry_s)
                continue
            self.released += int(released)
            log.info("throttle_event_released", client_id=ack.client_id, event_id=ack.event_id, released=released)
            return
