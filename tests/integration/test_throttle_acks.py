"""The Kafka ack topic against the real broker and Cassandra: an ack record releases the event's token;
a record that is not an ack is skipped, not retried forever."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from datetime import UTC, datetime

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from poller.acks import AckConsumer, parse_ack
from schema.cassandra import CassandraStore
from schema.model import Options, ThrottlePolicy, Token
from tests.integration.conftest import later

pytestmark = pytest.mark.integration
BOOTSTRAP = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def test_parse_ack_names_what_is_wrong() -> None:
    event_id = f"{uuid.uuid4()}:1700000000000:3"
    ack = parse_ack(json.dumps({"client_id": "c", "event_id": event_id}).encode())
    assert not isinstance(ack, str) and ack.event_id == event_id
    assert "event_id" in str(parse_ack(b'{"client_id": "c"}'))
    assert "epoch ms" in str(parse_ack(b'{"client_id": "c", "event_id": "nope"}'))
    assert parse_ack(None) == "empty record" and "not an ack" in str(parse_ack(b"{]"))


async def test_an_ack_record_releases_the_token(store: CassandraStore, client_id: str, new_schedule: object) -> None:
    topic = f"tickd-acks-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    now = datetime.now(UTC)
    await store.put_policy(ThrottlePolicy(client_id, "p", 5, 600, now, now))
    schedule = new_schedule(later(3600), poller_id=0, options=Options(throttle="p"))  # type: ignore[operator]
    await store.create_schedule(schedule, now)
    event_id = f"{schedule.fire_id}:0"
    assert await store.take_token(Token(client_id, "p", 2, event_id, "node-x", now), 600)

    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"not json")
        await producer.send_and_wait(topic, json.dumps({"client_id": client_id, "event_id": event_id}).encode())
    finally:
        await producer.stop()

    consumer = AckConsumer(store, BOOTSTRAP, topic)
    task = asyncio.create_task(consumer.run())
    try:
        async with asyncio.timeout(60):
            while await store.tokens(client_id, "p"):
                await asyncio.sleep(0.2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert consumer.released == 1 and consumer.skipped == 1
