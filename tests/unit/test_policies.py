"""Throttle policies' rules (``service.policies``) called directly over the in-memory store: no aiohttp,
no request. The HTTP side (status codes, bodies) is tests/unit/api/test_api_throttle.py."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.throttled import hold_a_token
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import NotFound
from tickd.schema.memory import memory_store
from tickd.schema.model import ThrottlePolicy
from tickd.service import policies

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


@pytest.fixture
def store() -> CassandraStore:
    return memory_store(lambda: NOW)


async def test_saving_creates_then_replaces_keeping_when_it_was_created(store: CassandraStore) -> None:
    first = await policies.save(store, "acme", "nightly", 20, 30, at=NOW)
    assert first == policies.Saved(ThrottlePolicy("acme", "nightly", 20, 30, NOW, NOW), created=True)
    second = await policies.save(store, "acme", "nightly", 5, 60, at=LATER)
    assert second == policies.Saved(ThrottlePolicy("acme", "nightly", 5, 60, NOW, LATER), created=False)
    assert await store.get_policy("acme", "nightly") == second.policy


async def test_a_missing_policy_is_not_found_naming_the_name(store: CassandraStore) -> None:
    await policies.save(store, "acme", "nightly", 20, 30, at=NOW)
    for call in (policies.get, policies.held, policies.delete):
        with pytest.raises(NotFound) as raised:
            await call(store, "acme", "daily")
        assert raised.value.field == "name"
    with pytest.raises(NotFound):
        await policies.get(store, "rival", "nightly")  # another client's policy of that name is not acme's


async def test_policies_are_listed_by_name_and_only_the_clients_own(store: CassandraStore) -> None:
    for name in ("zulu", "alpha", "mike"):
        await policies.save(store, "acme", name, 1, 30, at=NOW)
    await policies.save(store, "rival", "bravo", 1, 30, at=NOW)
    assert [p.name for p in await policies.listed(store, "acme")] == ["alpha", "mike", "zulu"]
    assert await policies.listed(store, "nobody") == []


async def test_deleting_answers_the_policy_as_it_was_and_removes_it(store: CassandraStore) -> None:
    saved = await policies.save(store, "acme", "nightly", 20, 30, at=NOW)
    assert await policies.delete(store, "acme", "nightly") == saved.policy
    assert await policies.listed(store, "acme") == []


async def _throttled_event(store: CassandraStore, client_id: str) -> str:
    """A throttled schedule of ``client_id`` under policy "p" whose first event holds a token; its event id."""
    _, event_id = await hold_a_token(store, client_id, NOW)
    return event_id


async def test_held_counts_the_tokens_and_a_release_frees_one_once(store: CassandraStore) -> None:
    await policies.save(store, "acme", "p", 2, 600, at=NOW)
    event_id = await _throttled_event(store, "acme")
    assert (await policies.held(store, "acme", "p"))[1] == 1
    assert await policies.release(store, "acme", event_id) is True
    assert await policies.release(store, "acme", event_id) is False  # released before: nothing to free
    assert (await policies.held(store, "acme", "p"))[1] == 0


async def test_an_event_of_no_throttled_schedule_of_the_client_is_not_found(store: CassandraStore) -> None:
    await policies.save(store, "acme", "p", 2, 600, at=NOW)
    event_id = await _throttled_event(store, "acme")
    with pytest.raises(NotFound) as raised:
        await policies.release(store, "rival", event_id)
    assert raised.value.field == "event_id"


def test_the_rules_load_without_aiohttp() -> None:
    """The service layer stays below HTTP: importing it imports no aiohttp (a fresh interpreter)."""
    check = "import sys, tickd.service.policies; assert 'aiohttp' not in sys.modules, 'aiohttp imported'"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
