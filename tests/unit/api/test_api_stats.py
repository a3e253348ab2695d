"""``GET /v1/stats`` over the API (in-memory store): a tenant reads its own counts only, summed over
writers and windows; no key, no stats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.api_helpers import ADMIN, Api, Register
from tickd.schema.stats import BUCKETS, CLUSTER, MinuteStats, bucket
from tickd.schema.store import Store

pytest_plugins = ["tests.integration.api_fixtures"]


def _row(client_id: str, minutes_ago: int, writer: str, late_s: float, fired: int) -> MinuteStats:
    minute = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).replace(second=0, microsecond=0)
    lateness = tuple(fired if i == bucket(late_s) else 0 for i in range(BUCKETS))
    return MinuteStats(client_id, minute, writer, fired, 1, 0, lateness, late_s)


async def test_a_tenant_reads_its_own_stats(api: Api, store: Store, register: Register) -> None:
    mine, key = await register()
    other, other_key = await register()
    await store.write_stats(
        [
            _row(mine, 0, "node-a/1", 0.02, 90),
            _row(mine, 1, "node-b/1", 0.3, 10),
            _row(mine, 30, "node-a/1", 7.0, 5),
            _row(mine, 600, "node-a/0", 100.0, 1),
            _row(other, 0, "node-a/1", 250.0, 1000),
        ]
    )
    resp = await api.get("/v1/stats", headers=key)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["client_id"] == mine and datetime.fromisoformat(body["at"]) <= datetime.now(UTC)
    five, hour, day = body["windows"]
    assert (five["window_s"], five["fired"], five["delivered"], five["retried"], five["failed"]) == (
        300,
        100,
        100,
        2,
        0,
    )
    assert (five["lateness_p50_s"], five["lateness_p99_s"], five["lateness_max_s"]) == (
        0.025,
        0.3,
        0.3,
    )  # capped at the max
    assert (hour["fired"], hour["lateness_p50_s"], hour["lateness_p99_s"], hour["lateness_max_s"]) == (
        105,
        0.025,
        7.0,
        7.0,
    )
    assert (day["fired"], day["lateness_max_s"]) == (106, 100.0)

    theirs = await (await api.get("/v1/stats", headers=other_key)).json()
    assert theirs["windows"][0]["fired"] == 1000 and theirs["client_id"] == other
    _, fresh_key = await register()
    empty = await (await api.get("/v1/stats", headers=fresh_key)).json()
    assert all(w["fired"] == 0 and w["lateness_p99_s"] is None for w in empty["windows"])
    assert (await api.get("/v1/stats")).status == 401
    assert (await api.get("/v1/stats", headers={"Authorization": "Bearer nope"})).status == 401


async def test_an_admin_reads_the_cluster_or_one_client(api: Api, store: Store, register: Register) -> None:
    mine, key = await register()
    await store.write_stats(
        [
            _row(CLUSTER, 0, "node-a/1", 0.02, 50),
            _row(CLUSTER, 0, "node-b/1", 2.5, 50),
            _row(mine, 0, "node-a/1", 0.02, 7),
        ]
    )
    everyone = await (await api.get("/v1/admin/stats", headers=ADMIN)).json()
    assert everyone["client_id"] is None
    assert (everyone["windows"][0]["fired"], everyone["windows"][0]["lateness_max_s"]) == (100, 2.5)
    one = await (await api.get("/v1/admin/stats", params={"client_id": mine}, headers=ADMIN)).json()
    assert one["client_id"] == mine and one["windows"][0]["fired"] == 7
    assert (await api.get("/v1/admin/stats", headers=key)).status in (401, 403)  # a tenant's key is not enough
    assert (await api.get("/v1/admin/stats")).status == 401
    for bad in ({"client_id": "Not/Valid"}, {"client_id": ""}, {"other": "1"}):
        resp = await api.get("/v1/admin/stats", params=bad, headers=ADMIN)
        assert resp.status == 400, (bad, await resp.text())
        assert (await resp.json())["error"]["field"] in ("client_id", "other"), bad
