"""The search for a next fire is bounded: a rule that never fires is refused at once, not scanned to 9999.

The bound is on work, counted, not on time: a CPU-time limit measured the other threads of the test
process too (the Cassandra driver's, in the full suite) and failed on a busy machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema import recurrence as rec
from tickd.schema.errors import InvalidInput
from tickd.schema.recurrence import MAX_SCAN_STEPS, CronRule, Recurrence, next_fire, parse_recurrence, preview

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# Rules whose every match falls in New York's spring-forward gap (02:00-02:59 on the 2nd Sunday of March).
@pytest.fixture
def wall_times_looked_at(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """Every matching wall time a search turns into an instant: the unit of its work."""
    seen: list[datetime] = []
    to_instant = rec._to_instant

    def counted(wall: datetime, *args: object) -> datetime | None:
        seen.append(wall)
        return to_instant(wall, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(rec, "_to_instant", counted)
    return seen


DEAD_RULES = [
    ("30 2 * 3 0#2", "America/New_York"),
    ("* 2 * 3 0#2", "America/New_York"),
    ("*/5 2 * 3 0#2", "America/New_York"),
    ("15 2 * 10 0#1", "Australia/Lord_Howe"),
]


@pytest.mark.parametrize(("expr", "zone"), DEAD_RULES)
def test_a_rule_that_only_matches_a_gap_is_refused_fast(
    expr: str, zone: str, wall_times_looked_at: list[datetime]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_recurrence(now=NOW, cron=expr, timezone=zone, on_gap="skip")
    assert caught.value.field == "cron"
    assert len(wall_times_looked_at) == MAX_SCAN_STEPS  # the whole budget, and not one wall time more
    assert wall_times_looked_at[-1].year < 2026 + MAX_SCAN_STEPS  # never scanned on towards year 9999


@pytest.mark.parametrize(("expr", "zone"), DEAD_RULES[:2])
def test_the_same_rule_shifted_fires_at_the_end_of_the_gap(expr: str, zone: str) -> None:
    recurrence = parse_recurrence(now=NOW, cron=expr, timezone=zone)
    assert next_fire(recurrence, NOW) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT


def test_next_fire_of_a_dead_rule_ends_the_timeline(wall_times_looked_at: list[datetime]) -> None:
    dead = Recurrence(CronRule("30 2 * 3 0#2", "America/New_York", on_gap="skip"))
    assert next_fire(dead, NOW) is None
    assert len(wall_times_looked_at) == MAX_SCAN_STEPS
    assert preview(dead, NOW, 100) == []
    assert len(wall_times_looked_at) == 2 * MAX_SCAN_STEPS  # 100 fires asked for share one budget


def test_preview_shares_one_budget() -> None:
    every_minute = Recurrence(CronRule("* * * * *"))
    assert len(preview(every_minute, NOW, 100)) == 100  # one step per fire: well inside the budget
    assert MAX_SCAN_STEPS >= 100


def test_a_rare_rule_that_does_fire_is_kept() -> None:
    leap_monday = parse_recurrence(now=NOW, cron="0 0 29 2 1#5")  # fifth Monday of February: 29 Feb 2044
    assert next_fire(leap_monday, NOW) is not None


@pytest.mark.parametrize(
    "after",
    [datetime(9999, 12, 31, 23, 59, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
)
def test_the_end_of_the_calendar_ends_the_timeline(after: datetime) -> None:
    assert next_fire(Recurrence(CronRule("0 * * * *", "Pacific/Kiritimati")), after) is None
    assert next_fire(Recurrence(CronRule("0 * * * *")), after - timedelta(days=1)) is not None


def test_start_at_at_the_calendar_start_is_harmless() -> None:
    recurrence = Recurrence(CronRule("0 0 * * *"), start_at=datetime(1, 1, 1, tzinfo=UTC))
    assert next_fire(recurrence, NOW) == datetime(2026, 1, 2, tzinfo=UTC)
