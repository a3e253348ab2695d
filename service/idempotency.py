"""Idempotency-Key on ``POST /v1/schedules``: one key, one request, one schedule.

The first request with a key reserves it (``INSERT ... IF NOT EXISTS``) before it writes anything, with
the schedule id it will write, a digest of the request (method, path, canonical JSON body) and the time
it was built at. A later request with the key is then:

- a different request (another digest): 422 ``idempotency_key_reused``, field ``Idempotency-Key``;
- the same request, its schedule written: 200 with that schedule (``Idempotent-Replayed: true``);
- the same request, its schedule not written yet: it waits up to ``idempotency_wait_s`` for it to
  appear. If the reservation is older than ``idempotency_takeover_s`` (its request timed out or died),
  the retry writes the schedule itself, rebuilt from the body at the reserved id and time, so it is the
  very row the first request would have written (same fire time, same fire id): 201. Otherwise 409
  ``idempotency_key_in_progress`` with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from datetime import datetime

import msgspec

from tickd.schema.model import IdempotencyKey, Schedule
from tickd.schema.store import Store
from tickd.service.errors import HttpError

FIELD = "Idempotency-Key"
_POLL_S = 0.05


class KeyReused(HttpError):
    status = 422


class KeyInProgress(HttpError):
    status = 409


def request_digest(method: str, path: str, body: bytes) -> str:
    """sha256 of the method, the path and the body as canonical JSON (keys sorted, no spaces), so a
    retry that serialises the same body differently is the same request."""
    canonical = msgspec.json.encode(msgspec.json.decode(body), order="sorted")
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical).hexdigest()


def check_same_request(reservation: IdempotencyKey, digest: str) -> None:
    """422 unless the key was reserved by this very request (a key kept from before digests passes)."""
    if reservation.request_digest is not None and reservation.request_digest != digest:
        raise KeyReused(
            "this Idempotency-Key was first used with a different request; use a new key for a new request",
            code="idempotency_key_reused",
            field=FIELD,
        )


def abandoned(reservation: IdempotencyKey, at: datetime, takeover_s: float) -> bool:
    """The reserving request is past the point where its own write could still be in flight."""
    return reservation.created_at is None or (at - reservation.created_at).total_seconds() >= takeover_s


async def written(store: Store, reservation: IdempotencyKey, wait_s: float) -> Schedule | None:
    """The reservation's schedule, waiting up to ``wait_s`` for its write to land; None if it has not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        found = await store.get_schedule(reservation.client_id, reservation.schedule_id)
        if found is not None or loop.time() >= deadline:
            return found
        await asyncio.sleep(min(_POLL_S, max(0.0, deadline - loop.time())))


def in_progress(reservation: IdempotencyKey, at: datetime, takeover_s: float) -> KeyInProgress:
    created = reservation.created_at
    left_s = takeover_s - (at - created).total_seconds() if created is not None else 0.0
    return KeyInProgress(
        "a request with this Idempotency-Key is still being processed; retry after Retry-After seconds",
        code="idempotency_key_in_progress",
        field=FIELD,
        headers={"Retry-After": str(max(1, math.ceil(left_s)))},
    )
