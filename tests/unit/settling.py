"""What the settler's unit tests share: a clock they move by hand, and an outcome writer that writes each
outcome at once (the real one waits for its flush, which is not what those tests are about)."""

from __future__ import annotations

from datetime import datetime

from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import outcome_of
from tickd.schema.model import Schedule, Status
from tickd.schema.store import Store


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


class Direct:
    """The outcome writer, writing each outcome at once."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def record(
        self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime, write_ts: int | None = None
    ) -> None:
        await self._store.record_outcomes([outcome_of(row, status, result, fired_at, write_ts)])
