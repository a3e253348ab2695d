"""Debounce by business key: a burst of PUTs of one key coalesced into one fire (``schema.model.Debounce``).

A by-key PUT that carries ``debounce {window_s, max_wait_s, edge}`` gets no fire time of its own; this
module gives it one:

- ``trailing`` (the default): the key's pending fire goes out ``window_s`` after the latest PUT, with that
  PUT's payload and callback. Each PUT while the fire is pending pushes it back, never further than
  ``max_wait_s`` after the first PUT it carries (absent: no cap), so a key PUT without pause still fires;
  past the cap, each PUT moves it a millisecond (a version never takes its predecessor's fire time).
- ``leading``: the first PUT of a burst (no PUT of the key in the ``window_s`` before it) fires at once;
  the burst's later PUTs coalesce into one trailing fire as above, which only a later PUT creates.

A PUT may move the pending fire at any time, inside the mutation guard too: a debounced row is read again
right before it is sent (``Schedule.rechecked``), so a fire the PUT pushed back is dropped there. A PUT
that lands while the fire is already on the wire cannot stop it: both arrive, the later one with the
later payload. Nothing acknowledged is lost: the latest PUT's payload goes out after that PUT.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from msgspec import UnsetType

from tickd.schema.model import Debounce, Schedule, Status
from tickd.service.errors import Invalid
from tickd.service.settings import ApiSettings
from tickd.service.validation import DebounceFields, KeyedCreate, to_ms

_ONE_MS = timedelta(milliseconds=1)
# The fields a debounced PUT may not carry, with why: its fire time is the debounce's, and it fires once.
_REFUSED = (
    ("fire_at", "a debounced PUT's fire time comes from debounce; give no fire_at"),
    ("delay_s", "a debounced PUT's fire time comes from debounce; give no delay_s"),
    ("cron", "debounce is for one-time schedules; a recurring one cannot be debounced"),
    ("every", "debounce is for one-time schedules; a recurring one cannot be debounced"),
    ("events", "a debounced fire is one plain fire: events do not apply"),
    ("window", "a debounced fire is one plain fire: window does not apply"),
    ("throttle", "a debounced fire is one plain fire: throttle does not apply"),
    ("jitter", "a debounced fire goes out when its debounce says: jitter does not apply"),
)


def check(body: KeyedCreate, settings: ApiSettings) -> DebounceFields | None:
    """The PUT's debounce, once its other fields are checked against it; None for a PUT without one."""
    spec = body.debounce
    if isinstance(spec, UnsetType):
        return None
    for field, why in _REFUSED:
        if not isinstance(getattr(body, field), UnsetType):
            raise Invalid(why, field=field)
    if not isinstance(spec.max_wait_s, UnsetType) and spec.max_wait_s < spec.window_s:
        raise Invalid(
            f"debounce.max_wait_s ({spec.max_wait_s:g}) is shorter than debounce.window_s ({spec.window_s:g})",
            field="debounce.max_wait_s",
            code="out_of_range",
        )
    if spec.window_s > settings.max_horizon_s:
        raise Invalid(
            f"debounce.window_s is more than TICKD_MAX_HORIZON_S ({settings.max_horizon_s} s)",
            field="debounce.window_s",
            code="out_of_range",
        )
    return spec


def plan(spec: DebounceFields, current: Schedule | None, at: datetime) -> tuple[datetime, Debounce]:
    """When the key's fire goes out after a PUT at ``at``, and the debounce its row keeps. ``current``: the
    key's schedule as read (None for a new key): its pending fire is pushed back, or a new one planned."""
    window_ms = round(spec.window_s * 1000)
    max_wait_ms = 0 if isinstance(spec.max_wait_s, UnsetType) else round(spec.max_wait_s * 1000)
    leading = spec.edge == "leading"
    kept = current.debounce if current is not None else None
    at = to_ms(at)
    if current is not None and kept is not None and kept.first_at is not None and _pending(current):
        first = kept.first_at
        if current.fire_at <= first:  # a leading fire not out yet: it goes at once, with this payload
            fire_at = at
        else:
            fire_at = at + timedelta(milliseconds=window_ms)
            if max_wait_ms:
                fire_at = max(at, min(fire_at, first + timedelta(milliseconds=max_wait_ms)))
        # Never the pending fire's own time: a version in place of another (same row, same fire id) can
        # not be told from it by the poller's read before sending, which would send the old payload, and
        # the outcome of that send would retire the new version's row (acceptance D1: a PUT landing once
        # max_wait_s capped the fire). A millisecond later, the old row is dropped, or if it is already on
        # the wire, the new one fires after it.
        fire_at = max(fire_at, current.fire_at + _ONE_MS)
        return fire_at, Debounce(window_ms, max_wait_ms, leading, first, at)
    # A new burst; or, after a leading fire went out, the rest of its burst (a PUT within the window).
    quiet = kept is None or kept.last_at is None or at - kept.last_at >= timedelta(milliseconds=window_ms)
    if leading and quiet:
        first = _apart(at, current)
        return first, Debounce(window_ms, max_wait_ms, leading, first, at)
    delay_ms = min(window_ms, max_wait_ms) if max_wait_ms else window_ms
    return _apart(at + timedelta(milliseconds=delay_ms), current), Debounce(window_ms, max_wait_ms, leading, at, at)


def _apart(fire_at: datetime, current: Schedule | None) -> datetime:
    """``fire_at``, or a millisecond later if the key's schedule has a row due then: a fire in retry, whose
    row the new burst's must not share (same time, same id, another fire). Sharing it, a poller that read
    the pointer before the new row landed sent the retry as the new version, and the new fire, written
    over a row already sent, was never delivered (simulation seed 631019: a leading PUT in the very
    millisecond the retry was due)."""
    if current is not None and fire_at == current.location.due_at:
        return fire_at + _ONE_MS
    return fire_at


def _pending(schedule: Schedule) -> bool:
    """The key's fire has not gone out: scheduled, never attempted (a fire in retry went out: a PUT
    starts a new burst, its retry replaced by the new fire)."""
    return schedule.status is Status.SCHEDULED and schedule.attempts == 0
