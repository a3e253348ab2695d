"""A client's own settings and its notification feed in the store, on both adapters: settings round-trip
(a notify target of either kind), survive an admin's ``update_client`` and show in ``list_clients``; a
client's update never clears them; notices page newest first per tenant and day, and another tenant's
never show; a client's retention applies to the records written once the store has read it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

from tests.contract.conftest import Env, make_client
from tickd.schema import notices
from tickd.schema.model import (
    AuditRecord,
    ClientSettings,
    DeadLetter,
    HttpCallback,
    KafkaCallback,
    Location,
    Run,
    Schedule,
    Status,
)
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


async def _records_of(env: Env, store: Store, client_id: str) -> tuple[uuid.UUID, datetime]:
    """One of each record a client's retention governs: a run, a dead letter, an audit record, a notice,
    and a one-time schedule row due now (kept its retention after its due time)."""
    now = env.later(0)
    schedule_id = uuid.uuid4()
    await store.add_runs(client_id, schedule_id, [Run(now, Status.FAILED, 1, now, "HTTP 500", seq=1)])
    callback = HttpCallback("https://x.test/")
    letter = DeadLetter(client_id, schedule_id, f"{schedule_id}:1", now, 1, "HTTP 500", callback, b"{}")
    await store.add_dead_letter(letter)
    await store.record_audit([notices.notice(client_id, "schedule.update", str(schedule_id), now, {}, schedule_id)])
    await store.record_notice(notices.notice(client_id, notices.RESUMED, str(schedule_id), now, {}, schedule_id))
    row = Schedule(client_id, schedule_id, Location(0, now), now, b"{}", callback, now)
    await store.create_schedule(row, now)
    return schedule_id, now


async def _kept(store: Store, client_id: str, schedule_id: uuid.UUID, at: datetime) -> list[str]:
    """Which of ``_records_of``'s records are still there."""
    found = []
    if await store.list_runs(client_id, schedule_id, None, 10):
        found.append("run")
    if await store.get_dead_letter(client_id, at, schedule_id) is not None:
        found.append("dead_letter")
    if await store.page_schedule_audit(client_id, schedule_id, None, 10):
        found.append("audit")
    if any(n.schedule_id == schedule_id for n in await store.page_notices(client_id, at.date(), None, 100)):
        found.append("notice")
    if await store.get_schedule(client_id, schedule_id) is not None:
        found.append("schedule")
    return found


async def test_a_clients_retention_applies_to_the_records_written_after_the_store_read_it(
    env: Env, store: Store, client_id: str
) -> None:
    """Client A keeps its records 5 s (audit records too), client B the deployment's default. A second
    store (another replica) that has not read A yet writes A's records with the default; once it has
    read A (as a request's authentication or a poller's client refresh does), with A's."""
    short, default = f"{client_id}-a", f"{client_id}-b"
    for made in (short, default):
        assert await store.create_client(make_client(env, made))
    # 5 s: the writes and the first reads below must fit in it on a loaded machine (on Cassandra, real time).
    await store.set_client_settings(short, ClientSettings(retention_s=5, audit_retention_s=5))
    replica = await env.store_with(heartbeat_s=6.0)  # a store of its own (the Cassandra ones are cached by settings)
    written = {
        "a": await _records_of(env, store, short),
        "b": await _records_of(env, store, default),
        "a_unread": await _records_of(env, replica, short),
    }
    await replica.get_client(short)
    written["a_read"] = await _records_of(env, replica, short)
    everything = ["run", "dead_letter", "audit", "notice", "schedule"]
    assert [await _kept(store, short, *written["a"]), await _kept(store, default, *written["b"])] == [everything] * 2
    await env.wait(6)
    assert await _kept(store, short, *written["a"]) == []
    assert await _kept(store, short, *written["a_read"]) == []
    assert await _kept(store, default, *written["b"]) == everything
    assert await _kept(store, short, *written["a_unread"]) == everything
