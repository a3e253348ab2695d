"""What a poller node's parts share (``lease``, ``claims``, ``marks``): its settings, the store, its metrics,
its clock and its log, bound to the node id. Passed down once, read by each part as it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from tickd.poller.metrics import Metrics
from tickd.poller.settings import PollerSettings
from tickd.schema.store import Store


@dataclass(frozen=True)
class NodeContext:
    settings: PollerSettings
    store: Store
    metrics: Metrics
    clock: Callable[[], datetime]
    log: FilteringBoundLogger
