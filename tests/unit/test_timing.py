from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickd.schema import timing

# hypothesis takes naive bounds and attaches the zones itself.
_LOW, _HIGH = datetime(1971, 1, 1), datetime(2200, 1, 1)  # noqa: DTZ001
aware = st.datetimes(min_value=_LOW, max_value=_HIGH, timezones=st.timezones()).filter(
    lambda d: d.utcoffset() is not None
)
uuids = st.uuids(version=4)


@given(uuids, st.integers(min_value=1, max_value=1024))
def test_poller_id_in_range(schedule_id: UUID, count: int) -> None:
    assert 0 <= timing.poller_id_for(schedule_id, count) < count


def test_poller_id_is_stable_and_spreads() -> None:
    ids = [uuid4() for _ in range(8000)]
    counts = [0] * 8
    for i in ids:
        assert timing.poller_id_for(i, 8) == timing.poller_id_for(i, 8)
        counts[timing.poller_id_for(i, 8)] += 1
    # 1000 expected per poller; a uniform choice stays well within 20 %.
    assert min(counts) > 800 and max(counts) < 1200


@pytest.mark.parametrize("count", [0, -1])
def test_poller_id_rejects_empty_quota(count: int) -> None:
    with pytest.raises(ValueError):
        timing.poller_id_for(uuid4(), count)


@pytest.mark.parametrize(
    ("moment", "bucket"),
    [
        (datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC), datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        (datetime(2026, 11, 22, 10, 0, 59, 999000, tzinfo=UTC), datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        (datetime(2026, 11, 22, 10, 0, 59, 999999, tzinfo=UTC), datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        (datetime(2026, 11, 22, 10, 1, 0, tzinfo=UTC), datetime(2026, 11, 22, 10, 1, tzinfo=UTC)),
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(2026, 12, 31, 23, 59, tzinfo=UTC)),
        # A +05:30 offset: the bucket is the UTC minute, not the local one.
        (
            datetime(2026, 11, 22, 15, 30, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
        ),
    ],
)
def test_minute_bucket_boundaries(moment: datetime, bucket: datetime) -> None:
    assert timing.minute_bucket(moment) == bucket


@given(aware)
def test_bucket_holds_the_moment_and_ignores_zone(moment: datetime) -> None:
    bucket = timing.minute_bucket(moment)
    assert bucket <= moment < bucket + timedelta(minutes=1)
    assert bucket.second == 0 and bucket.microsecond == 0 and bucket.tzinfo == UTC
    assert timing.minute_bucket(moment.astimezone(ZoneInfo("Asia/Kolkata"))) == bucket
    assert timing.minute_bucket(moment.astimezone(UTC)) == bucket


def test_bucket_refuses_naive() -> None:
    with pytest.raises(ValueError, match="naive"):
        timing.minute_bucket(datetime(2026, 1, 1))  # noqa: DTZ001 - the point of the test


def test_due_time_never_in_the_past() -> None:
    now = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    assert timing.due_time(now - timedelta(days=1), now) == now
    assert timing.due_time(now + timedelta(seconds=5), now) == now + timedelta(seconds=5)


@given(uuids, aware)
def test_fire_id_round_trips_the_nominal_time(schedule_id: UUID, nominal: datetime) -> None:
    fid = timing.fire_id(schedule_id, nominal)
    sid, ms = fid.split(":")
    assert UUID(sid) == schedule_id
    assert timing.from_epoch_ms(int(ms)) == timing.from_epoch_ms(timing.to_epoch_ms(nominal))


@given(st.integers(0, 2**30 - 1), st.integers(0, 2**30 - 1), aware, aware)
def test_fenced_timestamp_orders_epoch_before_minute(e1: int, e2: int, m1: datetime, m2: datetime) -> None:
    t1, t2 = timing.fenced_timestamp(e1, m1), timing.fenced_timestamp(e2, m2)
    if e1 < e2:
        assert t1 < t2
    elif e1 == e2:
        assert (t1 < t2) == (timing.minute_bucket(m1) < timing.minute_bucket(m2))


def test_row_ttl_outlives_due_time_and_is_capped() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    assert timing.row_ttl_s(now + timedelta(seconds=100.2), now, 3600) == 3701
    assert timing.row_ttl_s(now - timedelta(hours=1), now, 3600) == 3600
    assert timing.row_ttl_s(now + timedelta(days=365 * 30), now, 3600) == timing.MAX_TTL_S


def test_hot_window() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    assert timing.is_hot(now + timedelta(seconds=30), now, 90)
    assert not timing.is_hot(now + timedelta(seconds=90), now, 90)
