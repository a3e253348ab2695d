"""Kafka acks, without Kafka: what a record must be to be an ack, the token a throttled event's delivery
carries, and the consumer's verdict on each record (over the in-memory store)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.throttled import hold_a_token
from tickd.poller import delivery
from tickd.poller.acks import Ack, AckConsumer, AckSecrets, AckSigner, Rejected, parse_ack
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.metrics import Metrics
from tickd.schema import events
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import memory_store
from tickd.schema.model import Client, EventOf, KafkaCallback, Location, Options, Schedule, ThrottlePolicy

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
EVENT_ID = f"{uuid.uuid4()}:1700000000000:3"


def _record(**fields: object) -> bytes:
    return json.dumps({"client_id": "c", "event_id": EVENT_ID, "ack_token": "t", **fields}).encode()


def test_a_valid_ack_parses() -> None:
    ack = parse_ack(_record())
    assert ack == Ack("c", EVENT_ID, "t")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty"),
        (b"", "empty"),
        (_record(client_id="x" * 70_000), "too_large"),
        (b'{"client_id": "\xff\xfe"}', "not_utf8"),
        (b"not json", "not_json"),
        (b"{]", "not_json"),
        (b"[1, 2]", "invalid_fields"),
        (_record(client_id=7), "invalid_fields"),
        (_record(ack_token=None), "invalid_fields"),
        (_record(client_id="x" * 65), "invalid_fields"),
        (_record(extra=1), "invalid_fields"),
        (json.dumps({"client_id": "c", "event_id": EVENT_ID}).encode(), "invalid_fields"),
        (_record(event_id="nope"), "bad_event_id"),
        (_record(event_id="zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz:1:1"), "bad_event_id"),
    ],
)
def test_a_record_that_is_not_an_ack_says_why(value: bytes | None, reason: str) -> None:
    rejected = parse_ack(value)
    assert isinstance(rejected, Rejected) and rejected.reason == reason, rejected


def test_the_token_is_an_hmac_of_the_event_id_under_the_clients_secret() -> None:
    token = events.ack_token("secret-1", EVENT_ID)
    assert len(token) == 43 and token == events.ack_token("secret-1", EVENT_ID)
    assert token != events.ack_token("secret-2", EVENT_ID)
    assert token != events.ack_token("secret-1", EVENT_ID[:-1] + "4")
    assert events.ack_token_matches("secret-1", EVENT_ID, token)
    other_last = "A" if token[-1] != "A" else "B"  # a token differing in its last character only
    assert not events.ack_token_matches("secret-1", EVENT_ID, token[:-1] + other_last)
    assert not events.ack_token_matches("secret-1", EVENT_ID, "é" * 43)


# -- over the in-memory store ------------------------------------------------------------------------


def _event_row(client_id: str, index: int = 0, throttle: str | None = "p") -> Schedule:
    parent = uuid.uuid4()
    return Schedule(
        client_id,
        uuid.uuid4(),
        Location(0, NOW + timedelta(hours=1)),
        NOW + timedelta(hours=1),
        b"{}",
        KafkaCallback(topic="orders.fired"),
        NOW,
        options=Options(event=EventOf(parent, index, 1), throttle=throttle),
    )


async def _throttled(store: CassandraStore, client_id: str) -> tuple[Schedule, str]:
    """A client whose throttled schedule has one event holding a token; (the schedule, the event id)."""
    assert await store.create_client(Client(client_id, 1, True, "h", NOW, NOW))
    await store.put_policy(ThrottlePolicy(client_id, "p", 5, 600, NOW, NOW))
    return await hold_a_token(store, client_id, NOW)


async def test_a_throttled_events_delivery_carries_its_token_and_others_none() -> None:
    store = memory_store(lambda: NOW)
    assert await store.create_client(Client("acme", 1, True, "h", NOW, NOW))  # registered before ack secrets
    sign = AckSigner(AckSecrets(store))
    row = _event_row("acme")
    stamped = await sign(row)
    client = await store.get_client("acme")
    assert client is not None and client.ack_secret  # created on first need, kept
    assert row.event_id is not None and stamped.ack_token == events.ack_token(client.ack_secret, row.event_id)
    assert stamped == row  # the token is not part of the row
    body = json.loads(delivery.kafka_record(stamped, 1, NOW).value)
    assert body["ack_token"] == stamped.ack_token
    assert (delivery.ACK_TOKEN_HEADER, stamped.ack_token.encode()) in delivery.kafka_record(stamped, 1, NOW).headers
    assert "ack_token" not in json.loads(delivery.encode_body(row, 1, NOW))
    assert (await sign(_event_row("acme", throttle=None))).ack_token is None
    assert (await sign(dataclasses.replace(row, options=Options(throttle="p")))).ack_token is None


class _Unreachable:
    async def __call__(self, schedule: Schedule) -> Schedule:
        raise StoreUnavailable("down")


class _Never:
    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        raise AssertionError("must not be sent")

    async def close(self) -> None:
        return None


async def test_an_event_whose_token_cannot_be_made_is_not_sent_and_is_retried() -> None:
    router = CallbackRouter(_Never(), _Never(), stamp=_Unreachable())
    result = await router.deliver(_event_row("acme"), 1, NOW)
    assert not result.ok and result.retriable


def _count(metrics: Metrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value("tickd_throttle_acks_total", {"outcome": outcome})
    return value or 0.0


async def test_the_consumer_releases_only_with_the_events_own_token() -> None:
    store = memory_store(lambda: NOW)
    _, event_id = await _throttled(store, "acme")
    _, other_event = await _throttled(store, "rival")
    metrics = Metrics()
    consumer = AckConsumer(store, "unused:9092", "acks", metrics=metrics)
    secret = await AckSecrets(store).get("acme")
    assert secret is not None
    token = events.ack_token(secret, event_id)
    forged = [
        {"client_id": "acme", "event_id": event_id, "ack_token": events.ack_token("guess", event_id)},
        {"client_id": "rival", "event_id": other_event, "ack_token": token},  # acme's token, rival's event
        {"client_id": "acme", "event_id": other_event, "ack_token": events.ack_token(secret, other_event)},
        {"client_id": "nobody", "event_id": event_id, "ack_token": token},
    ]
    for ack in forged:
        await consumer._handle(json.dumps(ack).encode())
    assert len(await store.tokens("acme", "p")) == 1 and len(await store.tokens("rival", "p")) == 1
    assert (_count(metrics, "bad_token"), _count(metrics, "unknown_event"), _count(metrics, "unknown_client")) == (
        2,
        1,
        1,
    )
    valid = json.dumps({"client_id": "acme", "event_id": event_id, "ack_token": token}).encode()
    await consumer._handle(valid)
    await consumer._handle(valid)  # a second ack of the event finds no token: harmless
    assert await store.tokens("acme", "p") == [] and len(await store.tokens("rival", "p")) == 1
    assert (_count(metrics, "released"), _count(metrics, "not_held")) == (1, 1)
    assert consumer.released == 1 and consumer.skipped == 4
