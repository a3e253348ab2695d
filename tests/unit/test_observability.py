"""Observability: every metric the alert rules and the dashboard (deploy/observability) query is one the
API or a poller node really exports, and the node's own gauges and counters follow the node."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from tests.waiting import CountedOps, until
from tickd.poller.delivery import DeliveryResult
from tickd.poller.fire import durably
from tickd.poller.metrics import Metrics
from tickd.poller.node import Node
from tickd.poller.settings import PollerSettings
from tickd.poller.throttle import ThrottleGate
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import MemoryConnection, Tables, memory_store
from tickd.schema.model import Client, NodeInfo, Schedule, ThrottlePolicy
from tickd.schema.settings import StoreSettings
from tickd.service import keys
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

OBSERVABILITY = Path(__file__).resolve().parents[2] / "deploy" / "observability"
# Metric names in PromQL: ours, and the process collector's (on Linux only: it reads /proc).
METRIC_NAME = re.compile(r"\b(?:tickd|process)_[a-z_]+\b")
# The series names prometheus_client writes for one family of each type.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((OBSERVABILITY / "tickd-dashboard.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def used_names(exprs: list[str]) -> set[str]:
    names = {name for expr in exprs for name in METRIC_NAME.findall(expr)}
    return names if sys.platform == "linux" else {n for n in names if not n.startswith("process_")}


def exported(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry can write, labelled families included before any label is used."""
    return {family.name + suffix for family in registry.collect() for suffix in SUFFIXES.get(family.type, ("",))}


def all_exported() -> set[str]:
    store = memory_store(lambda: datetime.now(UTC))
    app = create_app(ApiSettings(admin_token="observability-test-token"), store)
    return exported(app[keys.METRICS].registry) | exported(Metrics().registry)


def test_alert_rules_are_complete() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {
        "TickdNodeFenced",
        "TickdCheckpointLagHigh",
        "TickdLatenessP99High",
        "TickdDeadLettersRising",
        "TickdApi5xxRate",
    }
    for rule in rules:
        assert rule["expr"].strip() and rule["for"] and rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_queried_metric_is_exported(source: str) -> None:
    exprs = [r["expr"] for r in alert_rules()] if source == "alerts" else dashboard_exprs()
    names = used_names(exprs)
    assert names, f"no metric found in the {source}"
    assert names - all_exported() == set()


def test_dashboard_panels_have_unique_ids_and_targets() -> None:
    dashboard = json.loads((OBSERVABILITY / "tickd-dashboard.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(panel.get("targets") for panel in dashboard["panels"] if panel["type"] != "row")


async def test_api_5xx_is_counted_by_status() -> None:
    store = memory_store(lambda: datetime.now(UTC))

    async def down() -> None:
        raise StoreUnavailable("down for the test")

    store.ping = down  # type: ignore[method-assign]
    async with TestClient(TestServer(create_app(ApiSettings(admin_token="observability-test-token"), store))) as api:
        assert (await api.get("/readyz")).status == 503
        admin = {"Authorization": "Bearer observability-test-token"}  # /metrics needs it (TICKD_METRICS_AUTH)
        text = await (await api.get("/metrics", headers=admin)).text()
    assert 'tickd_api_requests_total{method="GET",route="/readyz",status="503"} 1.0' in text
    assert "process_cpu_seconds_total" in text or sys.platform != "linux"
    assert "python_info" in text


# -- the node's gauges and counters ---------------------------------------------------------------


class NoDelivery:
    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        return DeliveryResult.delivered(attempt)

    async def close(self) -> None:
        return None


def value(metrics: Metrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


@pytest.fixture
def node_settings() -> PollerSettings:
    return PollerSettings(
        node_id="n1",
        metrics_port=0,
        store=StoreSettings(keyspace="memory"),
        heartbeat_interval_s=0.05,
        node_ttl_s=2,
        fence_margin_s=1.5,
        ring_refresh_s=0.05,
        shutdown_deadline_s=0.5,
    )


async def test_node_gauges_follow_the_node_and_its_fence(node_settings: PollerSettings) -> None:
    store = memory_store(lambda: datetime.now(UTC))
    metrics = Metrics()
    node = Node(node_settings, store, NoDelivery(), metrics)  # type: ignore[arg-type]
    assert value(metrics, "tickd_node_heartbeat_age_seconds") == 0  # not running yet
    at = datetime.now(UTC)
    await store.create_client(Client("c1", 2, True, "hash", at, at))
    stop = asyncio.Event()
    task = asyncio.create_task(node.run(stop))
    try:
        await until(lambda: value(metrics, "tickd_instances_owned") == 2)
        await until(lambda: value(metrics, "tickd_open_minutes") >= 2)
        fence_after_s = node_settings.node_ttl_s - node_settings.fence_margin_s
        assert value(metrics, "tickd_node_fenced") == 0
        # The gauge agrees with the fence: below its threshold while heartbeats are answered.
        assert value(metrics, "tickd_node_heartbeat_age_seconds") < fence_after_s  # not a duration: the fence's own
        # An open minute is the current one or the next: never two minutes old.
        assert 0 < value(metrics, "tickd_oldest_open_minute_age_seconds") < 120  # not a duration: a minute's age
        metrics.checkpoint_lag.labels("c1/0").set(70)  # as if the instance had closed a minute

        async def unanswered(node_info: NodeInfo, ttl_s: int) -> None:
            raise StoreUnavailable("down for the test")

        store.heartbeat = unanswered  # type: ignore[method-assign]
        await until(lambda: value(metrics, "tickd_node_fenced") == 1)
        assert value(metrics, "tickd_node_heartbeat_age_seconds") >= fence_after_s
        assert value(metrics, "tickd_store_errors_total", operation="heartbeat") >= 1
        await until(lambda: value(metrics, "tickd_instances_owned") == 0)
        assert value(metrics, "tickd_open_minutes") == 0
        assert value(metrics, "tickd_oldest_open_minute_age_seconds") == 0
        # A stopped instance's lag is the next owner's to report: its series goes with it.
        assert metrics.registry.get_sample_value("tickd_checkpoint_lag_seconds", {"instance": "c1/0"}) is None
    finally:
        stop.set()
        await task


async def test_durably_counts_each_failed_try_by_operation() -> None:
    metrics = Metrics()
    tries: list[int] = []

    async def write() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnavailable("down for the test")

    await durably(structlog.get_logger(), "dead_letter", write, metrics)
    assert value(metrics, "tickd_store_errors_total", operation="dead_letter") == 2


async def test_throttle_wait_is_observed_per_granted_token() -> None:
    ops = CountedOps()
    store = memory_store(MemoryConnection(Tables(lambda: datetime.now(UTC)), ops))
    at = datetime.now(UTC)
    await store.put_policy(ThrottlePolicy("c1", "p", 1, 60, at, at))
    metrics = Metrics()
    gate = ThrottleGate(store, "n1", lambda: datetime.now(UTC), metrics, poll_s=0.02)
    first = await gate.acquire("c1", "p", "e1", at)
    looked = ops["read_tokens"]
    second = asyncio.create_task(gate.acquire("c1", "p", "e2", at))
    # The second event's gate found the policy full twice over: it waits, it did not take a token.
    await until(lambda: ops["read_tokens"] >= looked + 2, what="the second event's gate polling the full policy")
    assert first is not None and not second.done()
    await gate.not_delivered(first)
    assert await second is not None
    await gate.close()
    assert value(metrics, "tickd_throttle_wait_seconds_count", client_id="c1") == 2
    assert value(metrics, "tickd_throttle_wait_seconds_sum", client_id="c1") > 0
