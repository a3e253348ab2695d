"""The outcome writer: makes each fire's outcome durable, in one batch per partition per flush.

A fire hands its outcome to ``record`` and waits until it is stored. On ``StoreUnavailable`` a flush
keeps the batch for the next one, so the waiting fires stay in flight and no minute closes over them;
any other storage error propagates out of the flush (stopping the instance's task group, or its drain,
loudly) and the waiting fires stay unrecorded for the next owner. This is the seam where coalesced
outcome writes will go: callers only see ``record``, ``flush`` and ``run``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from structlog.typing import FilteringBoundLogger

from tickd.poller.delivery import DeliveryResult
from tickd.schema import timing
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import FireOutcome, Schedule, Status, Try, add_tries
from tickd.schema.store import Store


def tries_of(row: Schedule, result: DeliveryResult, sent_at: datetime) -> tuple[Try, ...]:
    """The attempts one delivery call made of ``row``'s fire, the first sent at ``sent_at``: the first due
    at the row's due time, an in-memory retry due when it went out (its backoff ended then); the last
    ended as the call did, the others were retried. None if the call made no attempt (not sent)."""
    notes = result.sent or (((result.attempts, 0.0, result.error),) if result.attempts > row.attempts else ())
    final = "delivered" if result.ok else "retry" if result.retriable else "failed"
    tries = []
    for index, (attempt, after_s, error) in enumerate(notes):
        at = timing.truncate_ms(sent_at + timedelta(seconds=after_s))
        due = row.location.due_at if index == 0 else at
        tries.append(Try(attempt, due, at, final if index == len(notes) - 1 else "retry", error))
    return tuple(tries)


def tried(row: Schedule, result: DeliveryResult, sent_at: datetime) -> Schedule:
    """``row`` with the attempts of this call added to those it carries (bounded)."""
    return dataclasses.replace(row, tries=add_tries(row.tries, tries_of(row, result, sent_at)))


def outcome_of(row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime) -> FireOutcome:
    """What storage records of one fire of ``row``."""
    options = row.options
    events, window_ms = options.expansion if options is not None else (0, 0)
    return FireOutcome(
        row.client_id,
        row.schedule_id,
        row.location,
        status,
        result.attempts,
        fired_at,
        result.error,
        nominal_at=row.fire_at if options is not None and options.in_runs else None,
        seq=row.seq,
        event=options.event if options is not None else None,
        events=events,
        window_ms=window_ms,
        run_of=options.retry_of if options is not None else None,
        tries=add_tries(row.tries, tries_of(row, result, fired_at)),
    )


class OutcomeWriter:
    def __init__(self, store: Store, flush_s: float, log: FilteringBoundLogger) -> None:
        self._store = store
        self._flush_s = flush_s
        self._log = log
        # Outcomes waiting for the next batch write, each with the future its fire waits on.
        self._waiting: list[tuple[FireOutcome, asyncio.Future[None]]] = []
        self._queued = asyncio.Event()

    async def record(self, row: Schedule, status: Status, result: DeliveryResult, fired_at: datetime) -> None:
        """Queue the outcome for the next per-partition batch and wait until it is durable."""
        outcome = (outcome_of(row, status, result, fired_at), asyncio.get_running_loop().create_future())
        self._waiting.append(outcome)
        self._queued.set()
        await asyncio.shield(outcome[1])

    async def record_many(self, outcomes: Sequence[tuple[Schedule, Status, DeliveryResult, datetime]]) -> None:
        """``record`` for a group of fires that wait together: queued at once (so one flush writes them
        all), one future for the group."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.extend((outcome_of(*outcome), done) for outcome in outcomes)
        self._queued.set()
        await asyncio.shield(done)

    @property
    def waiting(self) -> int:
        """Outcomes queued and not written yet."""
        return len(self._waiting)

    async def run(self) -> None:
        """Flush ``flush_s`` after the first outcome queued since the last flush (the others queued
        meanwhile go in the same batches), until cancelled; idle, it does not wake up."""
        while True:
            await self._queued.wait()
            await asyncio.sleep(self._flush_s)
            self._queued.clear()
            await self.flush()
            if self._waiting:  # not written (storage unavailable), or queued during the write
                self._queued.set()

    async def flush(self) -> None:
        """Write the waiting outcomes (one batch per partition); on a storage error they wait for the next
        flush, their fires still in flight, so no minute closes over them."""
        if not self._waiting:
            return
        batch, self._waiting = self._waiting, []
        try:
            await self._store.record_outcomes([outcome for outcome, _ in batch])
        except StoreUnavailable as exc:
            self._log.warning("outcomes_not_written", rows=len(batch), error=str(exc))
            self._waiting = batch + self._waiting
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)
