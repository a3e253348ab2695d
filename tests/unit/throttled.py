"""A throttled event holding its policy's token, for the tests of releases (acks, the policies service)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import KafkaCallback, Location, Options, Schedule, Token


async def hold_a_token(store: CassandraStore, client_id: str, now: datetime) -> tuple[Schedule, str]:
    """A throttled schedule of ``client_id`` under policy "p" whose first event holds a token: (the
    schedule, the event id). The policy must exist."""
    schedule = Schedule(
        client_id,
        uuid.uuid4(),
        Location(0, now + timedelta(hours=1)),
        now + timedelta(hours=1),
        b"{}",
        KafkaCallback(topic="orders.fired"),
        now,
        options=Options(throttle="p"),
    )
    await store.create_schedule(schedule, now)
    event_id = f"{schedule.fire_id}:0"
    assert await store.take_token(Token(client_id, "p", 1, event_id, "node", now), 600)
    return schedule, event_id
