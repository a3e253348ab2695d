"""Issue 27, debounce: when a debounced by-key PUT's fire goes out (``service.debounce.plan``), as a pure
rule over the key's schedule as the PUT read it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from tickd.schema.model import Debounce, HttpCallback, Location, Options, Schedule, Status
from tickd.service import debounce
from tickd.service.errors import Invalid
from tickd.service.settings import ApiSettings
from tickd.service.validation import DebounceFields, KeyedCreate

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = ApiSettings()
CALLBACK = {"type": "http", "url": "https://x.test/"}


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def keyed(fire_at: datetime, state: Debounce, status: Status = Status.SCHEDULED, attempts: int = 0) -> Schedule:
    sid = uuid.uuid4()
    row = Schedule("c1", sid, Location(0, fire_at), fire_at, b"{}", HttpCallback(url="https://x.test/"), T0)
    return dataclasses.replace(row, options=Options(debounce=state), status=status, attempts=attempts)


def spec(window_s: float, max_wait_s: float | None = None, edge: str = "trailing") -> DebounceFields:
    if max_wait_s is None:
        return DebounceFields(window_s=window_s, edge=edge)  # type: ignore[arg-type]
    return DebounceFields(window_s=window_s, max_wait_s=max_wait_s, edge=edge)  # type: ignore[arg-type]


def test_a_new_key_fires_a_window_after_its_put() -> None:
    fire_at, state = debounce.plan(spec(5), None, T0)
    assert fire_at == T0 + s(5)
    assert state == Debounce(window_ms=5000, max_wait_ms=0, leading=False, first_at=T0, last_at=T0)


def test_each_put_while_pending_pushes_the_fire_back_keeping_the_first_put() -> None:
    first_fire, state = debounce.plan(spec(5), None, T0)
    pending = keyed(first_fire, state)
    fire_at, pushed = debounce.plan(spec(5), pending, T0 + s(4.5))
    assert fire_at == T0 + s(9.5) and pushed.first_at == T0 and pushed.last_at == T0 + s(4.5)


def test_max_wait_caps_how_far_a_burst_pushes_its_fire() -> None:
    state = Debounce(window_ms=5000, max_wait_ms=12_000, first_at=T0, last_at=T0 + s(6))
    pending = keyed(T0 + s(11), state)
    fire_at, _ = debounce.plan(spec(5, 12), pending, T0 + s(10))
    assert fire_at == T0 + s(12)  # not 15: twelve seconds after the burst's first PUT
    capped = keyed(fire_at, state)
    again, _ = debounce.plan(spec(5, 12), capped, T0 + s(11))
    # At the cap a PUT still moves the fire, by a millisecond: a version never takes its predecessor's
    # fire time (the poller could not tell them apart before sending; acceptance D1 sent the old payload).
    assert again == T0 + s(12.001)
    overdue, _ = debounce.plan(spec(5, 12), capped, T0 + s(12.5))
    assert overdue == T0 + s(12.5)  # the cap passed while it was going out: at once, never in the past


def test_a_put_in_the_millisecond_of_a_leading_fire_still_moves_it() -> None:
    lead = spec(5, edge="leading")
    fire_at, state = debounce.plan(lead, None, T0)
    again, _ = debounce.plan(lead, keyed(fire_at, state), T0)
    assert again == T0 + s(0.001)


@pytest.mark.parametrize(
    ("status", "attempts"), [(Status.SUCCEEDED, 0), (Status.CANCELLED, 0), (Status.FAILED, 1), (Status.SCHEDULED, 2)]
)
def test_after_its_fire_went_out_a_put_starts_a_new_burst(status: Status, attempts: int) -> None:
    state = Debounce(window_ms=5000, max_wait_ms=0, first_at=T0, last_at=T0 + s(1))
    fire_at, fresh = debounce.plan(spec(5), keyed(T0 + s(6), state, status, attempts), T0 + s(7))
    assert fire_at == T0 + s(12) and fresh.first_at == fresh.last_at == T0 + s(7)


@pytest.mark.parametrize("edge", ["leading", "trailing"])
def test_a_new_burst_never_takes_the_time_of_a_fire_in_retry(edge: str) -> None:
    """Seed 631019: the key's fire in retry, due at T0 + 12 s; a PUT then starts a new burst. Its fire
    must not be due in that very millisecond: the two rows would be one row (same time, same id)."""
    window = 0.0 if edge == "leading" else 5.0
    state = Debounce(window_ms=5000, max_wait_ms=0, leading=edge == "leading", first_at=T0, last_at=T0)
    in_retry = dataclasses.replace(keyed(T0, state), location=Location(0, T0 + s(12)), attempts=4)
    at = T0 + s(12) - s(window)
    fire_at, fresh = debounce.plan(spec(5, edge=edge), in_retry, at)
    assert fire_at == T0 + s(12.001)
    if edge == "leading":  # the burst's first PUT is its fire: a later PUT of the burst still finds it leading
        assert fresh.first_at == fire_at and fresh.last_at == at
        again, _ = debounce.plan(spec(5, edge=edge), keyed(fire_at, fresh), at + s(0.2))
        assert again == at + s(0.2)
    elsewhere, _ = debounce.plan(spec(5, edge=edge), in_retry, at + s(0.5))
    assert elsewhere == at + s(0.5) + s(window)  # any other time is kept as it is


def test_leading_fires_the_first_put_of_a_burst_at_once_and_the_rest_once_after() -> None:
    lead = spec(5, edge="leading")
    fire_at, state = debounce.plan(lead, None, T0)
    assert fire_at == T0 and state.leading and state.first_at == T0
    # Another PUT before the leading fire went out: still at once, with the latest payload.
    again, _ = debounce.plan(lead, keyed(fire_at, state), T0 + s(0.2))
    assert again == T0 + s(0.2)
    # The leading fire went out; a PUT within the window is the burst's rest: one trailing fire.
    went = keyed(T0, msgspec.structs.replace(state, last_at=T0 + s(0.2)), Status.SUCCEEDED)
    trailing, rest = debounce.plan(lead, went, T0 + s(3))
    assert trailing == T0 + s(8) and rest.first_at == T0 + s(3)
    # ... which later PUTs push back like any trailing fire.
    pushed, _ = debounce.plan(lead, keyed(trailing, rest), T0 + s(4))
    assert pushed == T0 + s(9)
    # A PUT after a quiet window starts a new burst: at once again.
    quiet, _ = debounce.plan(
        lead,
        keyed(T0 + s(9), msgspec.structs.replace(rest, last_at=T0 + s(4)), Status.SUCCEEDED),
        T0 + s(9.5),
    )
    assert quiet == T0 + s(9.5)


def test_a_schedule_put_without_debounce_before_is_a_new_burst() -> None:
    plain = keyed(T0 + s(60), Debounce(window_ms=1))
    plain = dataclasses.replace(plain, options=None)
    fire_at, state = debounce.plan(spec(2), plain, T0)
    assert fire_at == T0 + s(2) and state.first_at == T0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"fire_at": "2030-01-01T00:00:00Z"}, "fire_at"),
        ({"delay_s": 3}, "delay_s"),
        ({"cron": "* * * * *"}, "cron"),
        ({"every": "1m"}, "every"),
        ({"events": 3}, "events"),
        ({"window": "10s"}, "window"),
        ({"throttle": "slow"}, "throttle"),
        ({"jitter": "5s"}, "jitter"),
    ],
)
def test_fields_a_debounce_gives_or_forbids_are_refused_by_name(extra: dict[str, object], field: str) -> None:
    body = msgspec.convert(
        {"callback": {"type": "http", "url": "https://x.test/"}, "debounce": {"window_s": 2}, **extra},
        KeyedCreate,
        strict=False,
    )
    with pytest.raises(Invalid) as refused:
        debounce.check(body, SETTINGS)
    assert refused.value.field == field


def test_a_max_wait_shorter_than_the_window_is_refused() -> None:
    body = msgspec.convert(
        {"callback": {"type": "http", "url": "https://x.test/"}, "debounce": {"window_s": 10, "max_wait_s": 5}},
        KeyedCreate,
    )
    with pytest.raises(Invalid) as refused:
        debounce.check(body, SETTINGS)
    assert refused.value.field == "debounce.max_wait_s" and refused.value.code == "out_of_range"
