"""Issue 12, item 1: secure connections against the local infra's secure endpoints (infra.py serves them
next to the plain ones: optional TLS on Cassandra's 9042, SASL_SSL with SCRAM-SHA-512 on Kafka's 9094).

One HTTP fire with ``tickd-api`` and ``tickd-poller`` on Cassandra over TLS; one Kafka fire produced and
read back over SASL_SSL; a wrong Kafka password and an untrusted CA each stop a process at start with a
message that says which.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from cassandra.cluster import Cluster

from tests.acceptance.api_client import Api, create_client, create_schedule
from tests.acceptance.harness import (
    FAST_KNOBS,
    POLLER_BIN,
    REPO,
    PollerProcess,
    Scenario,
    free_port,
    now_utc,
    report,
    wait_until,
)
from tickd.poller.callbacks.kafka_security import KafkaSecurity, client_config
from tickd.schema.model import KafkaCallback

pytestmark = pytest.mark.acceptance

TLS_DIR = Path(os.environ.get("TICKD_INFRA_DIR", REPO / ".cache" / "infra")) / "tls"
CA_PEM = TLS_DIR / "ca.pem"
API_BIN = POLLER_BIN.parent / "tickd-api"
ADMIN_TOKEN = "secure-admin-token"
CASSANDRA_TLS = {"TICKD_CASSANDRA_TLS": "true", "TICKD_CASSANDRA_TLS_CA": str(CA_PEM)}
KAFKA_SASL_SSL = {
    "TICKD_KAFKA_BOOTSTRAP": os.environ.get("TICKD_KAFKA_SASL_BOOTSTRAP", "127.0.0.1:9094"),
    "TICKD_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "TICKD_KAFKA_SASL_USERNAME": "tickd",
    "TICKD_KAFKA_SASL_PASSWORD": "tickd-local-secret",
    "TICKD_KAFKA_TLS_CA": str(CA_PEM),
}
UNTRUSTED_CA = str(REPO / "tests" / "unit" / "untrusted_ca.pem")  # a valid CA that did not sign the local server


@pytest.fixture(autouse=True)
def _secure_infra() -> None:
    if not CA_PEM.exists():
        pytest.fail(f"{CA_PEM} is missing: the local infra predates TLS; run `infra.py down && infra.py up`")


# --------------------------------------------------------------------------- helpers


class ApiProcess:
    """A real ``tickd-api`` on a free port; stderr (JSON lines) kept for assertions."""

    def __init__(self, keyspace: str, log_dir: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log_path = log_dir / "api.log"
        self.env = {
            **os.environ,
            **FAST_KNOBS,
            "TICKD_KEYSPACE": keyspace,
            "TICKD_API_PORT": str(self.port),
            "TICKD_ADMIN_TOKEN": ADMIN_TOKEN,
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiProcess:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([str(API_BIN)], env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def ready(self, timeout_s: float = 60) -> None:
        async def answers() -> bool:
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{self.url}/readyz") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        deadline = time.monotonic() + timeout_s
        while not await answers():
            assert self.proc is not None and self.proc.poll() is None, f"tickd-api exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"tickd-api not ready in {timeout_s} s:\n{self.log()}"
            await asyncio.sleep(0.2)

    async def exit_code(self, timeout_s: float = 60) -> int:
        assert self.proc is not None
        return await asyncio.to_thread(self.proc.wait, timeout_s)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


@asynccontextmanager
async def api_process(sc: Scenario, env: dict[str, str]) -> AsyncIterator[ApiProcess]:
    api = ApiProcess(sc.keyspace, sc.log_dir, env).start()
    try:
        yield api
    finally:
        api.close()


def tls_connections(keyspace: str) -> int:
    """Client connections Cassandra reports as TLS on ``keyspace`` (asked over a plain connection)."""
    cluster = Cluster(["127.0.0.1"], protocol_version=4)
    try:
        rows = cluster.connect().execute("SELECT keyspace_name, ssl_enabled FROM system_views.clients")
        return sum(1 for row in rows if row.ssl_enabled and row.keyspace_name == keyspace)
    finally:
        cluster.shutdown()


async def exit_of(node: PollerProcess, timeout_s: float = 60) -> tuple[int, dict[str, Any]]:
    """The node's exit code and its ``node_failed`` event."""
    assert node.proc is not None
    code = await asyncio.to_thread(node.proc.wait, timeout_s)
    await asyncio.to_thread(node.close)
    failed = node.find("node_failed")
    assert failed, f"{node.node_id} exited {code} without node_failed:\n{node.tail()}"
    return code, failed[0]


# --------------------------------------------------------------------------- scenarios


@pytest.mark.timeout(150)
async def test_sec1_http_fire_with_api_and_poller_on_cassandra_tls(scenario: Scenario) -> None:
    sc = scenario
    async with api_process(sc, CASSANDRA_TLS) as api:
        await api.ready()
        from_api = await asyncio.to_thread(tls_connections, sc.keyspace)
        assert from_api > 0, "tickd-api is up but Cassandra sees no TLS connection on its keyspace"
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with aiohttp.ClientSession(base_url=api.url) as http:
            async with http.post("/v1/clients", json={"client_id": "tls", "poller_count": 1}, headers=admin) as resp:
                assert resp.status == 201, await resp.text()
                key = {"Authorization": f"Bearer {(await resp.json())['api_key']}"}
            url = sc.receiver.endpoint("tls")
            body = {"delay_s": 8, "payload": {"over": "tls"}, "callback": {"type": "http", "url": url}}
            async with http.post("/v1/schedules", json=body, headers=key) as resp:
                assert resp.status == 201, await resp.text()
                schedule_id = (await resp.json())["schedule_id"]
        node = sc.node("tls-node", **CASSANDRA_TLS)
        await node.wait_for("node_started", timeout_s=60)
        with_poller = await asyncio.to_thread(tls_connections, sc.keyspace)
        assert with_poller > from_api, "the poller is up but Cassandra counts no more TLS connections"
        await wait_until(lambda: bool(sc.receiver.of("tls")), 60, "no HTTP delivery from the TLS poller")
    delivery = sc.receiver.of("tls")[0]
    assert delivery.schedule_id == schedule_id and delivery.answered == 200
    assert delivery.body["payload"] == {"over": "tls"}
    report("SEC1 http over Cassandra TLS", tls_connections_api=from_api, tls_connections_both=with_poller)


@pytest.mark.timeout(150)
async def test_sec2_kafka_fire_over_sasl_ssl(scenario: Scenario, api: Api) -> None:
    sc = scenario
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    config = client_config(KafkaSecurity.from_env(KAFKA_SASL_SSL))
    bootstrap = KAFKA_SASL_SSL["TICKD_KAFKA_BOOTSTRAP"]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **config)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1), NewTopic(f"{topic}-acks", 1, 1)])
    finally:
        await admin.close()
    client = await create_client(api, "sasl", 1, kafka_topics=[topic])
    made = await create_schedule(api, client, now_utc() + timedelta(seconds=8), KafkaCallback(topic))
    # The ack consumer joins its group over SASL_SSL too (the same settings as the producer).
    node = sc.node("sasl-node", **KAFKA_SASL_SSL, TICKD_KAFKA_ACK_TOPIC=f"{topic}-acks")
    checked = await node.wait_for("kafka_security_checked", timeout_s=60)
    assert (checked["protocol"], checked["mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    await node.wait_for("throttle_acks_consuming", timeout_s=60)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **config)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), timeout=60)
    finally:
        await consumer.stop()
    assert json.loads(record.value)["fire_id"] == made.fire_id
    assert record.key == str(made.schedule.schedule_id).encode()
    # On a fresh broker the group coordinator is not there until __consumer_offsets exists; aiokafka logs
    # that at error level and retries (the fresh-clone CI run saw it). Anything else is a failure.
    errors = [e for e in node.errors() if "GroupCoordinatorNotAvailable" not in str(e.get("event", ""))]
    assert not errors and not node.find("throttle_acks_unavailable"), node.tail()
    report("SEC2 kafka over SASL_SSL", delivered=1)


@pytest.mark.timeout(90)
async def test_sec3_wrong_kafka_password_fails_at_start(scenario: Scenario) -> None:
    node = scenario.node("wrong-password", **{**KAFKA_SASL_SSL, "TICKD_KAFKA_SASL_PASSWORD": "not-the-password"})
    code, failed = await exit_of(node)
    assert code == 2
    assert failed["error"].startswith("Kafka SASL authentication failed for user tickd (SCRAM-SHA-512)")
    assert failed["variable"] == "TICKD_KAFKA_SASL_PASSWORD"


@pytest.mark.timeout(90)
async def test_sec4_untrusted_ca_fails_at_start(scenario: Scenario) -> None:
    untrusted = {**CASSANDRA_TLS, "TICKD_CASSANDRA_TLS_CA": UNTRUSTED_CA}
    expected = "Cassandra TLS: certificate verify failed: the CA in TICKD_CASSANDRA_TLS_CA"
    code, failed = await exit_of(scenario.node("untrusted-ca", **untrusted))
    assert code == 2 and failed["error"].startswith(expected), failed
    assert "does not sign the server's certificate" in failed["error"]
    async with api_process(scenario, untrusted) as api:
        assert await api.exit_code() == 2, api.log()
    assert expected in api.log()
