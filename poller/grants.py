"""Kafka grants checked where the send happens: a fire goes to its topic only if the client holds a grant
for it now, not only when the schedule was created.

Grants are checked by the API on create and PATCH, but a recurring schedule, a durable retry and a
redriven dead letter fire long after: without this check they kept publishing to a topic an admin had
revoked, and to another tenant's topic once it was granted to them. The guard reads the client as the
node last read it (``Node`` re-reads the clients every ``TICKD_CLIENTS_REFRESH_S``, 5 s, on its ring
refresh): a revocation stops the client's next attempts within about that long (longer only while the
node cannot read Cassandra). A refused fire is not sent; it ends as a dead letter saying why
(non-retriable: a retry would be refused the same way), and is counted as
``tickd_kafka_topic_not_granted_total`` and logged as ``kafka_topic_not_granted``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog
from prometheus_client import Counter

from tickd.poller.metrics import Metrics
from tickd.schema import grants
from tickd.schema.model import Client, KafkaCallback, Schedule

log = structlog.get_logger("tickd.poller")
ClientLookup = Callable[[str], Client | None]


class TopicGuard:
    """Says why a Kafka fire may not go out now (None: it may). ``clients`` is the node's client cache;
    ``reserved`` the topics nobody may be sent to (the ack topic, ``TICKD_KAFKA_RESERVED_TOPICS``)."""

    def __init__(self, clients: ClientLookup, reserved: Iterable[str], metrics: Metrics | None = None) -> None:
        self._clients = clients
        self._reserved = frozenset(reserved)
        self._refused: Counter | None = None
        if metrics is not None:
            self._refused = Counter(
                "tickd_kafka_topic_not_granted_total",
                "Kafka fires not sent because the client holds no grant for the topic now (dead-lettered)",
                ["client_id"],
                registry=metrics.registry,
            )

    def refusal(self, schedule: Schedule) -> str | None:
        callback = schedule.callback
        if not isinstance(callback, KafkaCallback):
            return None
        reason = self._reason(schedule.client_id, callback.topic)
        if reason is not None:
            self._count(schedule, reason)
        return reason

    def _reason(self, client_id: str, topic: str) -> str | None:
        if not grants.valid_topic(topic):  # the API never wrote one; a row from elsewhere might
            return f"kafka topic {topic!r} is not a valid topic name"
        if grants.reserved_topic(topic, self._reserved):
            return f"kafka topic {topic!r} is reserved (Kafka's or tickd's own) and is never sent to"
        client = self._clients(client_id)
        if client is None or not grants.topic_allowed(topic, client.kafka_topics):
            return f"kafka topic {topic!r} is no longer granted to this client"
        return None

    def _count(self, schedule: Schedule, reason: str) -> None:
        if self._refused is not None:
            self._refused.labels(schedule.client_id).inc()
        log.warning(
            "kafka_topic_not_granted",
            client_id=schedule.client_id,
            schedule_id=str(schedule.public_id),
            fire_id=schedule.fire_id,
            reason=reason,
        )
