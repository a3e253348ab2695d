"""The rules a client's Kafka grants (``kafka_topics``) must follow beyond their syntax, checked when an
admin registers a client or changes its grants.

- **Reserved topics are nobody's** (422 ``topic_reserved``): Kafka's internal ones (``__*``:
  ``__consumer_offsets`` and the like) and tickd's own (the ack topic and ``TICKD_KAFKA_RESERVED_TOPICS``),
  including through a prefix (``tickd-*`` when the ack topic is ``tickd-acks``).
- **A grant overlapping another client's is warned about by default, refused on request**
  (``TICKD_KAFKA_REFUSE_GRANT_OVERLAPS=true``: 409 ``grant_overlaps``). Warned (log
  ``kafka_grant_overlaps``, response header ``X-Tickd-Warning``), not refused, because the harm the
  overlap used to cause (a topic revoked from one tenant and granted to another receiving the first
  one's recurring fires and redrives) is now stopped where the send happens (``poller.grants``), and a
  topic shared on purpose (an audit topic: every record names its ``client_id``) is an admin's choice;
  a deployment that wants one writer per topic turns refusal on. Either way the answer names the grant
  of the request that overlaps, never the other client. Only grants new to the client are checked, so
  an overlap from before never blocks a PATCH that keeps or removes it.
- **A redrive to a topic no longer granted is refused** (409 ``topic_not_allowed``), as its fire would be
  at the send.
"""

from __future__ import annotations

from collections.abc import Iterable

from tickd.schema import grants
from tickd.schema.errors import Conflict
from tickd.schema.model import Callback, Client, KafkaCallback
from tickd.service.errors import Invalid

# The admin lock that serialises grant changes of all clients in one API replica (a client id cannot
# contain ":", so it is never a client's own lock).
LOCK = "kafka:grants"


def refuse_reserved(wanted: Iterable[str], reserved: frozenset[str]) -> None:
    for i, grant in enumerate(wanted):
        if grants.reserved_grant(grant, reserved):
            raise Invalid(
                f"{grant!r} would reach a topic reserved for Kafka (__*) or for tickd itself",
                field=f"kafka_topics.{i}",
                code="topic_reserved",
            )


def overlapping(client_id: str, wanted: list[str], held: frozenset[str], others: Iterable[Client]) -> int | None:
    """The index in ``wanted`` of the first grant ``client_id`` does not hold yet that overlaps a grant
    of another client; None if there is none."""
    taken = [g for other in others if other.client_id != client_id for g in other.kafka_topics]
    for i, grant in enumerate(wanted):
        if grant not in held and any(grants.overlap(grant, theirs) for theirs in taken):
            return i
    return None


def overlap_conflict(wanted: list[str], index: int) -> Conflict:
    exc = Conflict(
        f"{wanted[index]!r} overlaps a Kafka grant another client holds; revoke that one first",
        field=f"kafka_topics.{index}",
    )
    exc.code = "grant_overlaps"
    return exc


def refuse_revoked(client: Client, callback: Callback, reserved: frozenset[str]) -> None:
    """409 ``topic_not_allowed`` for a redrive to a Kafka topic the client no longer holds a grant for (or
    a reserved one): it would be dead-lettered again by the poller, which checks the same at the send."""
    if not isinstance(callback, KafkaCallback):
        return
    topic = callback.topic
    if grants.reserved_topic(topic, reserved) or not grants.topic_allowed(topic, client.kafka_topics):
        exc = Conflict(f"kafka topic {topic!r} is no longer granted to this client", field="callback.topic")
        exc.code = "topic_not_allowed"
        raise exc
