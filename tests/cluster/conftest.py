"""Cluster fixtures: a 3-node Cassandra cluster on test hosts (network namespaces, so root is needed) and a
real ``tickd-api`` on it. Collected only with ``TICKD_CLUSTER_TESTS=1``: ``make test`` runs this tier on its
own after the others (as root; the single node is stopped first), ``make test-cluster`` runs only it.

The session starts the cluster if it is not running and stops it (and removes the hosts) at the end; a
cluster that was already running is left running, with every node started again and every host healed.
Each scenario with pollers gets its own keyspace (``<TICKD_KEYSPACE>_<scenario>``, replication factor 3,
dropped and migrated on entry, kept for inspection; the API-only C* scenarios share ``<TICKD_KEYSPACE>_c``);
logs go to .cache/cluster-tests/<test>/.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.cluster.harness import API_BIN, LOG_ROOT, REPORT, ApiProcess, Cluster
from tickd.schema.migrate import drop, migrate
from tickd.schema.settings import StoreSettings

if os.environ.get("TICKD_CLUSTER_TESTS", "").strip().lower() not in {"1", "true", "yes"}:
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
async def cluster() -> AsyncIterator[Cluster]:
    if os.geteuid() != 0:
        pytest.fail("cluster tests make network namespaces: run them as root", pytrace=False)
    world = Cluster()
    was_running = await world.running()
    try:
        await world.up()
        yield world
    finally:
        if was_running:
            await world.up()  # every node started again, every host healed
        else:
            await world.down()


MIGRATED: set[str] = set()


@dataclass
class Stage:
    """One scenario's world: the cluster, its keyspace's env, a log dir, an HTTP session."""

    cluster: Cluster
    env: dict[str, str]
    log_dir: Path
    session: aiohttp.ClientSession

    def api(self) -> ApiProcess:
        return ApiProcess(self.env, self.log_dir)


@pytest.fixture
async def stage(cluster: Cluster, request: pytest.FixtureRequest) -> AsyncIterator[Stage]:
    if not API_BIN.exists():
        pytest.fail(f"{API_BIN} is missing: pip install -e . first", pytrace=False)
    await cluster.up()  # a previous scenario may have left a node down
    base = os.environ.get("TICKD_KEYSPACE", "tickd_test")
    if "test" not in base:
        pytest.fail(f"cluster tests drop keyspaces; TICKD_KEYSPACE={base!r} must contain 'test'", pytrace=False)
    scenario = request.node.name.split("_")[1]
    # The API-only scenarios (C*) register their own clients and run no poller: they share one keyspace.
    env = {**cluster.env, "TICKD_KEYSPACE": f"{base}_{'c' if scenario.startswith('c') else scenario}"}
    settings = StoreSettings.from_env({**os.environ, **env})
    if env["TICKD_KEYSPACE"] not in MIGRATED:  # dropped and migrated once per session (~30 s each on 2 cores)
        await asyncio.wait_for(asyncio.to_thread(drop, settings), 180)
        await asyncio.wait_for(asyncio.to_thread(migrate, settings), 300)
        MIGRATED.add(env["TICKD_KEYSPACE"])
    log_dir = LOG_ROOT / request.node.name
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    async with aiohttp.ClientSession() as session:
        yield Stage(cluster, env, log_dir, session)
    print(f"\n{request.node.name}: logs in {log_dir}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("tickd cluster measurements")
        for line in REPORT:
            terminalreporter.write_line(line)
