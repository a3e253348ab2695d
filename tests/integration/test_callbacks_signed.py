"""Signed callbacks end to end below the engine: clients and their secrets in the real Cassandra, the
node's router wired as ``tickd-poller`` wires it (ack stamp, signing stamp, the real HTTP and Kafka
dispatchers), and subscribers that check every delivery with the SDK's ``verify``, knowing only the
secret registration made (or a rotation)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tickd_client.webhooks import WebhookVerificationError, verify

from tests.integration.conftest import make_client
from tests.integration.test_callbacks_kafka import consume
from tickd.poller.acks import AckSecrets, AckSigner
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpDispatcher, HttpSettings
from tickd.poller.callbacks.kafka import KafkaDispatcher, KafkaSettings
from tickd.poller.delivery import CallbackRouter
from tickd.poller.signer import SigningKeys, SigningStamp, Stamps
from tickd.schema.cassandra import CassandraStore
from tickd.schema.model import Callback, EventOf, HttpCallback, KafkaCallback, Location, Options, Schedule
from tickd.schema.signing import new_signing_secret

pytestmark = pytest.mark.integration

FAST = RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05, inline_budget_s=5.0)
REFRESH_S = 0.2


class Subscriber:
    """An HTTP endpoint that verifies each delivery with the secrets it was given; 401 if none verifies.
    Answers 503 to the first delivery of a path listed in ``fail_once``."""

    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.verified: list[tuple[dict[str, str], bytes]] = []
        self.refused: list[str] = []
        self.fail_once: set[str] = set()
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self.server = TestServer(app, host="127.0.0.1")

    async def _handle(self, request: web.Request) -> web.Response:
        body, headers = await request.read(), dict(request.headers)
        errors = []
        for secret in self.secrets:
            try:
                verify(secret, request.headers, body)
            except WebhookVerificationError as exc:
                errors.append(str(exc))
        if len(errors) == len(self.secrets):
            self.refused.append("; ".join(errors) or "no secret")
            return web.Response(status=401)
        self.verified.append((headers, body))
        if request.path in self.fail_once:
            self.fail_once.discard(request.path)
            return web.Response(status=503)
        return web.Response(status=204)


@pytest.fixture
async def subscriber() -> AsyncIterator[Subscriber]:
    s = Subscriber()
    await s.server.start_server()
    yield s
    await s.server.close()


@pytest.fixture
async def router(store: CassandraStore) -> AsyncIterator[CallbackRouter]:
    bootstrap = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    http = HttpDispatcher(HttpSettings(allow_private=True), FAST)
    kafka = KafkaDispatcher(KafkaSettings(bootstrap=bootstrap, attempt_timeout_s=30.0), FAST)
    stamp = Stamps(AckSigner(AckSecrets(store)), SigningStamp(SigningKeys(store, REFRESH_S)))
    r = CallbackRouter(http, kafka, stamp=stamp)
    yield r
    await r.close()


Build = Callable[..., Schedule]


@pytest.fixture
def fire(client_id: str) -> Build:
    def build(callback: Callback, *, event: int | None = None) -> Schedule:
        at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        sid = uuid.uuid4()
        options = None if event is None else Options(event=EventOf(uuid.uuid4(), event, 4))
        return Schedule(client_id, sid, Location(0, at), at, b'{"order": 42}', callback, at, options=options)

    return build


async def _register(store: CassandraStore, client_id: str) -> str:
    secret = new_signing_secret()
    assert await store.create_client(dataclasses.replace(make_client(client_id), signing_secret=secret))
    return secret


async def test_every_http_delivery_verifies_with_the_shown_secret(
    store: CassandraStore, client_id: str, router: CallbackRouter, subscriber: Subscriber, fire: Build
) -> None:
    subscriber.secrets = [await _register(store, client_id)]
    url = str(subscriber.server.make_url("/"))
    plain, event, retried = (
        fire(HttpCallback(url=url + "plain")),
        fire(HttpCallback(url=url + "event"), event=2),
        fire(HttpCallback(url=url + "retried", headers={"webhook-signature": "v1,forged"})),
    )
    subscriber.fail_once.add("/retried")
    results = await asyncio.gather(*(router.deliver(s, 1, datetime.now(UTC)) for s in (plain, event, retried)))
    assert [r.ok for r in results] == [True, True, True] and results[2].attempts == 2
    assert subscriber.refused == [] and len(subscriber.verified) == 4  # the retry is signed again
    ids = {headers["webhook-id"] for headers, _ in subscriber.verified}
    assert ids == {plain.fire_id, event.event_id, retried.fire_id}
    for headers, body in subscriber.verified:
        assert headers["webhook-id"] in {json.loads(body)["fire_id"], json.loads(body).get("event_id")}
        assert len(headers["webhook-signature"].split(" ")) == 1


async def test_a_replayed_delivery_with_another_body_is_refused(
    store: CassandraStore, client_id: str, router: CallbackRouter, subscriber: Subscriber, fire: Build
) -> None:
    subscriber.secrets = [await _register(store, client_id)]
    url = str(subscriber.server.make_url("/x"))
    assert (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok
    [(headers, body)] = subscriber.verified
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body.replace(b"42", b"43"), headers=headers) as resp:
            assert resp.status == 401
        async with session.post(url, data=body, headers=headers) as resp:
            assert (
                resp.status == 204
            )  # the same bytes again: authentic (deduplicating on webhook-id is the subscriber's)
    assert len(subscriber.refused) == 1 and "no webhook-signature matches" in subscriber.refused[0]


async def test_a_rotation_signs_with_both_until_the_old_secret_expires(
    store: CassandraStore, client_id: str, router: CallbackRouter, subscriber: Subscriber, fire: Build
) -> None:
    old = await _register(store, client_id)
    url = str(subscriber.server.make_url("/r"))
    new = new_signing_secret()
    assert await store.rotate_signing_secret(client_id, old, new, datetime.now(UTC) + timedelta(seconds=3))
    await asyncio.sleep(REFRESH_S)  # the pollers' refresh of the client
    for secrets in ([old], [new]):  # a subscriber not switched yet, and one switched already
        subscriber.secrets = secrets
        assert (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok
    assert subscriber.refused == []
    assert all(len(h["webhook-signature"].split(" ")) == 2 for h, _ in subscriber.verified)
    await asyncio.sleep(3)  # the old secret expired: signed by the new one only
    subscriber.secrets = [old]
    assert not (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok
    subscriber.secrets = [new]
    assert (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok
    assert len(subscriber.verified[-1][0]["webhook-signature"].split(" ")) == 1


async def test_a_client_registered_before_secrets_is_signed_with_the_one_it_gets(
    store: CassandraStore, client_id: str, router: CallbackRouter, subscriber: Subscriber, fire: Build
) -> None:
    assert await store.create_client(make_client(client_id))  # no signing secret: a row from before 006
    url = str(subscriber.server.make_url("/legacy"))
    subscriber.secrets = [new_signing_secret()]  # not the one: refused, so not delivered
    assert not (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok
    client = await store.get_client(client_id)
    assert client is not None and client.signing_secret.startswith("whsec_")
    subscriber.secrets = [client.signing_secret]
    assert (await router.deliver(fire(HttpCallback(url=url)), 1, datetime.now(UTC))).ok


async def test_kafka_records_carry_the_signature_of_their_value(
    store: CassandraStore, client_id: str, router: CallbackRouter, fire: Build
) -> None:
    secret = await _register(store, client_id)
    topic = f"tickd-test-{uuid.uuid4().hex[:12]}"
    sent = [fire(KafkaCallback(topic=topic)), fire(KafkaCallback(topic=topic), event=1)]
    assert all(r.ok for r in await asyncio.gather(*(router.deliver(s, 1, datetime.now(UTC)) for s in sent)))
    bootstrap = os.environ.get("TICKD_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    records = await consume(KafkaSettings(bootstrap=bootstrap), topic, len(sent))
    for record in records:
        verify(secret, record.headers, record.value)
        with pytest.raises(WebhookVerificationError):
            verify(secret, record.headers, record.value.replace(b"42", b"43"))
    assert {dict(r.headers)["webhook-id"].decode() for r in records} == {sent[0].fire_id, sent[1].event_id}
