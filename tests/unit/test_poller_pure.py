import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.poller import minutes
from tickd.poller.settings import PollerSettings
from tickd.schema.errors import ConfigError

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
M = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("checkpoint", "now", "window_s", "start", "skip_from"),
    [
        # Resumes right after the checkpoint.
        (T0, T0 + 5 * M, 3600, T0 + M, None),
        # No checkpoint: from the client's first minute (created at T0).
        (None, T0 + 5 * M + timedelta(seconds=7), 3600, T0, None),
        # Down longer than the window: minutes before it are skipped (and recorded).
        (T0, T0 + 3 * 60 * M, 3600, T0 + 2 * 60 * M, T0 + M),
        # No checkpoint and an old client: nothing was ever read, nothing to record as skipped.
        (None, T0 + 3 * 60 * M, 3600, T0 + 2 * 60 * M, None),
    ],
)
def test_plan_start(
    checkpoint: datetime | None, now: datetime, window_s: int, start: datetime, skip_from: datetime | None
) -> None:
    assert minutes.plan_start(checkpoint, T0, now, window_s) == minutes.StartPlan(start, skip_from)


def test_minute_windows() -> None:
    assert minutes.opens_at(T0, 5) == T0 - timedelta(seconds=5)
    assert minutes.closes_at(T0, 10) == T0 + M + timedelta(seconds=10)
    assert minutes.minutes_between(T0, T0 + 3 * M) == [T0, T0 + M, T0 + 2 * M]
    assert minutes.minutes_between(T0, T0) == []


@given(st.floats(0, 59.999), st.floats(0, 59.999), st.floats(0, 30))
def test_reread_window_covers_late_writes_and_unfired_rows(touch_s: float, now_s: float, lag_s: float) -> None:
    touch, now = T0 + timedelta(seconds=touch_s), T0 + timedelta(seconds=now_s)
    start = minutes.reread_from(T0, touch, now, lag_s)
    assert T0 <= start <= min(touch, now)
    assert start <= max(T0, min(touch, now) - timedelta(seconds=lag_s))


def test_settings_refuse_inconsistent_timing() -> None:
    with pytest.raises(ConfigError, match="HEARTBEAT"):
        PollerSettings.from_env({"TICKD_HEARTBEAT_INTERVAL_S": "3", "TICKD_NODE_TTL_S": "6"})
    with pytest.raises(ConfigError, match="HOT_WINDOW"):
        PollerSettings.from_env({"TICKD_PRELOAD_S": "40", "TICKD_REREAD_LAG_S": "60", "TICKD_HOT_WINDOW_S": "90"})
    assert PollerSettings.from_env({"TICKD_NODE_ID": "n9"}).node_id == "n9"


def test_sweep_offsets_spread_a_clients_instances_over_the_spread() -> None:
    offsets = sorted(minutes.sweep_offset_s("client-a", p, 16.0) for p in range(16))
    assert all(0 <= o < 16.0 for o in offsets)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert min(gaps) > 0.3 and max(gaps) < 3.0  # none share a moment, none far apart
    assert minutes.sweep_offset_s("client-a", 3, 0.0) == 0.0
    assert minutes.sweep_offset_s("client-a", 3, 16.0) != minutes.sweep_offset_s("client-b", 3, 16.0)


@pytest.mark.parametrize("value", ["-1", "31", "nan", "inf", "abc", "", "0x10", "15;rm", "1e308"])
def test_a_sweep_spread_outside_0_to_30_seconds_is_refused_by_name(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        PollerSettings.from_env({"TICKD_SWEEP_SPREAD_S": value})
    assert refused.value.field == "TICKD_SWEEP_SPREAD_S"


def test_a_sweep_spread_is_read_from_the_environment() -> None:
    assert PollerSettings.from_env({"TICKD_SWEEP_SPREAD_S": " 0 "}).sweep_spread_s == 0.0
    assert PollerSettings.from_env({"TICKD_SWEEP_SPREAD_S": "30"}).sweep_spread_s == 30.0
    assert PollerSettings.from_env({}).sweep_spread_s == 15.0
