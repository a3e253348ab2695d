"""Coordination of the poller cluster: nodes, claims, checkpoints, hot marks, horizons, skipped minutes.

Also the two signals a new or changed schedule row leaves for the pollers (a hot mark, a raised
horizon), as writes the schedule writes put in their own batches.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from tickd.schema import timing
from tickd.schema.cassandra.bridge import Part, Write, fields_of, utc
from tickd.schema.model import Checkpoint, Claim, HotMark, InstanceKey, Location, NodeInfo, SkippedMinute


def hot_mark(instance: InstanceKey, loc: Location, now: datetime, hot_window_s: float) -> list[Write]:
    """The hot mark a write at ``loc`` needs if a poller may already have loaded its minute."""
    if not timing.is_hot(loc.due_at, now, hot_window_s):
        return []
    # Its own id: another write in the same millisecond would leave the same touched_at (seed 102070).
    values = {"touched_at": now, "write_id": uuid.uuid4(), "minute": loc.minute, **fields_of(instance)}
    return [("mark_hot", values)]


class Horizons:
    """The highest minute this process has written per instance; the horizon write is skipped below it."""

    def __init__(self) -> None:
        self._known: dict[InstanceKey, datetime] = {}

    def raise_to(self, instance: InstanceKey, loc: Location) -> list[Write]:
        """The horizon write a new row at ``loc`` needs, unless this process already wrote a later one."""
        known = self._known.get(instance)
        if known is not None and loc.minute <= known:
            return []
        values = {"stamp": timing.horizon_timestamp(loc.minute), "last_minute": loc.minute, **fields_of(instance)}
        return [("raise_horizon", values)]

    def note(self, instance: InstanceKey, minute: datetime) -> None:
        """Record that the horizon write for ``minute`` landed."""
        known = self._known.get(instance)
        if known is None or minute > known:
            self._known[instance] = minute


def new_row_signals(
    horizons: Horizons, instance: InstanceKey, loc: Location, now: datetime, hot_window_s: float
) -> list[Write]:
    return hot_mark(instance, loc, now, hot_window_s) + horizons.raise_to(instance, loc)


class Coordination(Part):
    """``schema.store.CoordinationStore`` on Cassandra."""

    async def heartbeat(self, node: NodeInfo, ttl_s: int) -> None:
        await self._db.write("heartbeat", {**fields_of(node), "cluster": self.settings.cluster_name, "ttl": ttl_s})

    async def leave(self, node_id: str) -> None:
        await self._db.write("leave_cluster", {"cluster": self.settings.cluster_name, "node_id": node_id})

    async def live_nodes(self) -> list[NodeInfo]:
        rows = await self._db.rows("live_nodes", {"cluster": self.settings.cluster_name})
        return [NodeInfo(r.node_id, r.address, r.metrics_port, utc(r.started_at), utc(r.heartbeat_at)) for r in rows]

    async def get_claim(self, instance: InstanceKey) -> Claim | None:
        rows = await self._db.rows("get_claim", fields_of(instance))
        return Claim(instance, rows[0].owner, rows[0].epoch) if rows else None

    async def list_claims(self) -> list[Claim]:
        rows = await self._db.rows("list_claims", {})
        return [Claim(InstanceKey(r.client_id, r.poller_id), r.owner, r.epoch) for r in rows]

    async def claim(self, instance: InstanceKey, node_id: str, seen: Claim | None, now: datetime) -> Claim | None:
        if seen is None:
            values = {**fields_of(instance), "owner": node_id, "claimed_at": now}
            applied, _ = await self._db.applied("first_claim", values)
            return Claim(instance, node_id, 1) if applied else None
        epoch = seen.epoch + 1
        values = {**fields_of(instance), "owner": node_id, "epoch": epoch, "claimed_at": now, "seen_epoch": seen.epoch}
        applied, _ = await self._db.applied("take_claim", values)
        return Claim(instance, node_id, epoch) if applied else None

    async def release(self, claim: Claim) -> bool:
        values = {**fields_of(claim.instance), "owner": claim.owner, "epoch": claim.epoch}
        applied, _ = await self._db.applied("release_claim", values)
        return applied

    async def get_checkpoint(self, instance: InstanceKey) -> Checkpoint | None:
        rows = await self._db.rows("get_checkpoint", fields_of(instance))
        if not rows or rows[0].minute is None:
            return None
        return Checkpoint(instance, utc(rows[0].minute), rows[0].epoch)

    async def write_checkpoint(self, claim: Claim, minute: datetime) -> None:
        stamp = timing.fenced_timestamp(claim.epoch, minute)
        values = {"stamp": stamp, "minute": minute, "epoch": claim.epoch, **fields_of(claim.instance)}
        await self._db.write("write_checkpoint", values)

    async def hot_marks(self, minute: datetime) -> list[HotMark]:
        rows = await self._db.rows("read_hot_marks", {"minute": minute})
        return [HotMark(minute, InstanceKey(r.client_id, r.poller_id), utc(r.touched_at), r.write_id) for r in rows]

    async def get_horizon(self, instance: InstanceKey) -> datetime | None:
        rows = await self._db.rows("get_horizon", fields_of(instance))
        return utc(rows[0].last_minute) if rows and rows[0].last_minute else None

    async def record_skipped(self, instance: InstanceKey, minute: datetime, reason: str, rows: int) -> None:
        values = {**fields_of(instance), "minute": minute, "reason": reason, "rows": rows}
        await self._db.write("record_skipped", {**values, "ttl": self.settings.retention_s})

    async def skipped_minutes(self, instance: InstanceKey, limit: int) -> list[SkippedMinute]:
        found = await self._db.rows("skipped_minutes", {**fields_of(instance), "max_rows": limit})
        return [SkippedMinute(instance, utc(r.minute), r.reason or "", r.rows or 0) for r in found]
