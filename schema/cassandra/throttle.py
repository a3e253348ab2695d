"""Throttle policies and the tokens (slots) their events hold."""

from __future__ import annotations

from tickd.schema.cassandra.bridge import Part, Row, fields_of, utc
from tickd.schema.model import ThrottlePolicy, Token


class Throttle(Part):
    """The throttle part of ``schema.store.ScheduleStore`` on Cassandra."""

    async def put_policy(self, policy: ThrottlePolicy) -> None:
        await self._db.write("put_policy", fields_of(policy))

    async def get_policy(self, client_id: str, name: str) -> ThrottlePolicy | None:
        rows = await self._db.rows("get_policy", {"client_id": client_id, "name": name})
        return _policy(client_id, rows[0]) if rows else None

    async def list_policies(self, client_id: str) -> list[ThrottlePolicy]:
        rows = await self._db.rows("list_policies", {"client_id": client_id})
        return [_policy(client_id, r) for r in rows]

    async def delete_policy(self, client_id: str, name: str) -> None:
        await self._db.write("delete_policy", {"client_id": client_id, "name": name})

    async def tokens(self, client_id: str, policy: str) -> list[Token]:
        rows = await self._db.rows("read_tokens", {"client_id": client_id, "policy": policy})
        return [Token(client_id, policy, r.slot, r.event_id, r.holder, utc(r.taken_at)) for r in rows]

    async def take_token(self, token: Token, ttl_s: int) -> bool:
        """Take ``token.slot`` if nobody holds it (a compare-and-set: two takers never both win)."""
        applied, _ = await self._db.applied("take_token", {**fields_of(token), "ttl": ttl_s})
        return applied

    async def release_token(self, client_id: str, policy: str, slot: int, event_id: str) -> bool:
        """Free the slot if ``event_id`` still holds it; False if it was already released (or expired)."""
        values = {"client_id": client_id, "policy": policy, "slot": slot, "event_id": event_id}
        applied, _ = await self._db.applied("release_token", values)
        return applied


def _policy(client_id: str, row: Row) -> ThrottlePolicy:
    return ThrottlePolicy(
        client_id, row.name, row.max_in_flight, row.release_timeout_s, utc(row.created_at), utc(row.updated_at)
    )
