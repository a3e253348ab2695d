"""Micro-benchmark: ways of producing callback records with the node's producer configuration.

Sends 20,000 records of 1 KiB to a fresh topic per mode and prints msgs/s (median of 3 runs):

- send_and_wait:  one record at a time, each ack awaited before the next (linger 0, its best case);
                  bounded to a few seconds per run and reported as a rate.
- send + gather:  enqueue every record with send(), then await all the ack futures.
- explicit batch: fill create_batch() builders and submit them per partition with send_batch().
- deliver x N:    KafkaDispatcher.deliver once per record, all concurrent (how the engine fires), with
                  body encoding, headers, timeouts and the node's batch sender.
- deliver_many:   KafkaDispatcher.deliver_many with the same records.

Not in the table: 20,000 concurrent send_and_wait tasks on the raw producer fail with
KafkaTimeoutError (every sender parked on a full batch wakes at each drain); poller/callbacks/batches.py
sends explicit batches from one task instead.

Usage: python bench/kafka_send.py [--bootstrap 127.0.0.1:9092] [--count 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings, producer_config
from tickd.schema import logs
from tickd.schema.model import KafkaCallback, Location, Schedule

VALUE = b"x" * 1024
SEQUENTIAL_BUDGET_S = 2.0
Mode = Callable[[AIOKafkaProducer, str, int], Awaitable[int]]


async def send_and_wait(producer: AIOKafkaProducer, topic: str, count: int) -> int:
    deadline = time.perf_counter() + SEQUENTIAL_BUDGET_S
    sent = 0
    while sent < count and time.perf_counter() < deadline:
        await producer.send_and_wait(topic, VALUE, key=str(sent).encode())
        sent += 1
    return sent


async def send_then_gather(producer: AIOKafkaProducer, topic: str, count: int) -> int:
    acks = [await producer.send(topic, VALUE, key=str(i).encode()) for i in range(count)]
    await asyncio.gather(*acks)
    return count


async def explicit_batches(producer: AIOKafkaProducer, topic: str, count: int) -> int:
    partitions = sorted(await producer.partitions_for(topic))
    acks, batch, turn = [], producer.create_batch(), 0
    for i in range(count):
        while batch.append(key=str(i).encode(), value=VALUE, timestamp=None) is None:
            acks.append(await producer.send_batch(batch, topic, partition=partitions[turn % len(partitions)]))
            batch, turn = producer.create_batch(), turn + 1
    acks.append(await producer.send_batch(batch, topic, partition=partitions[turn % len(partitions)]))
    await asyncio.gather(*acks)
    return count


def _schedules(topic: str, count: int) -> list[tuple[Schedule, int, datetime]]:
    now = datetime.now(UTC)
    payload = b'"' + b"x" * 800 + b'"'  # ~1 KiB once wrapped in the delivery body
    callback = KafkaCallback(topic=topic)
    return [
        (Schedule("bench", uuid.uuid4(), Location(0, now), now, payload, callback, now), 1, now) for _ in range(count)
    ]


def name_of(many: bool) -> str:
    return DISPATCHER_MODES[1] if many else DISPATCHER_MODES[0]


async def run_dispatcher(settings: KafkaSettings, topic: str, count: int, many: bool) -> float:
    items = _schedules(topic, count)
    async with KafkaDispatcher(settings, RetryPolicy()) as dispatcher:
        await dispatcher.deliver_many(items[:1])  # creates the topic, outside the timing
        started = time.perf_counter()
        if many:
            results = await dispatcher.deliver_many(items)
        else:
            results = await asyncio.gather(*(dispatcher.deliver(*item) for item in items))
        elapsed = time.perf_counter() - started
    failed = sum(not r.ok for r in results)
    if failed:
        sys.stdout.write(f"({name_of(many)}: {failed} of {count} not delivered within the attempt timeout)\n")
    return count / elapsed


async def run_producer(settings: KafkaSettings, mode: Mode, topic: str, count: int) -> float:
    producer = AIOKafkaProducer(**producer_config(settings))
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"warm-up")  # creates the topic, outside the timing
        started = time.perf_counter()
        sent = await mode(producer, topic, count)
        return sent / (time.perf_counter() - started)
    finally:
        await producer.stop()


async def measure(settings: KafkaSettings, name: str, count: int, runs: int) -> float:
    rates = []
    for _ in range(runs):
        topic = f"tickd-bench-{uuid.uuid4().hex[:10]}"
        if name in DISPATCHER_MODES:
            rates.append(await run_dispatcher(settings, topic, count, many=name == "deliver_many"))
        elif name == "send_and_wait":
            rates.append(await run_producer(replace(settings, linger_ms=0), send_and_wait, topic, count))
        else:
            rates.append(await run_producer(settings, MODES[name], topic, count))
    return statistics.median(rates)


DISPATCHER_MODES = ("deliver x N", "deliver_many")
MODES: dict[str, Mode] = {
    "send_and_wait": send_and_wait,
    "send + gather": send_then_gather,
    "explicit batch": explicit_batches,
}


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default=os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    logs.configure({"TICKD_LOG_LEVEL": "WARNING", "TICKD_LOG_FORMAT": "console"})
    logging.getLogger("aiokafka.cluster").setLevel(logging.CRITICAL)  # "topic not found" as each fresh topic is made
    # A long attempt timeout: this measures throughput; the default 5 s would hand the tail of 20,000
    # simultaneous fires back for a durable retry on a loaded machine.
    settings = KafkaSettings(bootstrap=args.bootstrap, attempt_timeout_s=60.0)
    config: dict[str, Any] = producer_config(settings)
    sys.stdout.write(
        f"{args.count} x 1 KiB, median of {args.runs} runs; acks=all idempotent "
        f"compression={config['compression_type']} linger_ms={settings.linger_ms} "
        f"max_batch_size={settings.max_batch_size}\n\n"
        f"| mode | msgs/s | MiB/s |\n|---|---:|---:|\n"
    )
    for name in [*MODES, *DISPATCHER_MODES]:
        rate = await measure(settings, name, args.count, args.runs)
        sys.stdout.write(f"| {name} | {rate:,.0f} | {rate / 1024:,.1f} |\n")
        sys.stdout.flush()
    sys.stdout.write(f"\nsend_and_wait runs for at most {SEQUENTIAL_BUDGET_S:.0f} s each, with linger_ms=0.\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
