"""Kafka callbacks: one idempotent, compressing aiokafka producer per node.

``deliver`` enqueues a record and awaits its ack; concurrent deliveries share the producer's batches
(``linger_ms``), so throughput comes from concurrency, not from sending one record at a time.
``deliver_many`` (a fire pass's records) queues them with the node's batch sender, which packs every
pass's records into explicit producer batches per topic partition, and awaits their acks.

A broker outage (connection refused, timeouts, leader elections) is retried in memory within the
policy's inline budget and then handed back retriable, however many attempts it took: an outage is
tickd's problem, not the subscriber's, so it never ends in FAILED. Only errors a retry cannot fix (a
record too large, an invalid or forbidden topic) fail at once. An attempt that times out may still be
delivered later, so a retry can duplicate a record: subscribers deduplicate on the fire id. Each
attempt's record is signed when it is built (``poller.signing``: ``webhook-*`` record headers).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

import structlog
from aiokafka import AIOKafkaProducer
from aiokafka.codec import has_lz4
from aiokafka.errors import (
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    RecordListTooLargeError,
    RecordTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
)
from opentelemetry.trace import SpanKind

from tickd.poller import signing
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.batches import BatchSender, Pass
from tickd.poller.callbacks.kafka_security import KafkaSecurity, client_config
from tickd.poller.callbacks.retry import Retrier, fire_logger
from tickd.poller.delivery import DeliveryResult, KafkaRecord, kafka_record
from tickd.schema import tracing
from tickd.schema.errors import ConfigError
from tickd.schema.model import KafkaCallback, Schedule
from tickd.schema.settings import env_float, env_int, env_str

logger: structlog.typing.FilteringBoundLogger = structlog.get_logger("tickd.callbacks")

PERMANENT_ERRORS: tuple[type[Exception], ...] = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    InvalidTopicError,
    TopicAuthorizationFailedError,
)
# The idempotent producer's sequence state no longer matches the broker's (seen after a broker restart
# with lost producer state): that producer instance stays broken, so it is replaced by a new one.
PRODUCER_STATE_ERRORS: tuple[type[Exception], ...] = (
    OutOfOrderSequenceNumber,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    ProducerFenced,
)
_COMPRESSIONS = frozenset({"auto", "lz4", "gzip", "zstd", "snappy", "none"})
Item = tuple[Schedule, int, datetime]


@dataclass(frozen=True)
class KafkaSettings:
    """The node's callback producer. ``compression="auto"``: lz4 when its codec is installed, else gzip."""

    bootstrap: str = "127.0.0.1:9092"
    client_id: str = "tickd-poller"
    compression: str = "auto"
    linger_ms: int = 10
    max_batch_size: int = 256 * 1024
    max_request_size: int = 1024 * 1024
    request_timeout_ms: int = 15_000
    # Bound on one attempt (connect, metadata, enqueue, ack) as this dispatcher sees it.
    attempt_timeout_s: float = 5.0
    # After a failed producer start, attempts fail fast for this long instead of each dialling again.
    restart_cooldown_s: float = 1.0
    # A broker outage is retried in memory (the fire stays in flight) for up to ``outage_budget_s``, with
    # waits of at most ``outage_retry_cap_s`` between attempts, so fires go out within seconds of the
    # broker's return instead of each sitting out its own exponential backoff.
    outage_retry_cap_s: float = 2.0
    outage_budget_s: float = 30.0
    # Records one client may have in the node's producer at once (waiting for their acks): its share of
    # the producer, so one tenant's burst or its records stuck on a slow topic never fill it for all.
    per_client_limit: int = 1024
    # TLS and SASL, for the producer and the ack consumer alike (PLAINTEXT by default).
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def __post_init__(self) -> None:
        if self.compression not in _COMPRESSIONS:
            raise ConfigError(f"compression must be one of {sorted(_COMPRESSIONS)}", field="compression")
        if self.per_client_limit < 1:
            raise ConfigError("per_client_limit must be >= 1", field="per_client_limit")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSettings:
        env = os.environ if env is None else env
        return cls(
            bootstrap=env_str(env, "TICKD_KAFKA_BOOTSTRAP", cls.bootstrap),
            client_id=env_str(env, "TICKD_KAFKA_CLIENT_ID", cls.client_id),
            compression=env_str(env, "TICKD_KAFKA_COMPRESSION", cls.compression).lower(),
            linger_ms=env_int(env, "TICKD_KAFKA_LINGER_MS", cls.linger_ms, low=0, high=1000),
            max_batch_size=env_int(env, "TICKD_KAFKA_MAX_BATCH_BYTES", cls.max_batch_size, low=1024, high=16 << 20),
            request_timeout_ms=env_int(
                env, "TICKD_KAFKA_REQUEST_TIMEOUT_MS", cls.request_timeout_ms, low=100, high=300_000
            ),
            attempt_timeout_s=env_float(env, "TICKD_KAFKA_ATTEMPT_TIMEOUT_S", cls.attempt_timeout_s, low=0.1, high=300),
            outage_retry_cap_s=env_float(
                env, "TICKD_KAFKA_OUTAGE_RETRY_CAP_S", cls.outage_retry_cap_s, low=0.01, high=600
            ),
            outage_budget_s=env_float(env, "TICKD_KAFKA_OUTAGE_BUDGET_S", cls.outage_budget_s, low=0.0, high=3600),
            per_client_limit=env_int(env, "TICKD_KAFKA_PER_CLIENT_LIMIT", cls.per_client_limit, low=1, high=1_000_000),
            security=KafkaSecurity.from_env(env),
        )

    def retry_policy(self, policy: RetryPolicy) -> RetryPolicy:
        """The node's retry policy as Kafka fires use it: short waits, a longer in-memory budget."""
        cap = self.outage_retry_cap_s
        return dataclasses.replace(
            policy, base_s=min(policy.base_s, cap), cap_s=cap, inline_budget_s=self.outage_budget_s
        )


def compression_type(setting: str) -> str | None:
    if setting == "auto":
        return "lz4" if has_lz4() else "gzip"
    return None if setting == "none" else setting


def key_partitioner(key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
    """The partition for a record: crc32 of the key, so each schedule's fires keep one partition.

    Not Java's murmur2: aiokafka's murmur2 is pure Python (~50 µs a record, the largest per-fire cost
    measured) and no tickd consumer depends on which partition a key lands on, only that it is stable.
    """
    if key is None:
        return random.choice(list(available) or list(all_partitions))
    ordered = sorted(all_partitions)
    return ordered[zlib.crc32(key) % len(ordered)]


def producer_config(settings: KafkaSettings) -> dict[str, Any]:
    """AIOKafkaProducer arguments: durable (acks=all, idempotent) and batched (linger, large batches)."""
    return {
        "bootstrap_servers": settings.bootstrap,
        "client_id": settings.client_id,
        "acks": "all",
        "enable_idempotence": True,
        "compression_type": compression_type(settings.compression),
        "linger_ms": settings.linger_ms,
        "max_batch_size": settings.max_batch_size,
        "max_request_size": settings.max_request_size,
        "request_timeout_ms": settings.request_timeout_ms,
        "partitioner": key_partitioner,
        **client_config(settings.security),
    }


def classify_kafka_error(exc: BaseException, attempt: int) -> DeliveryResult:
    retriable = not isinstance(exc, PERMANENT_ERRORS)
    reason = "timeout" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
    # A produce that timed out may still have been written to the partition (and read by a consumer).
    maybe = isinstance(exc, TimeoutError | KafkaTimeoutError | RequestTimedOutError)
    return DeliveryResult.failed(attempt, reason, retriable=retriable, maybe_received=maybe)


def signed_record(schedule: Schedule, attempt: int, fired_at: datetime) -> KafkaRecord:
    """The record of one attempt with the Standard Webhooks headers of its value (``poller.signing``)."""
    record = kafka_record(schedule, attempt, fired_at)
    signed = signing.signed_headers(schedule, int(time.time()), record.value)
    if not signed:
        return record
    return KafkaRecord(record.key, record.value, [*record.headers, *((k, v.encode()) for k, v in signed.items())])


def _traced(record: KafkaRecord) -> KafkaRecord:
    """The record with the current span's ``traceparent`` header when tracing is on."""
    traceparent = tracing.current_traceparent() if tracing.on() else None
    if traceparent is None:
        return record
    return KafkaRecord(record.key, record.value, [*record.headers, (tracing.TRACEPARENT, traceparent.encode())])


def _topic(schedule: Schedule) -> str:
    callback = schedule.callback
    if not isinstance(callback, KafkaCallback):
        raise TypeError(f"KafkaDispatcher cannot deliver a {type(callback).__name__}")
    return callback.topic


class KafkaDispatcher:
    """Delivers fires as Kafka records; one per node. The producer starts on first use (or ``start()``),
    so a node comes up while Kafka is down and its fires are retried, not lost."""

    def __init__(self, settings: KafkaSettings, policy: RetryPolicy, *, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._retrier = Retrier(settings.retry_policy(policy), give_up=False, rng=rng)
        self._producer: Any = None
        self._lock = asyncio.Lock()
        self._batches = BatchSender()
        self._closed = False
        self._start_failed_at = -float("inf")
        self._start_error: BaseException | None = None
        self._stopping: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Start the producer now; a failure is logged, not raised (deliveries retry it)."""
        try:
            await self._ready_producer()
        except (KafkaError, OSError, TimeoutError) as exc:
            logger.warning("kafka_producer_unavailable", error=str(exc), bootstrap=self.settings.bootstrap)

    async def close(self) -> None:
        """Flush what is queued and close; safe to call twice."""
        self._closed = True
        await self._batches.close()
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
        await asyncio.gather(*self._stopping, return_exceptions=True)

    async def __aenter__(self) -> KafkaDispatcher:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        return await self._retry((schedule, attempt, fired_at), None, None)

    async def deliver_many(self, items: Sequence[Item]) -> list[DeliveryResult]:
        """Deliver ``(schedule, attempt, fired_at)`` items: enqueue all, await all acks, then retry the
        failures individually within the inline budget. Results are in the order of ``items``."""
        started = time.monotonic()
        results = await self._first_pass(items)
        failed = [i for i, result in enumerate(results) if not result.ok]
        retried = await asyncio.gather(*(self._retry(items[i], results[i], started) for i in failed))
        for i, result in zip(failed, retried, strict=True):
            results[i] = result
        return results

    async def _retry(self, item: Item, first: DeliveryResult | None, started: float | None) -> DeliveryResult:
        schedule, attempt, fired_at = item

        async def attempt_once(n: int) -> DeliveryResult:
            return await self._attempt(schedule, n, fired_at)

        log = fire_logger(schedule, "kafka")
        with tracing.deliver_span(schedule):
            return await self._retrier.run(attempt_once, attempt, log, first=first, started_at=started)

    async def _attempt(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        """One attempt of one record, through the node's batch sender like a pass's records (a record
        sent on its own, beside explicit batches, waited a broker round trip per record: after a stall
        thousands of retries queued that way held every fire slot for the 30 s outage budget)."""
        with tracing.span("callback.kafka", SpanKind.PRODUCER):
            (result,) = await self._first_pass([(schedule, attempt, fired_at)], traced=True)
            return result

    async def _replace_producer(self, broken: Any, exc: BaseException) -> None:
        """Drop a producer whose idempotence state is broken; the next attempt starts a fresh one.
        Only the first of many failing attempts on the same producer replaces it."""
        async with self._lock:
            if broken is None or self._producer is not broken:
                return
            self._producer = None
        logger.warning("kafka_producer_replaced", error=f"{type(exc).__name__}: {exc}")
        task = asyncio.create_task(broken.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _first_pass(self, items: Sequence[Item], *, traced: bool = False) -> list[DeliveryResult]:
        """One attempt for every item: each record queued for its topic partition with the node's batch
        sender (``poller.callbacks.batches``), which packs the records of every pass into explicit
        producer batches; then the pass waits for its records' acks. A record fails as its batch does.
        ``traced``: the records carry the current span's ``traceparent`` (one attempt's span)."""
        try:
            async with asyncio.timeout(self.settings.attempt_timeout_s):
                producer = await self._ready_producer()
                partitions = await self._partitions(producer, {_topic(item[0]) for item in items})
        except (KafkaError, OSError, TimeoutError) as exc:
            return [classify_kafka_error(exc, attempt) for _, attempt, _ in items]
        results: list[DeliveryResult | None] = [None] * len(items)
        owner = Pass(len(items))
        limit = self.settings.max_request_size
        for i, (schedule, attempt, fired_at) in enumerate(items):
            topic = _topic(schedule)
            known = partitions[topic]
            if isinstance(known, BaseException):
                results[i] = classify_kafka_error(known, attempt)
                continue
            record = signed_record(schedule, attempt, fired_at)
            if traced:
                record = _traced(record)
            size = len(record.key) + len(record.value) + sum(len(k) + len(v) for k, v in record.headers)
            if size > limit:
                too_large = MessageSizeTooLargeError(f"the record is {size} bytes, above max_request_size {limit}")
                results[i] = classify_kafka_error(too_large, attempt)
                continue
            self._batches.queue(producer, topic, known[zlib.crc32(record.key) % len(known)], owner, i, record)
        if owner.open:
            try:
                async with asyncio.timeout(self.settings.attempt_timeout_s):
                    await asyncio.shield(owner.done)
            except TimeoutError:
                pass  # records without an ack by now are timeouts, below
            owner.abandoned = True
        for i, result in enumerate(results):
            if result is not None:
                continue
            outcome = owner.outcome(i)
            if isinstance(outcome, PRODUCER_STATE_ERRORS):
                await self._replace_producer(producer, outcome)
            attempt = items[i][1]
            results[i] = (
                DeliveryResult.delivered(attempt) if outcome is None else classify_kafka_error(outcome, attempt)
            )
        done = [r for r in results if r is not None]
        assert len(done) == len(items)
        return done

    @staticmethod
    async def _partitions(producer: Any, topics: set[str]) -> dict[str, list[int] | BaseException]:
        """Each topic's partitions in order (as ``key_partitioner`` picks among them), or the error that
        keeps its metadata from being had. Known metadata answers at once; one topic at a time."""
        found: dict[str, list[int] | BaseException] = {}
        for topic in sorted(topics):
            try:
                found[topic] = sorted(await producer.partitions_for(topic))
            except (KafkaError, OSError) as exc:
                found[topic] = exc
        return found

    async def _ready_producer(self) -> Any:
        if self._producer is not None:
            return self._producer
        if self._closed:
            raise KafkaConnectionError("callback dispatcher closed")  # retriable: the next owner delivers it
        async with self._lock:
            if self._producer is None:
                self._producer = await self._start_producer()
            return self._producer

    async def _start_producer(self) -> Any:
        if time.monotonic() - self._start_failed_at < self.settings.restart_cooldown_s:
            raise KafkaConnectionError(f"producer unavailable: {self._start_error}")
        producer = AIOKafkaProducer(**producer_config(self.settings))
        try:
            await producer.start()
        except BaseException as exc:
            self._start_failed_at, self._start_error = time.monotonic(), exc
            await producer.stop()
            raise
        logger.info(
            "kafka_producer_started",
            bootstrap=self.settings.bootstrap,
            compression=producer_config(self.settings)["compression_type"],
        )
        return producer
