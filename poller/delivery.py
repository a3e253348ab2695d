"""The delivery contract both callback channels share: what a subscriber receives and what the engine
gets back.

A delivery is at-least-once. Every attempt of one nominal fire carries the same fire id (schedule id +
nominal fire time), so a subscriber deduplicates on it; the attempt number changes, the id never does.

Body (JSON, the same bytes over HTTP and Kafka)::

    {"schedule_id": "...", "fire_id": "<uuid>:<epoch ms>", "client_id": "...",
     "fire_at": "2025-01-01T00:00:00.000Z", "fired_at": "...", "attempt": 1, "payload": <verbatim>}

Metadata: HTTP headers ``X-Tickd-Schedule-Id``, ``X-Tickd-Fire-Id``, ``X-Tickd-Attempt``; Kafka record
headers of the same names (bytes values) and the schedule id as the record key.

A backfill's fire of an occurrence (``schema.backfills``) has a fire id of its own,
``<uuid>:<epoch ms>:backfill``, ``"backfill": true`` in the body and ``X-Tickd-Backfill: true``; its
``fire_at`` is the occurrence's nominal time.

An event of a throttled schedule also carries ``ack_token`` (body) and ``X-Tickd-Ack-Token`` (header): what
a Kafka ack of the event must give back (see ``poller.acks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import msgspec

from tickd.schema import aio
from tickd.schema.errors import StoreUnavailable
from tickd.schema.model import HttpCallback, KafkaCallback, Schedule

SCHEDULE_ID_HEADER = "X-Tickd-Schedule-Id"
FIRE_ID_HEADER = "X-Tickd-Fire-Id"
ATTEMPT_HEADER = "X-Tickd-Attempt"
EVENT_ID_HEADER = "X-Tickd-Event-Id"
ACK_TOKEN_HEADER = "X-Tickd-Ack-Token"
BACKFILL_HEADER = "X-Tickd-Backfill"
_RESERVED_PREFIX = "x-tickd-"
# Headers a schedule may not set: they describe the body or the connection, which tickd owns.
_RESERVED_HEADERS = frozenset({"content-type", "content-length", "transfer-encoding", "host", "connection"})
_JSON_NULL = msgspec.Raw(b"null")


class _Body(msgspec.Struct, gc=False, omit_defaults=True):
    schedule_id: str
    fire_id: str
    client_id: str
    fire_at: str
    fired_at: str
    attempt: int
    payload: msgspec.Raw
    # Events of a batch trigger: ``<fire_id>:<index>``, the index and how many the fire produced.
    event_id: str | None = None
    event_index: int | None = None
    events: int | None = None
    # Events of a throttled schedule: the token a Kafka ack of this event must carry.
    ack_token: str | None = None
    # A backfill's fire (``schema.backfills``), not the schedule's own timeline's.
    backfill: bool = False


_encoder = msgspec.json.Encoder()


def rfc3339_ms(moment: datetime) -> str:
    """``2025-01-01T00:00:00.123Z``: UTC, milliseconds (truncated, as the fire id's epoch ms)."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: tickd only handles aware times")
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def encode_body(schedule: Schedule, attempt: int, fired_at: datetime) -> bytes:
    """The JSON body of one delivery attempt; the payload is embedded as stored, never re-parsed."""
    return _encode(schedule, str(schedule.public_id), schedule.fire_id, attempt, fired_at)


def _encode(schedule: Schedule, schedule_id: str, fire_id: str, attempt: int, fired_at: datetime) -> bytes:
    event = schedule.options.event if schedule.options is not None else None
    body = _Body(
        schedule_id=schedule_id,
        fire_id=fire_id,
        client_id=schedule.client_id,
        fire_at=rfc3339_ms(schedule.fire_at),
        fired_at=rfc3339_ms(fired_at),
        attempt=attempt,
        payload=msgspec.Raw(schedule.payload) if schedule.payload else _JSON_NULL,
    )
    if event is not None:
        body.event_id, body.event_index, body.events = f"{fire_id}:{event.index}", event.index, event.count
    body.ack_token = schedule.ack_token
    body.backfill = schedule.options is not None and schedule.options.backfill
    return _encoder.encode(body)


def _is_reserved(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith(_RESERVED_PREFIX) or lowered in _RESERVED_HEADERS


def http_headers(schedule: Schedule, callback: HttpCallback, attempt: int) -> dict[str, str]:
    """The schedule's own headers, then tickd's; a schedule can neither override nor duplicate ours."""
    headers = {name: value for name, value in callback.headers.items() if not _is_reserved(name)}
    headers["Content-Type"] = "application/json"
    headers[SCHEDULE_ID_HEADER] = str(schedule.public_id)
    headers[FIRE_ID_HEADER] = schedule.fire_id
    headers[ATTEMPT_HEADER] = str(attempt)
    headers.update(_described(schedule))
    return headers


def _described(schedule: Schedule) -> list[tuple[str, str]]:
    """The headers only some fires carry: an event's id, a throttled event's ack token, a backfill's mark."""
    extra = []
    event_id = schedule.event_id
    if event_id is not None:
        extra.append((EVENT_ID_HEADER, event_id))
    if schedule.ack_token is not None:
        extra.append((ACK_TOKEN_HEADER, schedule.ack_token))
    if schedule.options is not None and schedule.options.backfill:
        extra.append((BACKFILL_HEADER, "true"))
    return extra


def kafka_headers(schedule: Schedule, attempt: int) -> list[tuple[str, bytes]]:
    headers = [
        (SCHEDULE_ID_HEADER, str(schedule.public_id).encode()),
        (FIRE_ID_HEADER, schedule.fire_id.encode()),
        (ATTEMPT_HEADER, str(attempt).encode()),
    ]
    headers += [(name, value.encode()) for name, value in _described(schedule)]
    return headers


def kafka_key(schedule: Schedule) -> bytes:
    """The record key: all fires of one schedule land on one partition, in order."""
    return str(schedule.public_id).encode()


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def kafka_record(schedule: Schedule, attempt: int, fired_at: datetime) -> KafkaRecord:
    """Key, body and headers of one Kafka delivery attempt, deriving each id once (this runs per fire)."""
    schedule_id, fire_id = str(schedule.public_id), schedule.fire_id
    key = schedule_id.encode()
    headers = [(SCHEDULE_ID_HEADER, key), (FIRE_ID_HEADER, fire_id.encode()), (ATTEMPT_HEADER, str(attempt).encode())]
    headers += [(name, value.encode()) for name, value in _described(schedule)]
    return KafkaRecord(key, _encode(schedule, schedule_id, fire_id, attempt, fired_at), headers)


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """The outcome of delivering one fire, after any in-memory retries.

    ``ok``: delivered. Otherwise ``retriable`` says whether the engine should store a durable retry
    (after ``retry_after_s`` when given) or mark the fire failed and dead-letter it. ``attempts`` counts
    every attempt of this fire so far, including those made before this call. ``maybe_received``: not
    delivered as far as tickd knows, but an attempt may have reached the subscriber (it timed out, or the
    connection broke after the request went out), so a throttled event keeps its token.
    """

    ok: bool
    retriable: bool
    attempts: int
    error: str | None = None
    retry_after_s: float | None = None
    status_code: int | None = None
    maybe_received: bool = False
    # Each attempt this call made, in order: (attempt, seconds after the call's first attempt, its error;
    # None: delivered). Empty from a dispatcher that does not say: one attempt, at the call's start.
    sent: tuple[tuple[int, float, str | None], ...] = ()

    @classmethod
    def delivered(cls, attempts: int, status_code: int | None = None) -> DeliveryResult:
        return cls(ok=True, retriable=False, attempts=attempts, status_code=status_code)

    @classmethod
    def failed(
        cls,
        attempts: int,
        error: str,
        *,
        retriable: bool,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        maybe_received: bool = False,
    ) -> DeliveryResult:
        return cls(False, retriable, attempts, error, retry_after_s, status_code, maybe_received)


class Dispatcher(Protocol):
    """Delivers fires over one channel. ``attempt`` is the 1-based number of the first attempt made
    by this call (a durable retry passes the stored attempt count + 1)."""

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult: ...

    async def close(self) -> None: ...


@runtime_checkable
class BatchDispatcher(Protocol):
    """A dispatcher that sends a group of ``(schedule, attempt, fired_at)`` at once (Kafka: producer
    batches), the results in order."""

    async def deliver_many(self, items: Sequence[tuple[Schedule, int, datetime]]) -> list[DeliveryResult]: ...


class Stamp(Protocol):
    """Adds what a delivery carries beyond the stored row (a throttled event's ack token); raises
    ``StoreUnavailable`` when what it needs cannot be read now."""

    async def __call__(self, schedule: Schedule) -> Schedule: ...


class Guard(Protocol):
    """Why a fire may not be sent now (``poller.grants.TopicGuard``: a Kafka topic no longer granted);
    None when it may."""

    def refusal(self, schedule: Schedule) -> str | None: ...


class CallbackRouter:
    """The engine's one dispatcher: sends each fire to the HTTP or the Kafka dispatcher by its callback,
    stamped by ``stamp`` first when given. A fire ``guard`` refuses is not sent: it fails for good (a
    dead letter with the guard's reason). The node sets the guard (``use_guard``): it holds the clients."""

    def __init__(
        self, http: Dispatcher, kafka: Dispatcher, stamp: Stamp | None = None, guard: Guard | None = None
    ) -> None:
        self.http = http
        self.kafka = kafka
        self._kafka_many = kafka if isinstance(kafka, BatchDispatcher) else None
        self._stamp = stamp
        self._guard = guard

    def use_guard(self, guard: Guard) -> None:
        self._guard = guard

    def _refused(self, schedule: Schedule, attempt: int) -> DeliveryResult | None:
        """The result of a fire the guard refuses: not sent, so ``attempt`` is not counted as made."""
        reason = None if self._guard is None else self._guard.refusal(schedule)
        if reason is None:
            return None
        return DeliveryResult.failed(max(attempt - 1, 0), reason, retriable=False)

    def route(self, schedule: Schedule) -> Dispatcher:
        callback = schedule.callback
        if isinstance(callback, HttpCallback):
            return self.http
        if isinstance(callback, KafkaCallback):
            return self.kafka
        raise TypeError(f"unknown callback type {type(callback).__name__}")

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        if (refused := self._refused(schedule, attempt)) is not None:
            return refused
        if self._stamp is not None:
            try:
                schedule = await self._stamp(schedule)
            except StoreUnavailable as exc:  # not sent: retried like a failed attempt
                return DeliveryResult.failed(attempt, f"not sent: {exc}", retriable=True)
        return await self.route(schedule).deliver(schedule, attempt, fired_at)

    async def deliver_many(self, schedules: Sequence[Schedule], fired_at: datetime) -> list[DeliveryResult]:
        """Deliver a group of fires (one pass of an instance's fire loop), each at its next attempt; the
        results in the order of ``schedules``. Kafka fires go out as producer batches when the Kafka
        dispatcher can (``deliver_many``), the others one by one, concurrently."""
        results: list[DeliveryResult | None] = [None] * len(schedules)
        batched: list[tuple[int, Schedule]] = []
        single: list[tuple[int, Schedule]] = []
        for i, schedule in enumerate(schedules):
            if (refused := self._refused(schedule, schedule.attempts + 1)) is not None:
                results[i] = refused
                continue
            if self._stamp is not None:
                try:
                    schedule = await self._stamp(schedule)
                except StoreUnavailable as exc:
                    results[i] = DeliveryResult.failed(schedule.attempts + 1, f"not sent: {exc}", retriable=True)
                    continue
            many = self._kafka_many is not None and isinstance(schedule.callback, KafkaCallback)
            (batched if many else single).append((i, schedule))
        if batched and self._kafka_many is not None:
            sent = await self._kafka_many.deliver_many([(s, s.attempts + 1, fired_at) for _, s in batched])
            for (i, _), result in zip(batched, sent, strict=True):
                results[i] = result
        if single:
            sent = await aio.gather(*(self.route(s).deliver(s, s.attempts + 1, fired_at) for _, s in single))
            for (i, _), result in zip(single, sent, strict=True):
                results[i] = result
        done = [r for r in results if r is not None]
        assert len(done) == len(schedules)
        return done

    async def close(self) -> None:
        try:
            await self.http.close()
        finally:
            await self.kafka.close()
