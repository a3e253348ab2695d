"""Dead letters as the API reads them (with their redrive marks), and the once-only redrive mark."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID

from tickd.schema.cassandra.bridge import Part, Row, utc
from tickd.schema.model import DeadLetter, decode_callback, decode_tries


def dead_letter_key(client_id: str, failed_at: datetime, schedule_id: UUID) -> dict[str, object]:
    return {
        "client_id": client_id,
        "day": failed_at.astimezone(UTC).date(),
        "failed_at": failed_at,
        "schedule_id": schedule_id,
    }


def dead_letter_of(client_id: str, row: Row) -> DeadLetter:
    """A row of ``dead_letters`` (with its redrive marks) as the model's dead letter; a row read without
    its payload (``page_dead_letters``) has an empty one."""
    return DeadLetter(
        client_id,
        row.schedule_id,
        row.fire_id,
        utc(row.failed_at),
        row.attempts,
        row.last_error,
        decode_callback(row.callback),
        getattr(row, "payload", b""),
        utc(row.redriven_at) if row.redriven_at else None,
        utc(row.redriven_due_at) if row.redriven_due_at else None,
        decode_tries(getattr(row, "tries", None)),  # a listing's page reads none
    )


class DeadLetters(Part):
    """The reads and the redrive mark of ``schema.store.ScheduleStore``'s dead letters."""

    async def list_dead_letters(self, client_id: str, day: date) -> list[DeadLetter]:
        rows = await self._db.rows("list_dead_letters", {"client_id": client_id, "day": day})
        return [dead_letter_of(client_id, row) for row in rows]

    async def page_dead_letters(
        self, client_id: str, day: date, since: datetime, until: datetime, max_rows: int
    ) -> list[DeadLetter]:
        values = {"client_id": client_id, "day": day, "since": since, "until": until, "max_rows": max_rows}
        return [dead_letter_of(client_id, row) for row in await self._db.rows("page_dead_letters", values)]

    async def get_dead_letter(self, client_id: str, failed_at: datetime, schedule_id: UUID) -> DeadLetter | None:
        rows = await self._db.rows("get_dead_letter", dead_letter_key(client_id, failed_at, schedule_id))
        return dead_letter_of(client_id, rows[0]) if rows else None

    def _mark_ttl(self, letter: DeadLetter, at: datetime) -> int:
        """A mark expires with the row it marks (what is left of the dead letter's TTL)."""
        return max(1, self._retention(letter.client_id) - int((at - letter.failed_at).total_seconds()))

    async def mark_redriven(self, letter: DeadLetter, at: datetime, due_at: datetime) -> DeadLetter | None:
        values = {
            **dead_letter_key(letter.client_id, letter.failed_at, letter.schedule_id),
            "fire_id": letter.fire_id,
            "redriven_at": at,
            "redriven_due_at": due_at,
            "ttl": self._mark_ttl(letter, at),
        }
        await self._db.applied("mark_dead_letter_redriven", values)
        return await self.get_dead_letter(letter.client_id, letter.failed_at, letter.schedule_id)

    async def move_redrive(self, letter: DeadLetter, at: datetime, due_at: datetime) -> DeadLetter | None:
        values = {
            **dead_letter_key(letter.client_id, letter.failed_at, letter.schedule_id),
            "fire_id": letter.fire_id,
            "redriven_due_at": due_at,
            "was_due_at": letter.redriven_due_at,
            "ttl": self._mark_ttl(letter, at),
        }
        await self._db.applied("move_dead_letter_redrive", values)
        return await self.get_dead_letter(letter.client_id, letter.failed_at, letter.schedule_id)
