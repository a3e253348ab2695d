"""A trigger: one extra fire of a schedule now, without moving its timeline.

It is a one-time schedule of its own, written like a create: its id derived from the schedule's and
the trigger time (``uuid5``, as a retry row's id is derived from its fire id), so a retried request
rebuilds the same one; the payload and callback of the schedule; ``retry_of`` the schedule, so its
subscribers see the schedule's id and a fire id of its own, ``<schedule_id>:<trigger time ms>``.
It fires as one plain fire: a batch trigger's events and window and a throttle policy do not apply.
Its outcome is its own (``GET /v1/schedules/{trigger id}``), not in the schedule's runs; its dead
letter carries the schedule's id and its own fire id, and is redriven to the trigger (``schema.redrives``).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from tickd.schema import timing
from tickd.schema.model import Client, Location, Options, Schedule


def trigger_id(parent: uuid.UUID, at: datetime) -> uuid.UUID:
    return uuid.uuid5(parent, f"trigger:{timing.to_epoch_ms(at)}")


def trigger_row(client: Client, parent: Schedule, at: datetime) -> Schedule:
    """The trigger of ``parent`` at ``at`` (millisecond precision) as a schedule to create, due then."""
    schedule_id = trigger_id(parent.schedule_id, at)
    location = Location(timing.poller_id_for(schedule_id, client.poller_count), at)
    options = Options(retry_of=parent.schedule_id)
    return Schedule(client.client_id, schedule_id, location, at, parent.payload, parent.callback, at, options=options)
