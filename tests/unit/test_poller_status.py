"""The poller's status endpoints as a Kubernetes probe sees them: /healthz stays ok while the node is
fenced (an outage is waited out, never a restart), /readyz says 503 then."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from poller.metrics import Metrics, status_app


async def test_readyz_follows_fencing_and_healthz_does_not() -> None:
    state: dict[str, object] = {"node_id": "n1", "fenced": False, "instances": {}}
    client = TestClient(TestServer(status_app(Metrics(), lambda: dict(state))))
    await client.start_server()
    try:
        assert (await client.get("/readyz")).status == 200
        state["fenced"] = True
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["status"] == "fenced"
        assert (await client.get("/healthz")).status == 200
        state["fenced"] = False
        assert (await client.get("/readyz")).status == 200
        assert b"tickd_" in await (await client.get("/metrics")).read()
    finally:
        await client.close()
