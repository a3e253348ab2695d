"""The audit trail in the store, on both adapters: a record lands in its tenant's day and, with a schedule,
in the schedule's trail; pages come newest first, strictly past the cursor (records of one millisecond
included), and never show another tenant's or another schedule's records; records expire with their TTL."""

from __future__ import annotations

import uuid
from datetime import timedelta

from tests.contract.conftest import Env
from tickd.schema.model import AuditRecord
from tickd.schema.store import Store


def _record(env: Env, client_id: str, n: int, schedule_id: uuid.UUID | None, ms_ago: int) -> AuditRecord:
    at = env.now().replace(microsecond=(env.now().microsecond // 1000) * 1000) - timedelta(milliseconds=ms_ago)
    return AuditRecord(
        client_id,
        at,
        f"{n:04d}-{uuid.uuid4().hex[:8]}",
        "key:abc123",
        "schedule.update",
        str(schedule_id) if schedule_id else "nightly",
        f'{{"n": {n}}}',
        f"req-{n}",
        schedule_id,
        n if schedule_id else None,
    )


async def _all_pages(read, size: int) -> list[AuditRecord]:  # type: ignore[no-untyped-def]
    found: list[AuditRecord] = []
    before = None
    while True:
        page = await read(before, size)
        found += page
        if len(page) < size:
            return found
        before = (page[-1].at, page[-1].audit_id)


async def test_records_page_newest_first_per_tenant_and_per_schedule(env: Env, store: Store, client_id: str) -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    # Seven records in three milliseconds (several in one), on two schedules and one policy.
    records = [_record(env, client_id, n, [one, two, None][n % 3], ms_ago=[0, 0, 0, 1, 1, 2, 2][n]) for n in range(7)]
    other = f"{client_id}-other"
    others = [_record(env, other, 99, one, 0)]
    await store.record_audit([*records, *others], ttl_s=3600)
    day = records[0].at.date()

    newest_first = sorted(records, key=lambda r: (r.at, r.audit_id), reverse=True)
    for size in (1, 2, 3, 100):
        listed = await _all_pages(lambda b, n: store.page_client_audit(client_id, day, b, n), size)
        assert [r.audit_id for r in listed] == [r.audit_id for r in newest_first], size
    assert (await store.page_client_audit(client_id, day, None, 100))[0] == newest_first[0]

    mine = [r for r in newest_first if r.schedule_id == one]
    listed = await _all_pages(lambda b, n: store.page_schedule_audit(client_id, one, b, n), 1)
    assert listed == mine and all(r.version == int(r.request_id[4:]) for r in listed)
    assert await store.page_schedule_audit(client_id, uuid.uuid4(), None, 10) == []
    assert [r.client_id for r in await store.page_client_audit(other, day, None, 10)] == [other]


async def test_records_expire_with_their_ttl(env: Env, store: Store, client_id: str) -> None:
    schedule_id = uuid.uuid4()
    await store.record_audit([_record(env, client_id, 1, schedule_id, 0)], ttl_s=2)
    day = env.now().date()
    assert len(await store.page_schedule_audit(client_id, schedule_id, None, 10)) == 1
    await env.wait(3)
    assert await store.page_schedule_audit(client_id, schedule_id, None, 10) == []
    assert await store.page_client_audit(client_id, day, None, 10) == []


async def test_a_thousand_records_of_one_request_are_all_kept(env: Env, store: Store, client_id: str) -> None:
    """A batch create's records go in batches of a few dozen rows (tenant rows together, schedule rows
    apart): every one lands in both trails."""
    records = [_record(env, client_id, n, uuid.uuid4(), ms_ago=0) for n in range(1000)]
    await store.record_audit(records, ttl_s=3600)
    listed = await _all_pages(lambda b, n: store.page_client_audit(client_id, records[0].at.date(), b, n), 400)
    assert sorted(r.audit_id for r in listed) == sorted(r.audit_id for r in records)
    for record in records[::97]:
        assert await store.page_schedule_audit(client_id, record.schedule_id, None, 5) == [record]  # type: ignore[arg-type]
