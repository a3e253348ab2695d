"""Signed deliveries (the Standard Webhooks convention, https://www.standardwebhooks.com).

Every delivery of a client that has a signing secret carries three values, as HTTP headers or as Kafka
record headers (UTF-8 bytes):

- ``webhook-id``: the id to deduplicate on, constant across retries: the event id of a batch
  trigger's event, else the fire id;
- ``webhook-timestamp``: when this attempt was sent, integer Unix seconds;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.".encode() + body)>`` for each
  valid secret (current first), separated by spaces: two while a rotated-out secret is still valid.

A secret is ``whsec_<base64 key>``; the HMAC key is the decoded part. ``body`` is the exact bytes sent
(the HTTP body, the Kafka record value). Subscribers verify with ``tickd_client.webhooks.verify``
(``sdk/python``), which needs nothing of the server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence
from functools import lru_cache

from tickd.schema.model import Schedule
from tickd.schema.signing import SECRET_PREFIX

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


@lru_cache(maxsize=4096)
def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (a secret without the prefix is taken as plain base64)."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def signature(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, space-separated."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digests = (hmac.new(secret_key(s), signed, hashlib.sha256).digest() for s in secrets)
    return " ".join("v1," + base64.b64encode(d).decode() for d in digests)


def webhook_id(schedule: Schedule) -> str:
    """What a subscriber deduplicates on: the event id of an event, else the fire id."""
    event_id = schedule.event_id
    return schedule.fire_id if event_id is None else event_id


def signed_headers(schedule: Schedule, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a delivery of ``schedule`` sent at ``timestamp``; none if it has no secret."""
    if not schedule.signing_secrets:
        return {}
    msg_id = webhook_id(schedule)
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(schedule.signing_secrets, msg_id, timestamp, body),
    }
