"""The driver logs every Cassandra server warning; a batch-size warning (one per create group, by
design) is let through once per interval with the count it stands for. Other warnings pass as they are."""

from __future__ import annotations

import logging

from tickd.schema.logs import BatchSizeWarnings

BATCH = (
    "Batch for [tickd.schedules, tickd.schedule_refs] is of size 11.977KiB, "
    "exceeding specified threshold of 5.000KiB by 6.977KiB."
)


def _record(*args: object, msg: str = "Server warning: %s") -> logging.LogRecord:
    return logging.LogRecord("cassandra.protocol", logging.WARNING, __file__, 1, msg, args, None)


def test_batch_size_warnings_are_one_line_per_interval_with_their_count() -> None:
    held = BatchSizeWarnings(every_s=3600)
    first = _record(BATCH)
    assert held.filter(first)
    assert "1 times" in first.getMessage() and BATCH in first.getMessage()
    assert [held.filter(_record(BATCH)) for _ in range(5)] == [False] * 5

    shortly = BatchSizeWarnings(every_s=0)
    shortly.filter(_record(BATCH))
    again = _record(BATCH)
    assert shortly.filter(again) and "1 times" in again.getMessage()


def test_other_server_warnings_and_other_lines_pass_untouched() -> None:
    held = BatchSizeWarnings(every_s=3600)
    held.filter(_record(BATCH))
    tombstones = _record("Read 5000 live rows and 12000 tombstone cells for query SELECT ...")
    assert held.filter(tombstones)
    assert tombstones.getMessage().startswith("Server warning: Read 5000 live rows")
    odd = _record(BATCH, msg="something else: %s")
    assert held.filter(odd) and odd.getMessage() == f"something else: {BATCH}"
    assert held.filter(_record(msg="no arguments at all"))


def test_the_counted_lines_are_the_ones_held_back() -> None:
    held = BatchSizeWarnings(every_s=3600)
    held.filter(_record(BATCH))
    for _ in range(7):
        held.filter(_record(BATCH))
    held._next = 0.0  # the interval is over
    line = _record(BATCH)
    assert held.filter(line) and "8 times" in line.getMessage()
