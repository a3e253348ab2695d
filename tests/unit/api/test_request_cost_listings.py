"""A dead-letter page's reads are bounded by its limit, not by what is stored: counted in rows the store
read (the Cassandra adapter's bridge, in memory), never in time."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import Api, Register
from tickd.schema import listing, timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import DeadLetter, HttpCallback
from tickd.service import dead_letters

pytest_plugins = ["tests.integration.api_fixtures"]
BIG = b'"' + b"x" * 60_000 + b'"'


class Counted:
    """Rows and reads of the store's bridge, by statement name (dead letters' only: ``letter_rows``)."""

    def __init__(self, store: CassandraStore) -> None:
        self.rows: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        pages = store._db.pages

        async def counted(op: str, values: Any) -> AsyncIterator[list[Any]]:
            async for page in pages(op, values):
                self.reads[op] += 1
                self.rows[op] += len(page)
                yield page

        store._db.pages = counted  # type: ignore[method-assign]

    @property
    def letter_rows(self) -> int:
        return sum(n for op, n in self.rows.items() if "dead_letter" in op)


async def _fill(store: CassandraStore, client_id: str, days: int, per_day: int, same_ms: int = 1) -> list[DeadLetter]:
    """Dead letters with 60 KB payloads over the last ``days`` days; ``same_ms`` of them share each time."""
    now = timing.truncate_ms(datetime.now(UTC)) - timedelta(minutes=1)
    callback = HttpCallback("http://127.0.0.1:9/cb", "POST", {}, 5.0)
    letters = []
    for day in range(days):
        for i in range(per_day):
            failed_at = now - timedelta(days=day, seconds=i // same_ms)
            sid = uuid.uuid4()
            letter = DeadLetter(client_id, sid, f"{sid}:1", failed_at, 3, "HTTP 500", callback, BIG)
            letters.append(letter)
            await store.add_dead_letter(letter)
    return letters


def _ids(page: dict[str, Any]) -> list[str]:
    return [d["dead_letter_id"] for d in page["dead_letters"]]


async def test_a_page_reads_its_limit_not_the_range(api: Api, store: CassandraStore, register: Register) -> None:
    """Base code: a page of 5 read every row of a day (50 rows, 3 MB of payloads) and was not bounded by
    the 31 days it may span; now one read of 6 rows (the page and one to know a next page exists), and
    no payload (the Cassandra read has no payload column: tests/contract/test_listing_limits.py)."""
    client_id, key = await register()
    await _fill(store, client_id, days=31, per_day=50)
    counted = Counted(store)
    since = (datetime.now(UTC) - timedelta(days=30, hours=23)).isoformat()
    resp = await api.get("/v1/dead-letters", params={"limit": 5, "from": since}, headers=key)
    page = await resp.json()
    assert resp.status == 200 and len(page["dead_letters"]) == 5 and page["next_cursor"]
    assert "payload" not in page["dead_letters"][0]
    print(f"rows read {dict(counted.rows)}")
    assert counted.letter_rows <= 6


async def test_a_filtered_page_ends_on_its_read_budget(api: Api, store: CassandraStore, register: Register) -> None:
    """Looking for one schedule's dead letters among many: the page stops after PAGE_READ_BUDGET rows,
    short (empty here), with a cursor where it stopped; following cursors finds the one letter."""
    client_id, key = await register()
    letters = await _fill(store, client_id, days=2, per_day=dead_letters.PAGE_READ_BUDGET)
    wanted = letters[-1]  # the oldest
    counted = Counted(store)
    params: dict[str, Any] = {"schedule_id": str(wanted.schedule_id)}
    resp = await api.get("/v1/dead-letters", params=params, headers=key)
    page = await resp.json()
    assert page["dead_letters"] == [] and page["next_cursor"]
    assert counted.letter_rows <= dead_letters.PAGE_READ_BUDGET
    found: list[str] = []
    for _ in range(5):
        if not page["next_cursor"]:
            break
        params["cursor"] = page["next_cursor"]
        page = await (await api.get("/v1/dead-letters", params=params, headers=key)).json()
        found += [d["schedule_id"] for d in page["dead_letters"]]
    assert found == [str(wanted.schedule_id)] and page["next_cursor"] is None


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
async def test_paging_returns_every_letter_once_in_order(
    api: Api, store: CassandraStore, register: Register, limit: int
) -> None:
    """Several dead letters failing in the same millisecond (ties broken by schedule id) across days."""
    client_id, key = await register()
    letters = await _fill(store, client_id, days=3, per_day=12, same_ms=4)
    expected = sorted(letters, key=lambda d: (-timing.to_epoch_ms(d.failed_at), d.schedule_id))
    params: dict[str, Any] = {"limit": limit}
    seen: list[str] = []
    while True:
        page = await (await api.get("/v1/dead-letters", params=params, headers=key)).json()
        seen += _ids(page)
        if not page["next_cursor"]:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == [f"{timing.to_epoch_ms(d.failed_at)}-{d.schedule_id}" for d in expected]


# -- schedule listings ------------------------------------------------------------------------------


async def _create(api: Api, key: dict[str, str], fire_ats: list[datetime]) -> list[str]:
    """Schedules due at ``fire_ats`` (one batch per 1,000), with 1 KB payloads: their ids."""
    ids: list[str] = []
    for i in range(0, len(fire_ats), 1000):
        items = [
            {
                "fire_at": at.isoformat(),
                "payload": "x" * 1000,
                "callback": {"type": "http", "url": "http://127.0.0.1:9/cb"},
            }
            for at in fire_ats[i : i + 1000]
        ]
        resp = await api.post("/v1/schedules/batch", json={"schedules": items}, headers=key)
        ids += [r["schedule_id"] for r in (await resp.json())["results"]]
    return ids


async def _list_all(api: Api, key: dict[str, str], params: dict[str, Any]) -> tuple[list[str], int]:
    """Every schedule a listing pages through, and the number of pages."""
    seen: list[str] = []
    for pages in range(1, 1000):
        page = await (await api.get("/v1/schedules", params=params, headers=key)).json()
        seen += [s["schedule_id"] for s in page["schedules"]]
        if not page["next_cursor"]:
            return seen, pages
        params = {**params, "cursor": page["next_cursor"]}
    raise AssertionError("the listing never ended")


def _span(at: datetime) -> dict[str, str]:
    return {"from": (at - timedelta(minutes=1)).isoformat(), "to": (at + timedelta(hours=1)).isoformat()}


async def test_a_schedule_page_reads_its_limit_without_payloads(
    api: Api, store: CassandraStore, register: Register
) -> None:
    """Base code: a page of 5 read its partitions whole (300 rows of 1 KB payloads here); now 5 rows."""
    _, key = await register(poller_count=1)
    at = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=30)
    await _create(api, key, [at + timedelta(milliseconds=i) for i in range(300)])
    counted = Counted(store)
    resp = await api.get("/v1/schedules", params={**_span(at), "limit": 5}, headers=key)
    page = await resp.json()
    assert resp.status == 200 and len(page["schedules"]) == 5 and page["next_cursor"]
    assert "payload" not in page["schedules"][0]
    rows = sum(n for op, n in counted.rows.items() if "minute" in op)
    print(f"rows read {dict(counted.rows)}")
    assert rows <= 5


async def test_a_filtered_schedule_page_ends_on_its_row_budget(
    api: Api, store: CassandraStore, register: Register, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the one cancelled schedule among many: each page reads about the row budget, short, with
    a cursor; paging on finds it."""
    monkeypatch.setattr(listing, "LIST_ROW_BUDGET", 100)
    _, key = await register(poller_count=2)
    at = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=30)
    ids = await _create(api, key, [at + timedelta(milliseconds=i) for i in range(600)])
    assert (await api.delete(f"/v1/schedules/{ids[-1]}", headers=key)).status == 200
    counted = Counted(store)
    params = {**_span(at), "status": "cancelled"}
    first = await (await api.get("/v1/schedules", params=params, headers=key)).json()
    assert first["schedules"] == [] and first["next_cursor"]
    assert sum(n for op, n in counted.rows.items() if "minute" in op) <= 2 * 100
    found, pages = await _list_all(api, key, params)
    assert found == [ids[-1]] and pages > 3


@pytest.mark.parametrize(("budget", "limit"), [(7, 3), (40, 10), (4000, 7)])
async def test_paging_lists_every_schedule_once_in_order(
    api: Api, register: Register, monkeypatch: pytest.MonkeyPatch, budget: int, limit: int
) -> None:
    """Over 4 pollers and several minutes, many due in the same millisecond: whatever the budgets cut."""
    monkeypatch.setattr(listing, "LIST_ROW_BUDGET", budget)
    _, key = await register(poller_count=4)
    at = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=30)
    fire_ats = [at + timedelta(seconds=20 * (i // 5)) for i in range(90)]  # 5 in each millisecond
    ids = await _create(api, key, fire_ats)
    expected = [sid for _, sid in sorted(zip(fire_ats, [uuid.UUID(i) for i in ids], strict=True))]
    found, _ = await _list_all(api, key, {**_span(at), "limit": limit})
    assert found == [str(sid) for sid in expected]
