"""Finding a client's dead letters: by id, and a page of those matching a filter (newest first).

Dead letters are stored one partition per client and UTC day; a page reads the days of its range from
the newest down, each whole, so a range is bounded (``MAX_RANGE``) and so is the work of a page.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

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
    start = start if start is not None else end - DEFAULT_RANGE
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


async def page(store: Store, client_id: str, wanted: Filter, limit: int) -> tuple[list[DeadLetter], str | None]:
    """Up to ``limit`` dead letters matching ``wanted``, newest first, and the cursor of the next page."""
    top = wanted.after.due_at if wanted.after is not None else wanted.end - _MS
    day, first = top.date(), wanted.start.date()
    found: list[DeadLetter] = []
    while day >= first and len(found) <= limit:
        letters = [letter for letter in await store.list_dead_letters(client_id, day) if wanted.keeps(letter)]
        letters.sort(key=lambda letter: letter.schedule_id)
        letters.sort(key=lambda letter: letter.failed_at, reverse=True)
        found += letters
        if day == first:
            break  # not below it: the day before year 1 does not exist
        day -= timedelta(days=1)
    if len(found) <= limit:
        return found, None
    last = found[limit - 1]
    return found[:limit], ListCursor(last.failed_at, last.schedule_id).encode()
