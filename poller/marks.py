"""The hot-mark poll: reads the hot marks of the minutes open here and tells the local instances to re-read
the minutes a late write landed in.

A mark keeps only its latest write, so every write that changed it landed after this node's last good
poll: each instance hears of the mark with that poll's time (``since``), and of every poll that ended
(``marks_polled``), which opens its hot-mark gate. A poll the store does not answer tells nothing, and the
next one covers it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tickd.poller.claims import Running
from tickd.poller.context import NodeContext
from tickd.schema import aio
from tickd.schema.model import InstanceKey
from tickd.schema.timing import minute_bucket


class MarkPoll:
    def __init__(self, node: NodeContext, running: dict[InstanceKey, Running]) -> None:
        """``running``: the node's instances by key (read at each poll)."""
        self._s = node.settings
        self._store = node.store
        self._now = node.clock
        self._running = running
        self._polled_at: datetime | None = None  # when the last poll of hot marks began that succeeded

    async def poll(self) -> None:
        if not self._running:
            return
        now = self._now()
        watched = self._watched(now)
        found = await aio.gather(*(self._store.hot_marks(m) for m in watched))
        # A mark keeps only its latest write: every write that changed it landed after our last good poll.
        since, self._polled_at = self._polled_at or now, now
        for marks in found:
            for mark in marks:
                running = self._running.get(mark.instance)
                if running is not None and not running.stopping:
                    running.instance.on_mark(mark, since)
        for running in self._running.values():
            running.instance.marks_polled(now)

    def _watched(self, now: datetime) -> list[datetime]:
        """The current minute, its neighbours while they may still matter, and every minute open here."""
        current = minute_bucket(now)
        watched = [current]
        if (now - current).total_seconds() < self._s.minute_close_s + 1:
            watched.append(current - timedelta(minutes=1))
        if (current + timedelta(minutes=1) - now).total_seconds() < self._s.preload_s + 1:
            watched.append(current + timedelta(minutes=1))
        # And every minute still open anywhere: a node back from a pause (or an outage) holds minutes the
        # clock has left behind, and a poll that skipped their marks would tell them nothing changed. An
        # instance holds at most three minutes open, so a catch-up adds a few reads, not one per minute.
        watched += sorted({m for r in self._running.values() for m in r.instance.held_minutes} - set(watched))
        return watched
