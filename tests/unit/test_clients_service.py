"""``service.clients.ClientAdmin``, the admin's rules on clients, called directly over the in-memory store:
no aiohttp, no HTTP. What the handlers add (auth, decoding, the answer's shape) is the API tier's."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from tickd.schema.errors import AlreadyExists, Conflict, NotFound
from tickd.schema.memory import memory_store
from tickd.schema.model import Client
from tickd.service.auth import hash_secret
from tickd.service.clients import ClientAdmin
from tickd.service.errors import Invalid
from tickd.service.settings import ApiSettings
from tickd.service.validation import ClientPatch

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def admin(**settings: object) -> tuple[ClientAdmin, dict[str, Client]]:
    remembered: dict[str, Client] = {}
    store = memory_store(lambda: datetime.now(UTC))
    service = ClientAdmin(
        store, ApiSettings(**settings), defaultdict(asyncio.Lock), lambda c: remembered.update({c.client_id: c})
    )
    return service, remembered


async def test_register_makes_an_active_client_with_its_key_and_secrets_and_refuses_the_id_again() -> None:
    service, remembered = admin()
    made = await service.register("orders", 4, ["orders.*"], AT)
    client = made.client
    assert (client.poller_count, client.poller_span, client.active) == (4, 4, True)
    assert client.api_key_hash == hash_secret(made.api_key.split(".", 1)[1]) and made.api_key.startswith("orders.")
    assert client.signing_secret and client.ack_secret and client.kafka_topics == frozenset({"orders.*"})
    assert await service.get("orders") == client and remembered["orders"] == client and made.warning is None
    with pytest.raises(AlreadyExists):
        await service.register("orders", 2, [], AT)
    assert (await service.get("orders")).poller_count == 4  # untouched


async def test_lowering_the_quota_keeps_the_span_so_old_pollers_drain() -> None:
    service, _ = admin()
    await service.register("c", 8, [], AT)
    later = AT + timedelta(minutes=1)
    lowered = (await service.change("c", ClientPatch(poller_count=3), later)).client
    assert (lowered.poller_count, lowered.poller_span, lowered.resized_at) == (3, 8, later)
    raised = (await service.change("c", ClientPatch(poller_count=5), later + timedelta(minutes=1))).client
    assert (raised.poller_count, raised.poller_span, raised.resized_at) == (5, 8, later)  # span never lowered here
    with pytest.raises(Invalid, match="at least one"):
        await service.change("c", ClientPatch(), later)
    with pytest.raises(NotFound):
        await service.change("nobody", ClientPatch(active=False), later)


async def test_grants_refuse_reserved_topics_and_warn_about_overlaps_or_refuse_them_when_configured() -> None:
    service, _ = admin()
    await service.register("a", 1, ["shared.*"], AT)
    made = await service.register("b", 1, ["x", "shared.events"], AT)
    assert made.warning == "kafka_topics.1 overlaps a Kafka grant another client holds"
    with pytest.raises(Invalid) as reserved:
        await service.change("b", ClientPatch(kafka_topics=["__consumer_offsets"]), AT)
    assert reserved.value.code == "topic_reserved"
    strict, _ = admin(refuse_grant_overlaps=True)
    await strict.register("a", 1, ["shared.*"], AT)
    with pytest.raises(Conflict):
        await strict.register("b", 1, ["shared.events"], AT)
    with pytest.raises(NotFound):
        await strict.get("b")  # refused whole: nothing written


async def test_key_rotation_replaces_the_key_and_secret_rotation_keeps_the_previous_for_the_overlap() -> None:
    service, remembered = admin(signing_overlap_s=3600)
    made = await service.register("c", 1, [], AT)
    rotated = await service.rotate_key("c", AT)
    assert rotated.api_key != made.api_key and remembered["c"].api_key_hash == rotated.client.api_key_hash
    secret = await service.rotate_signing_secret("c", AT)
    assert secret.secret != made.client.signing_secret and secret.previous_until == AT + timedelta(hours=1)
    stored = await service.get("c")
    assert (stored.signing_secret, stored.signing_secret_previous) == (secret.secret, made.client.signing_secret)
    no_overlap, _ = admin(signing_overlap_s=0)
    await no_overlap.register("c", 1, [], AT)
    assert (await no_overlap.rotate_signing_secret("c", AT)).previous_until is None  # the old one stops at once
    with pytest.raises(NotFound):
        await service.rotate_key("nobody", AT)
