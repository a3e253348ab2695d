"""Finding a client's dead letters: by id, and a page of those matching a filter (newest first).

Dead letters are stored one partition per client and UTC day; a page reads the days of its range from
the newest down, each whole, so a range is bounded (``MAX_RANGE``) and so is the work of a page.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, date, datetime, time, timedelta

from tickd.schema import timing
from tickd.schema.errors import NotFound
from tickd.schema.model import DeadLetter, ListCursor
from tickd.schema.store import Store
from tickd.service.errors import Invalid

MAX_RANGE = timedelta(days=31)
DEFAULT_RANGE = timedelta(days=7)
_MS = timedelta(milliseconds=1)


@dataclasses.dataclass(frozen=True)
class Filter:
    """Dead letters that failed in [start, end), of ``schedule_id`` if given, after ``after``."""

    start: datetime
    end: datetime
    schedule_id: uuid.UUID | None = None
    after: ListCursor | None = None
    unredriven: bool = False

    def keeps(self, letter: DeadLetter) -> bool:
        if not self.start <= letter.failed_at < self.end:
            return False
        if self.schedule_id is not None and letter.schedule_id != self.schedule_id:
            return False
        if self.unredriven and letter.redriven_at is not None:
            return False
        return self.after is None or _past(letter, self.after)


def _past(letter: DeadLetter, after: ListCursor) -> bool:
    """Whether ``letter`` comes after the cursor in (failed_at newest first, schedule_id) order."""
    if letter.failed_at != after.due_at:
        return letter.failed_at < after.due_at
    return after.schedule_id is not None and letter.schedule_id > after.schedule_id


def time_range(start: datetime | None, end: datetime | None, now: datetime) -> tuple[datetime, datetime]:
    """[start, end): by default the last 7 days (to now, included); at most 31 days."""
    end = end if end is not None else now + _MS
    if start is None:
        try:
            start = end - DEFAULT_RANGE
        except OverflowError:  # to in year 1's first week: no 7 days before it
            raise Invalid("to is too early for the default range; give from", field="to", code="out_of_range") from None
    if not timedelta(0) < end - start <= MAX_RANGE:
        raise Invalid(f"to must be after from, at most {MAX_RANGE.days} days later", field="to", code="out_of_range")
    return start, end


def parse_id(text: str) -> tuple[datetime, uuid.UUID]:
    """A dead letter id (its shape checked by ``params.DeadLetterPath``) as its key."""
    ms, schedule_id = text.split("-", 1)
    try:
        return timing.from_epoch_ms(int(ms)), uuid.UUID(schedule_id)
    except (OverflowError, ValueError):  # a forged id can leave the calendar
        raise NotFound("no such dead letter", field="dead_letter_id") from None


async def get(store: Store, client_id: str, letter_id: str) -> DeadLetter:
    failed_at, schedule_id = parse_id(letter_id)
    found = await store.get_dead_letter(client_id, failed_at, schedule_id)
    if found is None:
        raise NotFound("no such dead letter", field="dead_letter_id")
    return found


# Rows one page may read, whatever its filter keeps: a page looking for one schedule's dead letters among
# many ends early, with a cursor where it stopped (the page is short, the next one goes on).
PAGE_READ_BUDGET = 2000
_DAY = timedelta(days=1)
_LAST_MS = time(23, 59, 59, 999_000)  # of a day: its end, even on 9999-12-31


@dataclasses.dataclass
class _Reading:
    """Where a page's reads stand: the last row looked at (the cursor if the page stops there), and the
    rows it may still read."""

    position: ListCursor | None
    rows_left: int


async def page(store: Store, client_id: str, wanted: Filter, limit: int) -> tuple[list[DeadLetter], str | None]:
    """Up to ``limit`` dead letters matching ``wanted``, newest first (without their payloads), and the
    cursor of the next page. Each day's read carries the rows still wanted as its LIMIT; the page reads
    at most ``PAGE_READ_BUDGET`` rows and the range's days (``MAX_RANGE``: 31 partitions)."""
    top = wanted.after.due_at if wanted.after is not None else wanted.end - _MS
    reading = _Reading(wanted.after, PAGE_READ_BUDGET)
    keep = dataclasses.replace(wanted, after=None)  # the position is the reading's
    found: list[DeadLetter] = []
    day, first = top.date(), wanted.start.date()
    while True:
        want = limit + 1 - len(found)  # one more than the page shows: is there a next page?
        complete = await _read_day(store, client_id, day, wanted.start, top, keep, reading, want, found)
        if len(found) > limit:
            last = found[limit - 1]
            return found[:limit], ListCursor(last.failed_at, last.schedule_id).encode()
        if not complete:  # the read budget is spent before the day was
            return found, reading.position.encode() if reading.position is not None else None
        if day <= first:
            return found, None  # not below it: the day before year 1 does not exist
        day -= _DAY


async def _read_day(
    store: Store,
    client_id: str,
    day: date,
    start: datetime,
    top: datetime,
    keep: Filter,
    reading: _Reading,
    wanted: int,
    found: list[DeadLetter],
) -> bool:
    """Read ``day`` down from the reading's position, adding what ``keep`` keeps to ``found``, until
    ``wanted`` more are found or the day ends; False when the page's read budget ran out first."""
    since, size = max(start, datetime.combine(day, time(), UTC)), wanted
    while wanted > 0:
        until = min(top, datetime.combine(day, _LAST_MS, UTC))
        if reading.position is not None:
            until = min(until, reading.position.due_at)
        size = min(size, reading.rows_left)
        if until < since:
            return True
        if size <= 0:
            return False
        rows = await store.page_dead_letters(client_id, day, since, until, size)
        reading.rows_left -= len(rows)
        fresh = [r for r in rows if reading.position is None or _past(r, reading.position)]
        for letter in fresh:
            reading.position = ListCursor(letter.failed_at, letter.schedule_id)
            if keep.keeps(letter):
                found.append(letter)
                wanted -= 1
        if len(rows) < size:
            return True
        size = wanted if fresh else size * 2  # every row read was at the cursor's own millisecond
    return True
