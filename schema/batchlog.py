"""The writes of a logged batch that Cassandra could not log, sent again in an order that is safe
however far it gets.

A logged batch applies whole or not at all, but only once its batchlog is written to two other nodes of
the data centre. On a three-node cluster those are every other node: one that crashed and is not yet
convicted (10 s to over a minute) makes every logged batch time out with write type ``BATCH_LOG`` and
nothing applied (``errors.BatchNotLogged``). The same writes then go unlogged, phase after phase, each
phase sent only after the one before it was acknowledged:

1. the pointer, the signals and tag entries (``insert_ref``, ``mark_hot``, ``raise_horizon``,
   ``insert_tag``): alone they change nothing a client or a poller acts on (a pointer without its row
   reads as not found; a hot mark only makes a poller read a minute again; a tag entry is checked
   against the schedule it names);
2. the rows (a create's, a move's new row): from here the schedule can fire, and reads find it;
3. the fences (abandoned changes' targets marked moved);
4. last, the status write that retires or changes the row a change starts from (the old row of a move,
   the cancelled or paused row), once its successor and every fence are in place.

Cut short (answered 503), a create leaves at most a pointer without its row, and a client's change at
most its new row beside the old one, never a retired row without its successor: states a retry, or the
client's next change, finishes (``schema.changes``). A poller's own move (a durable retry) is not sent
in parts: two live rows of one fire would be sent twice by the next owner, so it fails whole and the
poller tries again. The batchlog the failed batch did write, if any, replays the same
writes at their original timestamps, which lose to anything written since."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import structlog

from tickd.schema import aio

log = structlog.get_logger(__name__)

SIGNALS = frozenset({"insert_ref", "mark_hot", "raise_horizon", "insert_tag"})
ROWS = frozenset({"insert_schedule", "insert_retry", "insert_event"})
STATUSES = frozenset({"set_status", "set_status_version"})


def phases(names: Sequence[str]) -> list[list[int]]:
    """The positions of a logged batch's writes (named by their statements) in the phases to send them
    in, without a batchlog: signals, rows, fences, then the first status write in ``names`` (a change's
    own; the adapters list it before its fences). Empty phases are left out."""
    unknown = sorted(set(names) - SIGNALS - ROWS - STATUSES)
    if unknown:
        raise ValueError(f"no batchlog-free order for {unknown}")
    own = next((i for i, name in enumerate(names) if name in STATUSES), None)
    signals = [i for i, name in enumerate(names) if name in SIGNALS]
    rows = [i for i, name in enumerate(names) if name in ROWS]
    fences = [i for i, name in enumerate(names) if name in STATUSES and i != own]
    return [phase for phase in (signals, rows, fences, [own] if own is not None else []) if phase]


W = TypeVar("W")


async def send_in_phases(writes: Sequence[W], names: Sequence[str], send: Callable[..., Awaitable[None]]) -> None:
    """Send ``writes`` (named ``names``) unlogged with ``send`` (an adapter's ``batch(writes, logged=)``),
    phase after phase (``phases``): within a phase each row
    on its own (one partition: never over a batch size limit), the rest as one batch, all at once."""
    for phase in phases(names):
        rows = [writes[i] for i in phase if names[i] in ROWS]
        others = [writes[i] for i in phase if names[i] not in ROWS]
        sends = [send([row], logged=False) for row in rows]
        if others:
            sends.append(send(others, logged=False))
        await aio.gather(*sends)


class Fallbacks:
    """Logs the batches sent without a batchlog: the first at once, then at most one line per
    ``every_s`` with how many since (while a node is down every create and change of a process falls
    back, and one line each would flood the log)."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self.total = 0
        self._since = 0
        self._logged_at = -float("inf")

    def note(self, error: str) -> None:
        self.total += 1
        self._since += 1
        now = time.monotonic()
        if now - self._logged_at >= self.every_s:
            log.warning(
                "store.batchlog_unavailable",
                sent_unlogged=self._since,
                total=self.total,
                error=error,
                hint="a Cassandra node is down and not yet convicted; writes go in safe order without a batchlog",
            )
            self._since, self._logged_at = 0, now
