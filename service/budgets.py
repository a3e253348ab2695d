"""Amplification limits: what one accepted request may make the pollers do, per tenant and schedule.

One create costs one rate-limit token, but a fire of ``events: 10000`` with a 64 KiB payload makes a
poller write 650 MB of event rows, and ``every: 1s`` with many events a minute multiplies that again.
So a schedule is refused (400, naming the limit and its setting) when one fire would write more than
``TICKD_MAX_FIRE_BYTES`` (events per fire x payload bytes), or when it would fire more than
``TICKD_MAX_FIRES_PER_MINUTE`` times, or deliver more than ``TICKD_MAX_EVENTS_PER_MINUTE`` events, a minute.
"""

from __future__ import annotations

import math

from tickd.schema.model import Options
from tickd.service.errors import Invalid
from tickd.service.settings import ApiSettings


def fires_per_minute(options: Options | None) -> int:
    """The most fires the schedule's rule can produce in one minute (a cron matches a minute once)."""
    repeat = options.repeat if options is not None else None
    if repeat is None or repeat.every_s is None:
        return 1
    return math.ceil(60 / repeat.every_s)


def check(options: Options | None, payload_bytes: int, settings: ApiSettings) -> None:
    events = options.events if options is not None else 1
    field = "events" if events > 1 else "payload"
    fire_bytes = events * payload_bytes
    if fire_bytes > settings.max_fire_bytes:
        raise Invalid(
            f"one fire would write {events} events x {payload_bytes} payload bytes = {fire_bytes} bytes; "
            f"the limit (TICKD_MAX_FIRE_BYTES) is {settings.max_fire_bytes}",
            field=field,
            code="out_of_range",
        )
    fires = fires_per_minute(options)
    if fires > settings.max_fires_per_minute:
        raise Invalid(
            f"the rule fires {fires} times a minute; the limit (TICKD_MAX_FIRES_PER_MINUTE) is "
            f"{settings.max_fires_per_minute}",
            field="every",
            code="out_of_range",
        )
    if fires * events > settings.max_events_per_minute:
        raise Invalid(
            f"{fires} fires a minute x {events} events = {fires * events} events a minute; the limit "
            f"(TICKD_MAX_EVENTS_PER_MINUTE) is {settings.max_events_per_minute}",
            field="events",
            code="out_of_range",
        )
