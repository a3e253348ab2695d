"""A revoked Kafka grant stops publishing, on the real Cassandra and the real broker: the API and a poller
node share one store (a keyspace of this module's own: a node runs every client it finds), the node
sends through the real router and KafkaDispatcher, and the test reads the topic itself.

On 6bb5212 grants were checked on create and PATCH only: a recurring schedule kept publishing to a topic
after ``PATCH kafka_topics`` removed it, a redrive written before the revocation was published, and a
redrive after it was accepted."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.integration.api_helpers import ADMIN, ADMIN_TOKEN, Api, serve
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings
from tickd.poller.delivery import DeliveryResult
from tickd.poller.main import stamped_router
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import DeadLetter, FireOutcome, Schedule, Status
from tickd.schema.settings import StoreSettings
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration

BOOTSTRAP = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
REVOKED = "is no longer granted to this client"


@pytest.fixture(scope="module")
async def store(store_settings: StoreSettings) -> AsyncIterator[CassandraStore]:
    settings = dataclasses.replace(store_settings, keyspace=f"{store_settings.keyspace}_grants")
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    s = await CassandraStore.connect(settings)
    yield s
    await s.close()


class _NoHttp:
    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        raise AssertionError("no HTTP callback in this module")

    async def close(self) -> None:
        return None


@pytest.fixture
async def api(store: CassandraStore) -> AsyncIterator[Api]:
    settings = ApiSettings(admin_token=ADMIN_TOKEN, callback_allow_private=True)
    async for client in serve(settings, store):
        yield client


@pytest.fixture
async def node(store: CassandraStore) -> AsyncIterator[Node]:
    """A node re-reading the clients every 0.2 s (TICKD_CLIENTS_REFRESH_S), sending to the real broker."""
    settings = dataclasses.replace(
        PollerSettings.from_env({"TICKD_NODE_ID": f"grants-{uuid.uuid4().hex[:8]}"}),
        store=store.settings,
        ring_refresh_s=0.2,
        clients_refresh_s=0.2,
        claim_verify_s=0.5,
        preload_s=3.0,
        mark_poll_s=0.2,
        minute_close_s=2.0,
    )
    kafka = KafkaDispatcher(KafkaSettings(bootstrap=BOOTSTRAP, attempt_timeout_s=30.0), RetryPolicy(max_attempts=3))
    await kafka.start()
    router, _ = stamped_router(store, _NoHttp(), kafka, 0.2)
    node = Node(settings, store, router, Metrics())
    stop = asyncio.Event()
    task = asyncio.create_task(node.run(stop))
    yield node
    stop.set()
    await asyncio.wait_for(task, 30)
    await router.close()


async def new_topic() -> str:
    topic = f"grants-{uuid.uuid4().hex[:12]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    return topic


async def fire_times(topic: str, quiet_s: float, at_least: int = 0) -> list[datetime]:
    """The ``fire_at`` of every record on ``topic``, read from the start until ``at_least`` came and then
    nothing more for ``quiet_s``."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, auto_offset_reset="earliest")
    await consumer.start()
    found: list[datetime] = []
    try:
        async with asyncio.timeout(60):
            while True:
                batches = await consumer.getmany(timeout_ms=int(quiet_s * 1000))
                records = [r for batch in batches.values() for r in batch]
                found += [datetime.fromisoformat(msgspec.json.decode(r.value)["fire_at"]) for r in records]
                if not records and len(found) >= at_least:
                    return found
    finally:
        await consumer.stop()


async def register(api: Api, topic: str) -> tuple[str, dict[str, str]]:
    body = {"client_id": f"g{uuid.uuid4().hex[:12]}", "poller_count": 1, "kafka_topics": [topic]}
    resp = await api.post("/v1/clients", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    made = await resp.json()
    return made["client_id"], {"Authorization": f"Bearer {made['api_key']}"}


async def revoke(api: Api, node: Node, client_id: str) -> datetime:
    """PATCH the grants away, then wait for the node's next read of the clients; when it has it."""
    resp = await api.patch(f"/v1/clients/{client_id}", json={"kafka_topics": []}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    async with asyncio.timeout(10):
        while (client := node._placement.client(client_id)) is None or client.kafka_topics:
            await asyncio.sleep(0.05)
    return datetime.now(UTC)


async def letters(api: Api, key: dict[str, str]) -> list[dict[str, Any]]:
    resp = await api.get("/v1/dead-letters", headers=key)
    assert resp.status == 200, await resp.text()
    found: list[dict[str, Any]] = (await resp.json())["dead_letters"]
    return found


async def wait_for_letter(api: Api, key: dict[str, str], timeout_s: float) -> list[dict[str, Any]]:
    async with asyncio.timeout(timeout_s):
        while not (found := [d for d in await letters(api, key) if REVOKED in d["last_error"]]):
            await asyncio.sleep(0.2)
    return found


async def test_a_recurring_schedule_stops_publishing_once_its_grant_is_revoked(
    api: Api, store: CassandraStore, node: Node
) -> None:
    topic = await new_topic()
    client_id, key = await register(api, topic)
    body = {"every": "1s", "payload": {"n": 1}, "callback": {"type": "kafka", "topic": topic}}
    resp = await api.post("/v1/schedules", json=body, headers=key)
    assert resp.status == 201, await resp.text()
    before = await fire_times(topic, 0.5, at_least=2)  # granted: it publishes
    revoked_at = await revoke(api, node, client_id)
    await asyncio.sleep(3)  # about three more occurrences come due
    after = [t for t in await fire_times(topic, 1.0, at_least=len(before)) if t > revoked_at]
    assert after == []  # no occurrence due after the node saw the revocation reached the topic
    found = await wait_for_letter(api, key, 20)  # each ended as a dead letter saying why
    assert found[0]["attempts"] == 0 and found[0]["callback"] == {"type": "kafka", "topic": topic}


async def _kafka_dead_letter(api: Api, store: CassandraStore, client_id: str, key: dict[str, str], topic: str) -> str:
    """A one-time Kafka schedule whose fire failed for good (as a broker outage would end it): its letter's id."""
    body = {"delay_s": 3600, "payload": {}, "callback": {"type": "kafka", "topic": topic}}
    resp = await api.post("/v1/schedules", json=body, headers=key)
    assert resp.status == 201, await resp.text()
    s = await store.get_schedule(client_id, uuid.UUID((await resp.json())["schedule_id"]))
    assert s is not None
    failed_at = timing.truncate_ms(datetime.now(UTC) - timedelta(seconds=30))
    await store.record_outcomes([FireOutcome(client_id, s.schedule_id, s.location, Status.FAILED, 3, failed_at)])
    await store.add_dead_letter(
        DeadLetter(client_id, s.public_id, s.fire_id, failed_at, 3, "down", s.callback, s.payload)
    )
    return f"{timing.to_epoch_ms(failed_at)}-{s.schedule_id}"


async def test_a_fire_redriven_before_the_revocation_is_dead_lettered_unsent(
    api: Api, store: CassandraStore, node: Node
) -> None:
    topic = await new_topic()
    client_id, key = await register(api, topic)
    letter_id = await _kafka_dead_letter(api, store, client_id, key, topic)
    due = (datetime.now(UTC) + timedelta(seconds=4)).isoformat()
    redriven = await api.post(f"/v1/dead-letters/{letter_id}/redrive", json={"at": due}, headers=key)
    assert redriven.status == 200, await redriven.text()  # granted still: written, due in 4 s
    await revoke(api, node, client_id)
    found = await wait_for_letter(api, key, 20)  # the redriven fire, refused at the send: it came due
    assert found[0]["dead_letter_id"] != letter_id
    assert await fire_times(topic, 2.0) == []  # and nothing ever reached the topic


async def test_a_redrive_after_the_revocation_is_refused(api: Api, store: CassandraStore, node: Node) -> None:
    topic = await new_topic()
    client_id, key = await register(api, topic)
    letter_id = await _kafka_dead_letter(api, store, client_id, key, topic)
    await revoke(api, node, client_id)
    refused = await api.post(f"/v1/dead-letters/{letter_id}/redrive", headers=key)
    assert refused.status == 409, await refused.text()
    assert (await refused.json())["error"] == {
        "code": "topic_not_allowed",
        "message": f"kafka topic {topic!r} is no longer granted to this client",
        "field": "callback.topic",
    }
    page = await api.post("/v1/dead-letters/redrive", headers=key)
    assert [e["code"] for e in (await page.json())["errors"]] == ["topic_not_allowed"]
