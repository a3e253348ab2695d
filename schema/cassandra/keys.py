"""Business keys: ``schedule_keys``, one row per (client, key) naming its one live schedule, moved only
with lightweight transactions."""

from __future__ import annotations

from tickd.schema.cassandra.bridge import Part, fields_of, utc
from tickd.schema.model import BusinessKey


class BusinessKeys(Part):
    """The business-key methods of ``schema.store.ScheduleStore`` on Cassandra."""

    async def get_business_key(self, client_id: str, key: str) -> BusinessKey | None:
        rows = await self._db.rows("get_business_key", {"client_id": client_id, "key": key})
        return BusinessKey(client_id, key, rows[0].schedule_id, utc(rows[0].claimed_at)) if rows else None

    async def claim_business_key(self, claim: BusinessKey) -> BusinessKey | None:
        applied, _ = await self._db.applied("claim_business_key", fields_of(claim))
        return claim if applied else await self.get_business_key(claim.client_id, claim.key)

    async def move_business_key(self, seen: BusinessKey, claim: BusinessKey) -> BusinessKey | None:
        values = {**fields_of(claim), "seen_schedule_id": seen.schedule_id}
        applied, _ = await self._db.applied("move_business_key", values)
        return claim if applied else await self.get_business_key(claim.client_id, claim.key)
