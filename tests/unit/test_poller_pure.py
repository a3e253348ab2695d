import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.poller import minutes, ring
from tickd.poller.settings import PollerSettings
from tickd.schema.errors import ConfigError
from tickd.schema.model import Client, InstanceKey

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
M = timedelta(minutes=1)


def client(cid: str, count: int, span: int = 0) -> Client:
    return Client(cid, count, True, "h", T0, T0, poller_span=span)


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


def test_instances_cover_the_span_not_only_the_count() -> None:
    keys = ring.instances_of([client("a", 2, span=5), client("b", 3)])
    assert keys == [InstanceKey("a", p) for p in range(5)] + [InstanceKey("b", p) for p in range(3)]


def test_assignment_is_total_deterministic_and_moves_about_one_nth() -> None:
    keys = ring.instances_of([client(f"c{i}", 40) for i in range(10)])
    three = ring.assign(keys, ["n1", "n2", "n3"])
    assert set(three) == set(keys) and set(three.values()) == {"n1", "n2", "n3"}
    assert ring.assign(keys, ["n3", "n1", "n2", "n1"]) == three  # order and repeats do not matter
    four = ring.assign(keys, ["n1", "n2", "n3", "n4"])
    moved = [k for k in keys if three[k] != four[k]]
    assert all(four[k] == "n4" for k in moved)  # only moves onto the new node
    assert 0.15 < len(moved) / len(keys) < 0.35
    assert ring.assign(keys, []) == {}


@pytest.mark.parametrize(("nodes", "pollers"), [(3, 4), (6, 8), (10, 16), (7, 23)])
def test_bounded_placement_caps_every_node_and_is_the_same_everywhere(nodes: int, pollers: int) -> None:
    keys = ring.instances_of([client(f"c{i}", pollers) for i in range(nodes)])
    members = [f"node-{i}" for i in range(nodes)]
    placed = ring.assign_bounded(keys, members)
    assert set(placed) == set(keys) and set(placed.values()) <= set(members)
    cap = ring.capacity(len(keys), nodes)
    assert max(Counter(placed.values()).values()) <= cap <= len(keys) / nodes * ring.LOAD_FACTOR + 1
    assert ring.assign_bounded(list(reversed(keys)), [*reversed(members), members[0]]) == placed  # any order
    plain = ring.assign(keys, members)
    # Each instance is on its plain owner, or on a node further clockwise only because that one was full.
    moved = [k for k in keys if placed[k] != plain[k]]
    assert all(Counter(placed.values())[plain[k]] == cap for k in moved)


def test_capacity_never_leaves_an_instance_without_room() -> None:
    assert ring.capacity(12, 3) == 5 and ring.capacity(10, 3) == 5 and ring.capacity(3, 4) == 1
    assert ring.capacity(0, 3) == 0 and ring.capacity(5, 0) == 0
    assert all(ring.capacity(n, m) * m >= n for n in range(0, 200) for m in range(1, 40))
    with pytest.raises(ValueError, match="load_factor"):
        ring.assign_bounded([InstanceKey("a", 0)], ["n1"], load_factor=0.9)


def test_owned_by_partitions_the_instances() -> None:
    keys = ring.instances_of([client("a", 12)])
    nodes = ["n1", "n2", "n3"]
    owned = [ring.owned_by(n, keys, nodes) for n in nodes]
    assert set().union(*owned) == set(keys) and sum(map(len, owned)) == len(keys)


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
