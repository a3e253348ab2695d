"""``tickd-poller``: one poller node. Reads settings, wires resources in one exit stack, runs the node
until SIGTERM/SIGINT, then hands its instances over cleanly."""

from __future__ import annotations

import asyncio
import signal
import sys
from contextlib import AsyncExitStack

import structlog
from aiohttp import web

from tickd.poller.acks import AckConsumer, AckSecrets, AckSigner
from tickd.poller.callbacks.http import HttpDispatcher
from tickd.poller.callbacks.kafka import KafkaDispatcher
from tickd.poller.callbacks.kafka_security import check_connection
from tickd.poller.delivery import CallbackRouter, Dispatcher
from tickd.poller.metrics import Metrics, status_app
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.poller.signer import SigningKeys, SigningStamp, Stamps
from tickd.schema import eventloop, logs, tracing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import ConfigError, StoreUnavailable
from tickd.schema.store import Store
from tickd.schema.traced import traced

log = structlog.get_logger("tickd.poller")


def stamped_router(
    store: Store, http: Dispatcher, kafka: Dispatcher, clients_refresh_s: float
) -> tuple[CallbackRouter, AckSecrets]:
    """The router every node delivers through: each delivery signed with its client's webhook secrets
    and, for a throttled event, given its ack token. The ack secrets are returned for the ack consumer."""
    secrets = AckSecrets(store)
    signer = SigningStamp(SigningKeys(store, clients_refresh_s))
    return CallbackRouter(http, kafka, stamp=Stamps(AckSigner(secrets), signer)), secrets


async def serve(settings: PollerSettings, stop: asyncio.Event) -> None:
    async with AsyncExitStack() as stack:
        connected = await CassandraStore.connect(settings.store)
        stack.push_async_callback(connected.close)
        store = traced(connected)
        # Wrong Kafka credentials or certificates stop the node now, saying which; a broker that is down does not.
        await check_connection(settings.kafka.bootstrap, settings.kafka.security, settings.kafka.attempt_timeout_s)
        http = HttpDispatcher(settings.http, settings.retry)
        await http.start()
        kafka = KafkaDispatcher(settings.kafka, settings.retry)
        router, secrets = stamped_router(store, http, kafka, settings.clients_refresh_s)
        stack.push_async_callback(router.close)
        await kafka.start()
        metrics = Metrics()
        metrics.watch_store(connected.request_counts)  # not traced(): it would make the method a coroutine
        node = Node(settings, store, router, metrics)
        services = []
        if settings.ack_topic is not None:
            acks = AckConsumer(
                store,
                settings.kafka.bootstrap,
                settings.ack_topic,
                secrets=secrets,
                metrics=metrics,
                security=settings.kafka.security,
            )
            services.append(acks.run)
        runner = web.AppRunner(status_app(metrics, node.status), access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, settings.metrics_host, settings.metrics_port).start()
        await node.run(stop, services)


async def run(settings: PollerSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def main() -> int:
    logs.configure()
    try:
        settings = PollerSettings.from_env()
        factory = eventloop.loop_factory()
        tracing.setup("tickd-poller")
    except ConfigError as exc:
        print(f"tickd-poller: {exc}", file=sys.stderr)
        return 2
    try:
        eventloop.run(run(settings), factory)
    except ConfigError as exc:  # credentials or certificates refused at start (settings.py checked the rest)
        log.error("node_failed", error=exc.message, variable=exc.field)
        return 2
    except StoreUnavailable as exc:
        log.error("node_failed", error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
