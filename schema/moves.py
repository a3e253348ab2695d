"""Finishing a poller's move that a crash cut short: the rule both store adapters apply when a poller's
compare-and-set on a schedule's pointer finds a version other than the one it read.

A poller moves a schedule on (a durable retry, a recurring schedule's next occurrence) with two
requests: the pointer's compare-and-set, then the rows. If the process dies between them, whoever
handles the same row next (the same poller retrying, or the instance's next owner) finds the pointer
one version ahead and no row where it points, and must finish the move there rather than drop the
fire or end the timeline.
"""

from __future__ import annotations

from schema.model import Schedule, ScheduleRef


def moved_on_by_poller(current: Schedule, ref: ScheduleRef) -> bool:
    """The pointer is exactly one version past ``current`` and no client changed the schedule since:
    a poller (this call's earlier try, or an owner that crashed) moved it on from this very row."""
    return ref.version == current.version + 1 and ref.changed_version <= current.version
