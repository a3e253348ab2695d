"""Where a test or the simulation steps into the in-memory store's requests.

Every request the Cassandra adapter would send is one fault point, named by ``op``:

- ``<query>``: one statement, named as in ``schema/cql/queries.cql`` (``bump_ref``, ``read_minute``,
  ``take_token``, ``ping`` ...). A paged read is one request per page.
- ``batch:<query>``: a batch, named by its first statement (``batch:insert_schedule`` for a create or
  a move, ``batch:set_status`` for a cancel, ``batch:record_outcome``, ``batch:mark_hot`` ...).
- ``batch:<query>/partial``: between the partitions of an unlogged batch that spans several (Cassandra
  applies those per partition): raising there leaves the earlier partitions written, the rest not.

A logged batch over several partitions also passes ``batchlog(op)`` (after ``before``): raising
``BatchNotLogged`` there is a batchlog Cassandra could not write (a node down, not yet convicted).
"""

from __future__ import annotations

from typing import Protocol


class StoreFaults(Protocol):
    async def before(self, op: str) -> None:
        """Before a request applies: may await (a slow call), may raise StoreUnavailable (nothing applied)."""

    async def after(self, op: str) -> None:
        """After a request applied: may raise StoreUnavailable (applied, but the caller is told it failed:
        an unknown outcome)."""

    async def batchlog(self, op: str) -> None:
        """Before a logged batch over several partitions applies: may raise ``BatchNotLogged`` (nothing
        applied; the adapter sends the same writes without a batchlog) or StoreUnavailable."""


class NoFaults:
    """Nothing injected."""

    async def before(self, op: str) -> None:
        return None

    async def after(self, op: str) -> None:
        return None

    async def batchlog(self, op: str) -> None:
        return None
