"""``GET /v1/admin/nodes``: live nodes with the instances they hold and their epochs, the instances none
holds, admin only; and the dashboard's files under ``/ui`` with their Content Security Policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.api_helpers import ADMIN, Api, Register
from tickd.schema.model import InstanceKey, NodeInfo
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


def _node(node_id: str, heartbeat_at: datetime) -> NodeInfo:
    return NodeInfo(node_id, "10.0.0.1", 9108, heartbeat_at - timedelta(minutes=5), heartbeat_at)


async def test_nodes_lists_claims_by_live_owner_with_epochs(api: Api, store: Store, register: Register) -> None:
    client_id, _ = await register(poller_count=3)
    await api.patch(f"/v1/clients/{client_id}", json={"poller_count": 2}, headers=ADMIN)  # span stays 3
    at = datetime.now(UTC)
    await store.heartbeat(_node("node-a", at), 30)
    first = await store.claim(InstanceKey(client_id, 0), "node-a", None, at)
    await store.claim(InstanceKey(client_id, 2), "node-a", None, at)
    assert first is not None
    await store.claim(InstanceKey(client_id, 0), "node-a", first, at)  # epoch 2
    await store.claim(InstanceKey(client_id, 1), "node-gone", None, at)  # owner not live

    resp = await api.get("/v1/admin/nodes", headers=ADMIN)
    body = await resp.json()

    assert resp.status == 200
    [node] = body["nodes"]
    assert node["node_id"] == "node-a" and 0 <= node["heartbeat_age_s"] < 5
    assert [(i["poller_id"], i["epoch"], i["draining"]) for i in node["instances"]] == [(0, 2, False), (2, 1, True)]
    assert body["unowned"] == [
        {"client_id": client_id, "poller_id": 1, "epoch": 1, "owner": "node-gone", "draining": False}
    ]


async def test_nodes_with_no_members_lists_every_instance_unowned(api: Api, register: Register) -> None:
    client_id, _ = await register(poller_count=2)
    body = await (await api.get("/v1/admin/nodes", headers=ADMIN)).json()
    assert body["nodes"] == []
    assert [(i["client_id"], i["poller_id"], i["owner"], i["epoch"]) for i in body["unowned"]] == [
        (client_id, 0, None, 0),
        (client_id, 1, None, 0),
    ]


async def test_nodes_is_admin_only(api: Api, register: Register) -> None:
    _, key = await register()
    tenant = await api.get("/v1/admin/nodes", headers=key)
    assert tenant.status == 403 and (await tenant.json())["error"]["code"] == "forbidden"
    unknown = await api.get("/v1/admin/nodes", headers={"Authorization": "Bearer nobody.abcdefghijklmnopqrst"})
    assert unknown.status == 401
    assert (await api.get("/v1/admin/nodes")).status == 401


async def test_dashboard_files_carry_a_self_only_csp(api: Api) -> None:
    page = await api.get("/ui")
    html = await page.text()
    assert page.status == 200 and page.content_type == "text/html"
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert '<script type="module" src="/ui/app.js">' in html and "<script>" not in html and "http" not in html
    script = await api.get("/ui/app.js")
    assert script.status == 200 and script.content_type == "text/javascript"
    assert script.headers["Content-Security-Policy"] == csp
    assert (await api.get("/ui/../service/app.py")).status == 404
    assert (await api.get("/ui/nothing.js")).status == 404
