"""A client's own settings and its notification feed in the store, on both adapters: settings round-trip
(a notify target of either kind), survive an admin's ``update_client`` and show in ``list_clients``; a
client's update never clears them; notices page newest first per tenant and day, and another tenant's
never show."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from tests.contract.conftest import Env, make_client
from tickd.schema import notices
from tickd.schema.model import AuditRecord, ClientSettings, HttpCallback, KafkaCallback
from tickd.schema.store import Store


async def test_settings_round_trip_and_outlive_an_admins_update(env: Env, store: Store, client_id: str) -> None:
    client = make_client(env, client_id)
    assert await store.create_client(client)
    fetched = await store.get_client(client_id)
    assert fetched is not None and fetched.settings == ClientSettings()
    web = ClientSettings(pause_after_failures=3, notify=HttpCallback("https://n.test/h", headers={"X-A": "b"}))
    await store.set_client_settings(client_id, web)
    fetched = await store.get_client(client_id)
    assert fetched is not None and fetched.settings == web
    await store.update_client(dataclasses.replace(client, poller_count=6, poller_span=6))
    fetched = await store.get_client(client_id)
    assert fetched is not None and fetched.poller_count == 6 and fetched.settings == web
    kafka = ClientSettings(notify=KafkaCallback("tenant.notices"))
    await store.set_client_settings(client_id, kafka)
    listed = {c.client_id: c for c in await store.list_clients()}
    assert listed[client_id].settings == kafka


async def test_notices_page_newest_first_per_tenant(env: Env, store: Store, client_id: str) -> None:
    other = f"{client_id}-other"
    start = env.now().replace(microsecond=0)
    made: list[AuditRecord] = []
    for n in range(5):
        kind = [notices.DEAD_LETTERED, notices.AUTO_PAUSED][n % 2]
        record = notices.notice(client_id, kind, f"t{n}", start - timedelta(milliseconds=n), {"n": n}, uuid.uuid4())
        made.append(record)
        await store.record_notice(record)
    await store.record_notice(notices.notice(other, notices.RESUMED, "x", start, {}))
    day = start.date()
    first = await store.page_notices(client_id, day, None, 3)
    rest = await store.page_notices(client_id, day, (first[-1].at, first[-1].audit_id), 10)
    assert [r.target for r in first + rest] == ["t0", "t1", "t2", "t3", "t4"]
    assert first[0] == made[0]  # every field kept
    assert [r.client_id for r in await store.page_notices(other, day, None, 10)] == [other]
    assert await store.page_client_audit(client_id, day, None, 10) == []  # a notice is not a change
