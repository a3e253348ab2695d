"""``tickd-dev``: the whole of tickd in one process for trying it out, no Cassandra and no Java.

The API and one poller node share the in-memory store (``schema.memory``, the adapter the simulation
and the unit tiers run on; it passes the same contract suite as the Cassandra one). HTTP callbacks are
delivered as in production; Kafka callbacks only when ``--kafka`` names a broker, and refused at create
time with a message that says so otherwise. An admin token and a first client are made at start and
printed. State lives in this process: everything is gone when it stops, and the banner says so.

Settings: the servers' own ``TICKD_*`` variables (README, Configuration) and ``OTEL_*`` (tracing) apply
here as they do to ``tickd-api`` and ``tickd-poller``, with the options below taking precedence; what
cannot apply to one in-memory process is listed in ``NOT_APPLIED`` and said at start when set. The
poller node's ``/metrics`` and ``/status`` are served on ``TICKD_METRICS_HOST:TICKD_METRICS_PORT``
(default: any free port on 127.0.0.1, so two of these never collide), and the banner and
``/v1/admin/nodes`` give the port it really has.

Not for production: one node, no durability, private callback addresses allowed (a developer's
subscriber is usually on localhost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import structlog
from aiohttp import web

from tickd.poller.callbacks.http import HttpDispatcher
from tickd.poller.callbacks.kafka import KafkaDispatcher
from tickd.poller.delivery import DeliveryResult
from tickd.poller.main import stamped_router
from tickd.poller.metrics import Metrics, status_app
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.schema import eventloop, logs, tracing
from tickd.schema.errors import ConfigError
from tickd.schema.memory import memory_store
from tickd.schema.model import Client, Schedule
from tickd.schema.signing import new_signing_secret
from tickd.service.app import create_app
from tickd.service.auth import new_api_key
from tickd.service.settings import ApiSettings
from tickd.service.validation import CLIENT_ID_PATTERN

log = structlog.get_logger("tickd.dev")
_NO_KAFKA = "this tickd dev runs without Kafka: start it with --kafka HOST:PORT to send Kafka callbacks"
# Settings of the servers that one in-memory process has no use for: there is no Cassandra, one node, no
# ack consumer, and Kafka is on only with --kafka (whose broker replaces TICKD_KAFKA_BOOTSTRAP; the other
# TICKD_KAFKA_* apply). Each one set is named in a warning at start, not silently dropped.
NOT_APPLIED_PREFIXES = ("TICKD_CASSANDRA_",)
NOT_APPLIED = frozenset({"TICKD_KEYSPACE", "TICKD_NODE_ID", "TICKD_KAFKA_BOOTSTRAP", "TICKD_KAFKA_ACK_TOPIC"})


@dataclass(frozen=True)
class DevOptions:
    host: str | None = None  # None: TICKD_API_HOST, else 127.0.0.1
    port: int | None = None  # None: TICKD_API_PORT, else 8080
    kafka: str | None = None
    client_id: str = "dev"
    pollers: int = 2
    admin_token: str | None = None  # None: TICKD_ADMIN_TOKEN, else a random one, printed at start


@dataclass(frozen=True)
class DevStarted:
    """What ``tickd dev`` printed: where the API is and the credentials it made."""

    url: str
    admin_token: str
    client_id: str
    api_key: str
    signing_secret: str  # what the client's callbacks are signed with (webhook-signature)
    poller_url: str = ""  # the node's /metrics and /status


def not_applied(env: Mapping[str, str]) -> list[str]:
    """The variables set in ``env`` that tickd-dev does not use."""
    return sorted(k for k in env if k in NOT_APPLIED or (k.startswith(NOT_APPLIED_PREFIXES) and env[k].strip()))


def settings_of(options: DevOptions, env: Mapping[str, str]) -> tuple[ApiSettings, PollerSettings]:
    """The servers' settings from ``env`` (the same variables, the same checks), the options over them."""
    api = ApiSettings.from_env(env)
    api = replace(
        api,
        host=options.host or api.host,
        port=api.port if options.port is None else options.port,
        admin_token=options.admin_token or api.admin_token or secrets.token_urlsafe(24),
        callback_allow_private=True,
        kafka_enabled=options.kafka is not None,
    )
    poller = PollerSettings.from_env(env)
    metrics_port = poller.metrics_port if "TICKD_METRICS_PORT" in env else 0
    # Statistics every second unless set, so GET /v1/stats and the dashboard follow a developer's first fires.
    stats_flush_s = poller.stats_flush_s if "TICKD_STATS_FLUSH_S" in env else 1.0
    poller = replace(
        poller,
        node_id="dev",
        store=replace(poller.store, keyspace="memory"),
        metrics_port=metrics_port,
        stats_flush_s=stats_flush_s,
        http=replace(poller.http, allow_private=True),
    )
    return api, poller


class NoKafka:
    """The Kafka channel of a dev node started without ``--kafka``. The API refuses Kafka callbacks
    there, so a fire only gets here if it was created some other way: it fails, and says why."""

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        return DeliveryResult.failed(attempt, _NO_KAFKA, retriable=False)

    async def close(self) -> None:
        return None


async def serve(
    options: DevOptions,
    stop: asyncio.Event,
    started: asyncio.Future[DevStarted] | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run the API and a node over one in-memory store until ``stop`` is set."""
    env = os.environ if env is None else env
    api_settings, poller_settings = settings_of(options, env)
    if skipped := not_applied(env):
        log.warning("dev_settings_not_applied", variables=skipped, why="one in-memory process: no Cassandra")
    store = memory_store(lambda: datetime.now(UTC))
    assert api_settings.admin_token is not None
    admin_token = api_settings.admin_token
    api_key, key_hash = new_api_key(options.client_id)
    at = datetime.now(UTC)
    grants = frozenset({"*"}) if options.kafka else frozenset()
    signing_secret = new_signing_secret()
    client = Client(
        options.client_id, options.pollers, True, key_hash, at, at, kafka_topics=grants, signing_secret=signing_secret
    )
    await store.create_client(client)

    http = HttpDispatcher(poller_settings.http, poller_settings.retry)
    await http.start()
    kafka: KafkaDispatcher | NoKafka = NoKafka()
    if options.kafka is not None:
        kafka = KafkaDispatcher(replace(poller_settings.kafka, bootstrap=options.kafka), poller_settings.retry)
        await kafka.start()
    router, _ = stamped_router(store, http, kafka, poller_settings.clients_refresh_s)
    runner = web.AppRunner(create_app(api_settings, store), access_log=None)
    metrics = Metrics()
    nodes: list[Node] = []  # the node, once made: /status answers for it from then on
    poller_runner = web.AppRunner(status_app(metrics, lambda: nodes[0].status() if nodes else {}), access_log=None)
    try:
        await runner.setup()
        await web.TCPSite(runner, api_settings.host, api_settings.port).start()
        port = runner.addresses[0][1] if runner.addresses else api_settings.port
        await poller_runner.setup()
        await web.TCPSite(poller_runner, poller_settings.metrics_host, poller_settings.metrics_port).start()
        # The port the node advertises (its heartbeat, /v1/admin/nodes) is the one it really has.
        poller_settings = replace(poller_settings, metrics_port=poller_runner.addresses[0][1])
        poller_url = f"http://{poller_settings.metrics_host}:{poller_settings.metrics_port}"
        info = DevStarted(
            f"http://{api_settings.host}:{port}", admin_token, options.client_id, api_key, signing_secret, poller_url
        )
        if started is not None:
            started.set_result(info)
        nodes.append(Node(poller_settings, store, router, metrics))
        await nodes[0].run(stop)
    finally:
        await poller_runner.cleanup()
        await runner.cleanup()
        await router.close()


def banner(info: DevStarted, options: DevOptions) -> str:
    kafka = f"Kafka callbacks go to {options.kafka}" if options.kafka else "Kafka callbacks: off (--kafka HOST:PORT)"
    return "\n".join(
        [
            f"tickd dev: API on {info.url}, one poller node, HTTP callbacks; {kafka}.",
            f"Dashboard: {info.url}/ui (sign in with the API key or the admin token).",
            f"Poller node: {info.poller_url}/metrics and {info.poller_url}/status.",
            "State is IN MEMORY: every client and schedule is lost when this process stops.",
            f"  admin token : {info.admin_token}",
            f"  client      : {info.client_id} ({options.pollers} pollers)",
            f"  API key     : {info.api_key}",
            f"  signing key : {info.signing_secret} (verify webhook-signature with tickd_client.webhooks.verify)",
            "Try:",
            f"  curl -s -X POST {info.url}/v1/schedules -H 'Authorization: Bearer {info.api_key}' \\",
            "    -H 'Content-Type: application/json' \\",
            '    -d \'{"delay_s": 2, "payload": {"hello": "world"}, '
            '"callback": {"type": "http", "url": "http://127.0.0.1:9000/hook"}}\'',
            "Stop with Ctrl-C.",
        ]
    )


def parse(argv: Sequence[str] | None = None) -> DevOptions:
    parser = argparse.ArgumentParser(prog="tickd-dev", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", help="address the API listens on (default: TICKD_API_HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="API port, 0: any free port (default: TICKD_API_PORT, else 8080)")
    parser.add_argument("--kafka", metavar="HOST:PORT", help="a Kafka broker for Kafka callbacks")
    parser.add_argument("--client-id", default="dev", help="the first client's id")
    parser.add_argument("--pollers", type=int, default=2, help="the first client's poller count (1-64)")
    parser.add_argument("--admin-token", help="the admin token (default: a random one, printed)")
    args = parser.parse_args(argv)
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error("--port must be 0-65535")
    if not 1 <= args.pollers <= 64:
        parser.error("--pollers must be 1-64")
    if not re.match(CLIENT_ID_PATTERN, args.client_id):
        parser.error("--client-id must be 1-64 of a-z, 0-9, _ and - (as the API requires)")
    return DevOptions(args.host, args.port, args.kafka, args.client_id, args.pollers, args.admin_token)


async def _main(options: DevOptions) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started: asyncio.Future[DevStarted] = loop.create_future()
    task = asyncio.create_task(serve(options, stop, started))
    started.add_done_callback(lambda f: f.cancelled() or print(banner(f.result(), options), flush=True))
    await task


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    logs.configure()
    eventloop.favour_the_loop()  # the API's rule searches run in threads here too
    try:
        settings_of(options, os.environ)  # a bad TICKD_* value stops us here, naming the variable
        tracing.setup("tickd-dev")
        eventloop.run(_main(options), eventloop.loop_factory())
    except ConfigError as exc:
        print(f"tickd-dev: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tickd-dev: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
