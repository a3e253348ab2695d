"""A producer whose idempotence state broke (OutOfOrderSequenceNumber after a broker restart) is replaced
once, by the first failing attempt; later failures of the same broken producer change nothing."""

from __future__ import annotations

import asyncio

from aiokafka.errors import OutOfOrderSequenceNumber

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings, classify_kafka_error


class StoppableProducer:
    def __init__(self) -> None:
        self.stopped = 0

    async def stop(self) -> None:
        self.stopped += 1


async def test_a_broken_producer_is_replaced_once() -> None:
    dispatcher = KafkaDispatcher(KafkaSettings(bootstrap="127.0.0.1:1"), RetryPolicy())
    broken, fresh = StoppableProducer(), StoppableProducer()
    dispatcher._producer = broken
    error = OutOfOrderSequenceNumber()
    await asyncio.gather(*(dispatcher._replace_producer(broken, error) for _ in range(5)))
    assert dispatcher._producer is None
    dispatcher._producer = fresh  # what the next attempt would start
    await dispatcher._replace_producer(broken, error)  # a late failure from the old producer
    assert dispatcher._producer is fresh
    await dispatcher.close()
    assert broken.stopped == 1 and fresh.stopped == 1


def test_sequence_errors_stay_retriable() -> None:
    result = classify_kafka_error(OutOfOrderSequenceNumber(), 3)
    assert result.retriable and not result.ok and result.attempts == 3
