"""Releasing a throttled event, shared by the API (``POST /v1/events/{event_id}/release``) and the
poller's Kafka ack consumer: find the event's schedule, its policy, and the token the event holds.

Kafka acks are authenticated per client: each client has a random ack secret (server-side only), every
delivery of a throttled event carries ``ack_token`` = base64url(HMAC-SHA256(secret, event_id)) without
padding, and an ack is honoured only with the token of its event.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import uuid

from tickd.schema.errors import InvalidInput, NotFound
from tickd.schema.store import Store

_EVENT_ID = re.compile(r"^([0-9a-fA-F-]{36}):([0-9]{1,15}):([0-9]{1,7})$")


def event_schedule_id(event_id: str) -> uuid.UUID:
    """The schedule id an event id starts with; ``InvalidInput`` (field ``event_id``) if it is not one."""
    match = _EVENT_ID.match(event_id)
    if match is None:
        raise InvalidInput("event_id must look like <schedule_id>:<epoch ms>:<index>", field="event_id")
    try:
        return uuid.UUID(match.group(1))
    except ValueError:
        raise InvalidInput("event_id must start with a schedule id (a UUID)", field="event_id") from None


def new_ack_secret() -> str:
    """A client's ack secret: 32 random bytes, urlsafe."""
    return secrets.token_urlsafe(32)


def ack_token(secret: str, event_id: str) -> str:
    """The token a throttled event's delivery carries and its Kafka ack must give back (43 characters)."""
    digest = hmac.new(secret.encode(), event_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def ack_token_matches(secret: str, event_id: str, given: str) -> bool:
    """Compared in constant time."""
    return hmac.compare_digest(ack_token(secret, event_id).encode(), given.encode())


async def release_event(store: Store, client_id: str, event_id: str) -> bool:
    """Free the token ``event_id`` holds. False if it holds none (released before, or timed out);
    ``NotFound`` if no throttled schedule of this client has such an event."""
    schedule = await store.get_schedule(client_id, event_schedule_id(event_id))
    policy = schedule.options.throttle if schedule is not None and schedule.options is not None else None
    if policy is None:
        raise NotFound("no throttled schedule has this event", field="event_id")
    for token in await store.tokens(client_id, policy):
        if token.event_id == event_id:
            return await store.release_token(client_id, policy, token.slot, event_id)
    return False
