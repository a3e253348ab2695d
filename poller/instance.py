"""One poller instance running under a claim: the composition of its parts, each with one job.

- ``plan.FiringPlan``: the rows of the open minutes by due time, what is in flight, when a row may fire;
- ``loader.MinuteLoader``: reads each minute ``preload_s`` before it, re-reads hot minutes;
- ``pipeline.FirePipeline``: moves each due row, as a ``fire.Fire``, through its steps (chain, expand,
  throttle, send, settle), with ``fire.Sender`` and ``fire.Settler``;
- ``fire.OutcomeWriter``: writes outcomes in per-partition batches, each fire waiting on its own;
- ``checkpoint.Checkpointer``: resumes from the checkpoint, closes minutes, advances it (fenced by the
  claim's epoch).

Their long-lived loops run in one task group (``run``): an error out of any of them, such as
``InstanceCrashed`` or ``InstanceDrained`` from the checkpointer, stops the instance loudly, and the
node hands it over. Each fire ends with its outcome recorded, durably requeued, or its instance
stopped so the next owner fires it again (see ``poller.pipeline``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from datetime import datetime

import structlog

from tickd.poller.calendars import CalendarBook
from tickd.poller.checkpoint import Checkpointer
from tickd.poller.delivery import CallbackRouter
from tickd.poller.errors import InstanceCrashed, InstanceDrained, Lease, LeaseLost
from tickd.poller.fire import FireContext, OutcomeWriter, Sender, Settler
from tickd.poller.loader import MinuteLoader
from tickd.poller.metrics import Metrics
from tickd.poller.pipeline import FirePipeline
from tickd.poller.plan import FiringPlan, OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.slots import SendSlots
from tickd.poller.stats import TenantStats
from tickd.poller.throttle import ThrottleGate
from tickd.poller.wakes import Waker
from tickd.schema.model import Claim, Client, HotMark
from tickd.schema.store import Store

__all__ = ["InstanceCrashed", "InstanceDrained", "LeaseLost", "OpenMinute", "PollerInstance"]

log = structlog.get_logger("tickd.poller")
Clock = Callable[[], datetime]


class PollerInstance:
    def __init__(
        self,
        claim: Claim,
        client: Client,
        store: Store,
        router: CallbackRouter,
        settings: PollerSettings,
        metrics: Metrics,
        clock: Clock,
        slots: SendSlots,
        gate: ThrottleGate,
        *,
        rng: random.Random | None = None,
        lease: Lease = lambda since=None: True,
        stats: TenantStats | None = None,
        calendars: CalendarBook | None = None,
    ) -> None:
        self.claim = claim
        self.instance = claim.instance
        self.client = client  # the node swaps in the client's latest settings; the parts read it per use
        self._s = settings
        self._log = log.bind(instance=str(self.instance), epoch=claim.epoch, node_id=settings.node_id)
        self._plan = FiringPlan(
            claim.instance.poller_id,
            clock,
            lease,
            see_ahead_s=settings.mutation_guard_s / 2,
            recheck_s=settings.mark_poll_s,
        )
        self._outcomes = OutcomeWriter(store, settings.outcome_flush_s, self._log)
        self._loader = MinuteLoader(claim.instance, store, self._plan, settings, clock, self._log, metrics)
        ctx = FireContext(
            self._current_client, settings, metrics, clock, lease, self._log, rng or random.Random(), stats
        )
        calendars = calendars or CalendarBook(store, settings.clients_refresh_s)
        self._pipeline = FirePipeline(
            ctx,
            self._plan,
            self._loader,
            slots,
            Sender(ctx, router, slots, gate),
            Settler(ctx, store, self._outcomes, calendars),
            Waker(ctx, store, calendars),
        )
        self._checkpoints = Checkpointer(
            claim, self._current_client, store, self._plan, settings, metrics, clock, self._log, self._loader.sweep
        )

    @property
    def drained(self) -> bool:
        """Whether the instance stopped because its partitions are empty for good (a lowered quota)."""
        return self._checkpoints.drained

    @property
    def open_minutes(self) -> int:
        """Minutes loaded and not yet closed."""
        return len(self._plan.open)

    @property
    def held_minutes(self) -> list[datetime]:
        """The minutes loaded and not yet closed (at most three)."""
        return list(self._plan.open)

    @property
    def oldest_open_minute(self) -> datetime | None:
        """The first minute not checkpointed yet, if one is loaded."""
        return min(self._plan.open, default=None)

    def describe(self, now: datetime) -> dict[str, object]:
        """The instance's state for the node's /status: its plan, fires in flight, outcomes unwritten."""
        return {
            "epoch": self.claim.epoch,
            **self._plan.describe(now),
            "in_flight": self._pipeline.inflight_count,
            "outcomes_waiting": self._outcomes.waiting,
        }

    def _current_client(self) -> Client:
        return self.client

    # -- lifecycle ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fire until cancelled (the node cancels the task, then calls ``drain``), or until one of the
        parts raises: every part's long-lived loop runs in this task group."""
        start = await self._checkpoints.resume()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._loader.run(start))
            tg.create_task(self._pipeline.run())
            tg.create_task(self._outcomes.run())
            tg.create_task(self._loader.reread_loop())
            tg.create_task(self._checkpoints.run())

    async def drain(self, deadline_s: float) -> None:
        """After the loops are cancelled: let in-flight callbacks finish, record them, checkpoint.

        Fires still running at the deadline are abandoned unrecorded, so the next owner fires them
        again (same fire id): the only duplicates a handover can cause."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s
        while self._pipeline.in_flight and loop.time() < deadline:
            await self._pipeline.wait(min(self._s.outcome_flush_s, deadline - loop.time()))
            await self._outcomes.flush()
        self._pipeline.abandon()
        await self._outcomes.flush()
        with contextlib.suppress(InstanceDrained):
            await self._checkpoints.close_ready_minutes()

    # -- hot marks ------------------------------------------------------------------------------------

    def on_mark(self, mark: HotMark, since: datetime) -> None:
        """A write landed in ``mark.minute`` inside the look-ahead window: re-read it while the mark is fresh."""
        self._loader.on_mark(mark, since)

    def marks_polled(self, polled_at: datetime) -> None:
        """The node read the hot marks, in a poll that began at ``polled_at``."""
        self._plan.marks_polled(polled_at)
