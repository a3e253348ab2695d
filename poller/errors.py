"""The ways a poller instance stops: each is raised inside the instance's task group and handled by the
node (``claims.Placement._run_instance``), which hands the instance over so the ring gives it out again."""

from __future__ import annotations

from typing import Protocol

from tickd.schema.errors import TickdError


class Lease(Protocol):
    """Whether the node holds its lease (``Node.lease_held``); with ``since`` (loop time), whether it has
    held it without a lapse since then."""

    def __call__(self, since: float | None = None) -> bool: ...


class InstanceDrained(Exception):
    """Raised inside an instance's task group to end it: its partitions are empty for good."""


class LeaseLost(Exception):
    """The node's lease ran out between taking a fire and sending it: the fire is left to the next owner."""


class InstanceCrashed(Exception):
    """Raised inside an instance's task group when a fire ended without a stored outcome."""


# What still stops the instance when a fire's send or settle raises it: the node lost the instance, or
# storage failed past ``durably``'s retries. Any other error is that fire's own outcome.
STOPS = (LeaseLost, TickdError)
