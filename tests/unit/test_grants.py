"""Kafka grants as pure rules (``schema.grants``) and where the send happens (``poller.grants`` in the
router): a fire to a topic its client no longer holds a grant for is never handed to the dispatcher."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from structlog.testing import capture_logs

from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.poller.grants import TopicGuard
from tickd.poller.metrics import Metrics
from tickd.poller.settings import PollerSettings
from tickd.schema import grants
from tickd.schema.errors import ConfigError
from tickd.schema.model import Client, HttpCallback, KafkaCallback, Location, Schedule
from tickd.service.settings import ApiSettings

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("grant", "topic", "allowed"),
    [
        ("billing", "billing", True),
        ("billing", "billing2", False),
        ("orders.*", "orders.fired", True),
        ("orders.*", "orders.x.y", True),
        ("orders.*", "orders.", False),  # a prefix grant needs a longer topic
        ("orders.*", "orders", False),
        ("orders.*", "ordersx", False),
        ("*", "anything", True),  # tickd-dev's grant
    ],
)
def test_allows(grant: str, topic: str, allowed: bool) -> None:
    assert grants.allows(grant, topic) is allowed


def test_topic_allowed_looks_up_what_allows_would_scan_for() -> None:
    grant_pool = ["a", "a.b", "a.*", "a.b.*", "a-*", "a_b_*", "b.*", "ab", "*", "a..*", "x-y.z"]
    topics = ["a", "a.", "a.b", "a.b.c", "a-", "a-1", "a_b_c", "b", "b.x", "ab", "a..b", "x-y.z", "x-y", "."]
    for size in range(len(grant_pool) + 1):
        for start in range(len(grant_pool)):
            held = frozenset(grant_pool[start : start + size])
            for topic in topics:
                expected = any(grants.allows(g, topic) for g in held)
                assert grants.topic_allowed(topic, held) is expected, (topic, held)


@pytest.mark.parametrize(
    ("a", "b", "overlapping"),
    [
        ("billing", "billing", True),
        ("billing", "billing.eu", False),
        ("orders.*", "orders.fired", True),
        ("orders.*", "orders.", False),  # the name "orders." is not under the prefix "orders."
        ("orders.*", "orders.eu.*", True),
        ("orders-*", "orders.*", False),
        ("a.*", "b.*", False),
        ("*", "x", True),
    ],
)
def test_overlap_is_symmetric(a: str, b: str, overlapping: bool) -> None:
    assert grants.overlap(a, b) is overlapping and grants.overlap(b, a) is overlapping


@pytest.mark.parametrize(
    ("grant", "reserved"),
    [
        ("__consumer_offsets", True),
        ("__transaction_state", True),
        ("__*", True),
        ("__x.*", True),
        ("tickd-acks", True),  # the ack topic
        ("tickd-*", True),  # a prefix reaching it
        ("ops.audit", True),  # under a reserved prefix
        ("ops.*", True),
        ("o*", True),  # not valid syntax (refused before), and a prefix of "ops." besides
        ("_private", False),
        ("orders.*", False),
        ("tickd-acks2", False),
    ],
)
def test_reserved_grants(grant: str, reserved: bool) -> None:
    assert grants.reserved_grant(grant, frozenset({"tickd-acks", "ops.*"})) is reserved


def test_reserved_topics_from_env_join_the_ack_topic() -> None:
    env = {"TICKD_KAFKA_ACK_TOPIC": "tickd-acks", "TICKD_KAFKA_RESERVED_TOPICS": " ops.* , audit ,"}
    assert grants.reserved_from_env(env) == {"tickd-acks", "ops.*", "audit"}
    assert ApiSettings.from_env(env).reserved_topics == {"tickd-acks", "ops.*", "audit"}
    assert PollerSettings.from_env(env).reserved_topics == {"tickd-acks", "ops.*", "audit"}
    assert grants.reserved_from_env({}) == frozenset()


@pytest.mark.parametrize("entry", ["..", ".", "a b", "ünïcode", "x" * 250, "*", "orders*", "a\tb"])
def test_a_malformed_reserved_entry_stops_the_start(entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        grants.reserved_from_env({"TICKD_KAFKA_RESERVED_TOPICS": entry})
    assert caught.value.field == "TICKD_KAFKA_RESERVED_TOPICS"


# -- at the send ------------------------------------------------------------------------------------


class Recording:
    """A dispatcher that records what it is handed and delivers it."""

    def __init__(self) -> None:
        self.sent: list[Schedule] = []

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        self.sent.append(schedule)
        return DeliveryResult.delivered(attempt)

    async def deliver_many(self, items: Sequence[tuple[Schedule, int, datetime]]) -> list[DeliveryResult]:
        return [await self.deliver(s, a, f) for s, a, f in items]

    async def close(self) -> None:
        return None


def fire(topic: str | None, client_id: str = "acme", attempts: int = 0) -> Schedule:
    callback = HttpCallback(url="http://127.0.0.1:9/") if topic is None else KafkaCallback(topic=topic)
    return Schedule(client_id, uuid.uuid4(), Location(0, NOW), NOW, b"{}", callback, NOW, attempts=attempts)


def routed(
    clients: dict[str, Client], reserved: frozenset[str] = frozenset()
) -> tuple[CallbackRouter, Recording, Metrics]:
    http, kafka, metrics = Recording(), Recording(), Metrics()
    router = CallbackRouter(http, kafka)
    router.use_guard(TopicGuard(clients.get, reserved, metrics))
    return router, kafka, metrics


def client(topics: set[str], client_id: str = "acme") -> Client:
    return Client(client_id, 1, True, "x", NOW, NOW, kafka_topics=frozenset(topics))


async def test_a_revoked_grant_ends_the_fire_unsent_for_good() -> None:
    clients = {"acme": client({"orders.*"})}
    router, kafka, metrics = routed(clients)
    assert (await router.deliver(fire("orders.fired"), 1, NOW)).ok
    clients["acme"] = dataclasses.replace(clients["acme"], kafka_topics=frozenset())  # the node read a PATCH
    with capture_logs() as logs:
        result = await router.deliver(fire("orders.fired", attempts=2), 3, NOW)
    assert not result.ok and not result.retriable and result.attempts == 2
    assert result.error == "kafka topic 'orders.fired' is no longer granted to this client"
    assert len(kafka.sent) == 1  # the second fire never reached the dispatcher
    assert [e["event"] for e in logs] == ["kafka_topic_not_granted"]
    sample = metrics.registry.get_sample_value("tickd_kafka_topic_not_granted_total", {"client_id": "acme"})
    assert sample == 1.0


async def test_deliver_many_refuses_only_the_fires_not_granted() -> None:
    router, kafka, _ = routed({"acme": client({"orders.*"}), "other": client({"billing"}, "other")})
    group = [fire("orders.a"), fire("billing"), fire(None), fire("billing", "other"), fire("orders.b", "nobody")]
    results = await router.deliver_many(group, NOW)
    assert [r.ok for r in results] == [True, False, True, True, False]
    assert [r.retriable for r in results] == [False] * 5
    assert {s.schedule_id for s in kafka.sent} == {group[0].schedule_id, group[3].schedule_id}


@pytest.mark.parametrize("topic", ["__consumer_offsets", "tickd-acks", "ops.x"])
async def test_reserved_topics_are_never_sent_to_whatever_the_stored_grant(topic: str) -> None:
    """A grant stored before the API refused it (``*`` of tickd-dev, or an old row) does not reach them."""
    router, kafka, _ = routed({"acme": client({"*"})}, frozenset({"tickd-acks", "ops.*"}))
    result = await router.deliver(fire(topic), 1, NOW)
    assert not result.ok and not result.retriable and "reserved" in (result.error or "")
    assert kafka.sent == []


@pytest.mark.parametrize("topic", ["", "..", ".", "ünïcode", "a" * 250, "a b", "orders.*"])
async def test_hostile_topic_names_in_a_stored_row_are_not_sent(topic: str) -> None:
    router, kafka, _ = routed({"acme": client({"orders.*", "billing"})})
    result = await router.deliver(fire(topic), 1, NOW)
    assert not result.ok and not result.retriable and kafka.sent == []


def test_the_node_wires_its_client_cache_and_the_ack_topic_into_the_router() -> None:
    from tickd.poller.node import Node
    from tickd.schema.memory import memory_store

    router = CallbackRouter(Recording(), Recording())
    settings = PollerSettings(node_id="n1", ack_topic="tickd-acks")
    node = Node(settings, memory_store(lambda: NOW), router, Metrics())
    guard = router._guard
    assert isinstance(guard, TopicGuard)
    node._placement._clients = {"acme": client({"*"})}
    assert guard.refusal(fire("orders.x")) is None
    assert guard.refusal(fire("tickd-acks")) is not None  # the ack topic, from settings.ack_topic
    node._placement._clients = {"acme": client(set())}  # the next read of the clients
    assert guard.refusal(fire("orders.x")) == "kafka topic 'orders.x' is no longer granted to this client"
