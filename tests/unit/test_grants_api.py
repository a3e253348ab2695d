"""Kafka grants over the admin API (``service.grants``), on the in-memory store: reserved topics refused,
overlaps between clients warned about or refused, hostile names answered 422, and a redrive to a topic
no longer granted refused."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api_helpers import ADMIN, ADMIN_TOKEN, Api, serve
from tickd.schema import timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.memory import memory_store
from tickd.schema.model import DeadLetter, FireOutcome, Status
from tickd.service.settings import ApiSettings


def settings(**changes: Any) -> ApiSettings:
    return ApiSettings(admin_token=ADMIN_TOKEN, callback_allow_private=True, **changes)


@pytest.fixture
def store() -> CassandraStore:
    return memory_store(lambda: datetime.now(UTC))


@pytest.fixture
async def api(store: CassandraStore) -> AsyncIterator[Api]:
    async for client in serve(settings(), store):
        yield client


async def register(api: Api, topics: list[str], status: int = 201) -> Any:
    body = {"client_id": f"t{uuid.uuid4().hex[:12]}", "poller_count": 1, "kafka_topics": topics}
    resp = await api.post("/v1/clients", json=body, headers=ADMIN)
    assert resp.status == status, await resp.text()
    return resp


async def error(resp: Any) -> dict[str, Any]:
    found: dict[str, Any] = (await resp.json())["error"]
    return found


async def assert_refused_both_ways(api: Api, topics: list[str]) -> None:
    """Registering with ``topics`` and PATCHing them onto a client are both 422 naming the entry."""
    resp = await register(api, ["billing", *topics], 422)
    found = await error(resp)
    assert found["code"] == "topic_reserved" and found["field"] == "kafka_topics.1"
    client = await (await register(api, [f"m{uuid.uuid4().hex[:8]}.*"])).json()
    path = f"/v1/clients/{client['client_id']}"
    patched = await api.patch(path, json={"kafka_topics": topics}, headers=ADMIN)
    assert patched.status == 422 and (await error(patched))["field"] == "kafka_topics.0"
    got = await (await api.get(path, headers=ADMIN)).json()
    assert got["kafka_topics"] == client["kafka_topics"]  # unchanged


@pytest.mark.parametrize(
    "topics", [["__consumer_offsets"], ["__transaction_state"], ["__cluster_metadata"], ["__*"], ["__consumer.*"]]
)
async def test_kafka_internal_topics_cannot_be_granted(api: Api, topics: list[str]) -> None:
    await assert_refused_both_ways(api, topics)


@pytest.mark.parametrize(
    "topics",
    [
        ["tickd-acks"],  # tickd's ack topic (TICKD_KAFKA_ACK_TOPIC)
        ["tickd-*"],  # a prefix reaching it
        ["ops.audit"],  # under a prefix listed in TICKD_KAFKA_RESERVED_TOPICS
        ["ops.*"],
    ],
)
async def test_tickd_own_topics_cannot_be_granted(store: CassandraStore, topics: list[str]) -> None:
    env = {"TICKD_KAFKA_ACK_TOPIC": "tickd-acks", "TICKD_KAFKA_RESERVED_TOPICS": "ops.*"}
    reserved = ApiSettings.from_env(env).reserved_topics
    async for api in serve(settings(reserved_topics=reserved), store):
        await assert_refused_both_ways(api, topics)


@pytest.mark.parametrize(
    "grant",
    ["", ".", "..", "ünïcode", "topic\u200b", "a" * 250, "a" * 248 + ".*", "a b", "orders*", "*", "x\n", "x/y", 7],
)
async def test_hostile_grants_are_refused_with_400_naming_the_entry(api: Api, grant: Any) -> None:
    """Malformed names are refused by their syntax (400, as every malformed field), before any rule."""
    resp = await register(api, ["billing", grant], 400)
    assert (await error(resp))["field"] == "kafka_topics.1"


async def test_long_and_dotted_grants_are_fine(api: Api) -> None:
    grants = ["a" * 249, "a" * 247 + ".*", "x..y", ".hidden", "a.b.c"]
    client = await (await register(api, grants)).json()
    assert client["kafka_topics"] == sorted(grants)  # kept, in order


async def test_an_overlapping_grant_is_warned_about_without_naming_the_other_client(api: Api) -> None:
    first = await (await register(api, [f"o{uuid.uuid4().hex[:8]}.*"])).json()
    prefix = first["kafka_topics"][0][:-1]
    resp = await register(api, ["billing-x", f"{prefix}fired"])
    warning = resp.headers["X-Tickd-Warning"]
    assert warning.startswith("kafka_topics.1 overlaps") and first["client_id"] not in warning
    quiet = await register(api, [f"q{uuid.uuid4().hex[:8]}"])
    assert "X-Tickd-Warning" not in quiet.headers


async def test_overlaps_are_refused_when_configured(store: CassandraStore) -> None:
    async for api in serve(settings(refuse_grant_overlaps=True), store):
        first = await (await register(api, ["shared.*"])).json()
        resp = await register(api, ["shared.eu.*"], 409)
        found = await error(resp)
        assert found["code"] == "grant_overlaps" and found["field"] == "kafka_topics.0"
        assert first["client_id"] not in found["message"]
        second = await (await register(api, ["solo"])).json()
        path = f"/v1/clients/{second['client_id']}"
        assert (await api.patch(path, json={"kafka_topics": ["solo", "shared.x"]}, headers=ADMIN)).status == 409
        # The first client revokes its grant; then the topic may be granted to the second.
        revoke = await api.patch(f"/v1/clients/{first['client_id']}", json={"kafka_topics": []}, headers=ADMIN)
        assert revoke.status == 200
        assert (await api.patch(path, json={"kafka_topics": ["solo", "shared.x"]}, headers=ADMIN)).status == 200
        # A PATCH keeping a grant it holds is not refused for an overlap that came to be otherwise.
        held = await store.get_client(first["client_id"])
        assert held is not None
        await store.update_client(dataclasses.replace(held, kafka_topics=frozenset({"shared.*"})))
        assert (await api.patch(path, json={"kafka_topics": ["shared.x"]}, headers=ADMIN)).status == 200
        assert (await api.patch(path, json={"kafka_topics": ["shared.x", "shared.y"]}, headers=ADMIN)).status == 409


async def _kafka_letter(api: Api, store: CassandraStore, client_id: str, key: dict[str, str], topic: str) -> DeadLetter:
    body = {"delay_s": 3600, "payload": {}, "callback": {"type": "kafka", "topic": topic}}
    resp = await api.post("/v1/schedules", json=body, headers=key)
    assert resp.status == 201, await resp.text()
    s = await store.get_schedule(client_id, uuid.UUID((await resp.json())["schedule_id"]))
    assert s is not None
    failed_at = timing.truncate_ms(datetime.now(UTC) - timedelta(seconds=60))
    await store.record_outcomes(
        [FireOutcome(client_id, s.schedule_id, s.location, Status.FAILED, 3, failed_at, "broker down")]
    )
    letter = DeadLetter(client_id, s.schedule_id, s.fire_id, failed_at, 3, "broker down", s.callback, s.payload)
    await store.add_dead_letter(letter)
    return letter


async def test_a_redrive_to_a_topic_no_longer_granted_is_refused(api: Api, store: CassandraStore) -> None:
    topic = f"r{uuid.uuid4().hex[:8]}"
    made = await (await register(api, [topic])).json()
    client_id, key = made["client_id"], {"Authorization": f"Bearer {made['api_key']}"}
    letter = await _kafka_letter(api, store, client_id, key, topic)
    revoke = await api.patch(f"/v1/clients/{client_id}", json={"kafka_topics": []}, headers=ADMIN)
    assert revoke.status == 200
    letter_id = f"{timing.to_epoch_ms(letter.failed_at)}-{letter.schedule_id}"
    one = await api.post(f"/v1/dead-letters/{letter_id}/redrive", headers=key)
    assert one.status == 409, await one.text()
    found = await error(one)
    assert found["code"] == "topic_not_allowed" and found["field"] == "callback.topic"
    page = await (await api.post("/v1/dead-letters/redrive", headers=key)).json()
    assert page["redriven"] == [] and [e["code"] for e in page["errors"]] == ["topic_not_allowed"]
    got = await store.get_dead_letter(client_id, letter.failed_at, letter.schedule_id)
    assert got is not None and got.redriven_at is None  # nothing written
    granted = await api.patch(f"/v1/clients/{client_id}", json={"kafka_topics": [topic]}, headers=ADMIN)
    assert granted.status == 200
    assert (await api.post(f"/v1/dead-letters/{letter_id}/redrive", headers=key)).status == 200
