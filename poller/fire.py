"""A fire: one due row taken off the firing plan, carried as one object through the pipeline's fixed steps
(``poller.pipeline``), and the context each step reads.

The steps fill a fire in: the pipeline takes it (its row, its open minute) and guards its writes with the
lease it fires under; the sender (``poller.send``) gives it its throttle token, its send time and
lateness, and the result of its delivery; the settler (``poller.settle``) ends it in one of three ways
(outcome recorded, retry stored, dead letter) and marks it ``settled``. A fire whose steps raise stays
unsettled: its minute is poisoned in the plan and the next owner fires it again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from tickd.poller import stats
from tickd.poller.delivery import DeliveryResult
from tickd.poller.errors import Lease, LeaseLost
from tickd.poller.metrics import Metrics
from tickd.poller.plan import OpenMinute
from tickd.poller.settings import PollerSettings
from tickd.poller.stats import TenantStats
from tickd.schema.model import Client, Schedule, Token, callback_type

Clock = Callable[[], datetime]


@dataclass(eq=False, slots=True)
class Fire:
    """One due row on its way from the plan to its recorded outcome."""

    row: Schedule
    minute: OpenMinute  # the plan's open minute it was taken from: ended there, settled or not
    guard: Callable[[], None] | None = None  # the lease check before each of its store requests
    token: Token | None = None  # its throttle policy's token, once granted
    fired_at: datetime | None = None  # when it went out
    lateness_s: float | None = None  # a first attempt's lateness when it went out
    result: DeliveryResult | None = None  # how its delivery ended
    settled: bool = False  # its end is durable: outcome recorded, retry stored, or dead letter written

    @property
    def key(self) -> str:
        """What it is delivered as: an event's own id, else the fire id."""
        return self.row.event_id or self.row.fire_id

    def went_out(self, fired_at: datetime) -> None:
        """It is sent now. A first attempt's lateness is sent minus due: the row's due time, after jitter,
        window spread or redrive, not the nominal time (statistics count first attempts only)."""
        self.fired_at = fired_at
        if self.row.attempts == 0:
            self.lateness_s = max(0.0, (fired_at - self.row.location.due_at).total_seconds())

    @property
    def delivery(self) -> DeliveryResult:
        """The result of its delivery (only once it has one)."""
        assert self.result is not None
        return self.result

    @property
    def sent_at(self) -> datetime:
        assert self.fired_at is not None
        return self.fired_at


@dataclass(frozen=True)
class FireContext:
    """What every step of an instance's fires reads: its client (read at each use: the node swaps in the
    client's latest settings), the settings, metrics, clock, the node's lease, log, rng and statistics."""

    client: Callable[[], Client]
    settings: PollerSettings
    metrics: Metrics
    clock: Clock
    lease: Lease
    log: FilteringBoundLogger
    rng: random.Random
    stats: TenantStats | None = None  # the node's per-tenant statistics (GET /v1/stats); None: not counted

    def lease_guard(self) -> Callable[[], None]:
        """The check before each store request of a fire (``schema.guard``): none once the node's lease
        is gone, nor once it has lapsed since the fire began, even if renewed since (the instance may be
        another node's by then, its fire delivered)."""
        began = asyncio.get_running_loop().time()
        lease = self.lease

        def check() -> None:
            if not lease(began):
                raise LeaseLost("the node's lease ran out in the middle of a fire's writes; left to the next owner")

        return check

    def observe_lateness(self, fire: Fire) -> None:
        if fire.lateness_s is not None:
            self.metrics.lateness.labels(fire.row.client_id).observe(fire.lateness_s)

    def count_attempt(self, fire: Fire) -> None:
        """The fire's attempt in the callbacks metric."""
        row = fire.row
        self.metrics.callbacks.labels(row.client_id, callback_type(row.callback), _outcome(fire.delivery)).inc()

    def count_in_stats(self, fire: Fire) -> None:
        """The fire's attempt in the tenant's statistics, once it has settled."""
        if self.stats is not None:
            result = fire.delivery
            outcome = stats.DELIVERED if result.ok else stats.RETRIED if result.retriable else stats.FAILED
            self.stats.attempt(fire.row.client_id, fire.sent_at, outcome, fire.lateness_s)


def _outcome(result: DeliveryResult) -> str:
    if result.ok:
        return "succeeded"
    return "retry" if result.retriable else "failed"
