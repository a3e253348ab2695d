"""Acceptance fixtures: each scenario gets its own keyspace (dropped and migrated on entry; dropped again
when the scenario passed, left for inspection when it did not), a receiver, and node processes that are
killed at teardown whatever happened. Node logs are kept under .cache/acceptance/<scenario>/ for
post-mortems.

Why drop a passing scenario's keyspace: each keyspace's 18 tables hold heap in the one Cassandra node
whether or not they are used, and with two scenarios at a time (tests/run.sh) 25 kept keyspaces filled its
768 MiB (now 1 GiB): the node stopped with OutOfMemoryError mid-run."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator

import pytest

from tests.acceptance.api_client import Api, serve_api
from tests.acceptance.harness import POLLER_BIN, REPO, REPORT, Receiver, Scenario
from tickd.schema.cassandra import CassandraStore
from tickd.schema.migrate import drop, migrate
from tickd.schema.settings import StoreSettings

LOG_ROOT = REPO / ".cache" / "acceptance"


def scenario_keyspace(test_name: str) -> str:
    """``test_s3_node_joins`` -> ``<TICKD_KEYSPACE>_s3``: one fresh keyspace per scenario, so nodes of one
    scenario never see another's clients (pollers run every active client of their keyspace)."""
    base = os.environ.get("TICKD_KEYSPACE", "tickd_test")
    if "test" not in base:
        pytest.fail(f"acceptance tests drop keyspaces; TICKD_KEYSPACE={base!r} must contain 'test'", pytrace=False)
    return f"{base}_{test_name.split('_')[1]}"


@pytest.fixture
async def scenario(request: pytest.FixtureRequest) -> AsyncIterator[Scenario]:
    if not POLLER_BIN.exists():
        pytest.fail(f"{POLLER_BIN} is missing: pip install -e . first", pytrace=False)
    name = request.node.name
    keyspace = scenario_keyspace(name)
    settings = StoreSettings.from_env({**os.environ, "TICKD_KEYSPACE": keyspace})
    try:
        await asyncio.to_thread(drop, settings)
        await asyncio.to_thread(migrate, settings)
        store = await CassandraStore.connect(settings)
    except Exception as exc:
        pytest.fail(f"Cassandra is not usable ({exc}); start it with `make infra-up`", pytrace=False)
    log_dir = LOG_ROOT / name
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    receiver = await Receiver().start()
    world = Scenario(name, keyspace, store, log_dir, receiver)
    try:
        yield world
    finally:
        await world.close()
        print(f"\n{name}: node logs in {log_dir}")
    report = getattr(request.node, "tickd_call_report", None)
    if report is not None and report.passed:
        await asyncio.to_thread(drop, settings)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Keeps each scenario's call report on its item, for the fixture to see whether it passed."""
    report = yield
    if call.when == "call":
        item.tickd_call_report = report  # type: ignore[attr-defined]
    return report


@pytest.fixture
async def api(scenario: Scenario) -> AsyncIterator[Api]:
    """The API in-process on the scenario's keyspace (admin token ``api_client.ADMIN_TOKEN``)."""
    async for client in serve_api(scenario.store):
        yield client


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("tickd acceptance measurements")
        for line in REPORT:
            terminalreporter.write_line(line)
