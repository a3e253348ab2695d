"""Signed callbacks: the poller's signatures (``poller.signing``) against a known answer computed here
with hmac/base64, and against the SDK's subscriber-side ``verify``; the secrets each delivery is signed
with (``poller.signer``)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from tickd_client.webhooks import WebhookVerificationError, sign, verify

from tickd.poller import signing
from tickd.poller.callbacks.http import _with_signature
from tickd.poller.callbacks.kafka import signed_record
from tickd.poller.signer import SigningKeys, SigningStamp, Stamps
from tickd.schema.errors import StoreUnavailable
from tickd.schema.memory import memory_store
from tickd.schema.model import Client, EventOf, HttpCallback, KafkaCallback, Location, Options, Schedule
from tickd.schema.signing import new_signing_secret

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OTHER = new_signing_secret()
NOW = 1_764_000_000
FIRE_AT = datetime(2026, 11, 23, 12, 0, 7, 250_000, tzinfo=UTC)
BODY = b'{"schedule_id":"x","payload":{"a":1}}'


def _expected(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, msg_id.encode() + b"." + str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def _headers(
    secrets: tuple[str, ...], msg_id: str = "fire-1", timestamp: int = NOW, body: bytes = BODY
) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signing.signature(secrets, msg_id, timestamp, body),
    }


def _schedule(secrets: tuple[str, ...] = (SECRET,), *, event: bool = False, kafka: bool = False) -> Schedule:
    sid = uuid.UUID("0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10")
    callback = KafkaCallback(topic="orders") if kafka else HttpCallback(url="https://example.com/cb")
    return Schedule(
        client_id="acme",
        schedule_id=uuid.uuid4() if event else sid,
        location=Location(0, FIRE_AT),
        fire_at=FIRE_AT,
        payload=b'{"a": 1}',
        callback=callback,
        created_at=FIRE_AT,
        options=Options(event=EventOf(sid, 3, 5)) if event else None,
        signing_secrets=secrets,
    )


# -- the signature ------------------------------------------------------------------------------------


def test_known_answer() -> None:
    assert signing.signature((SECRET,), "fire-1", NOW, BODY) == _expected(KEY, "fire-1", NOW, BODY)
    assert sign(SECRET, "fire-1", NOW, BODY) == _expected(KEY, "fire-1", NOW, BODY)


def test_the_standard_webhooks_example_vector() -> None:
    secret, msg_id, body = (
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        b'{"test": 2432232314}',
    )
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert signing.signature((secret,), msg_id, 1614265330, body) == expected
    verify(
        secret,
        {"webhook-id": msg_id, "webhook-timestamp": "1614265330", "webhook-signature": expected},
        body,
        now=1614265330,
    )


def test_new_secrets_are_32_random_bytes() -> None:
    secrets = {new_signing_secret() for _ in range(50)}
    assert len(secrets) == 50
    assert all(s.startswith("whsec_") and len(signing.secret_key(s)) == 32 for s in secrets)


# -- verify ---------------------------------------------------------------------------------------------


def test_a_genuine_delivery_verifies() -> None:
    verify(SECRET, _headers((SECRET,)), BODY, now=NOW)
    verify(SECRET, {k.title(): v for k, v in _headers((SECRET,)).items()}, BODY, now=NOW)  # any case
    verify(SECRET, [(k, v.encode()) for k, v in _headers((SECRET,)).items()], BODY, now=NOW)  # Kafka pairs
    verify(SECRET, _headers((SECRET,)), BODY, now=NOW + 300)  # at the edge of the tolerance


def test_a_tampered_body_fails() -> None:
    with pytest.raises(WebhookVerificationError, match="no webhook-signature matches"):
        verify(SECRET, _headers((SECRET,)), BODY.replace(b"1", b"2"), now=NOW)


def test_a_tampered_id_or_timestamp_fails() -> None:
    for name, value in [("webhook-id", "fire-2"), ("webhook-timestamp", str(NOW + 1))]:
        with pytest.raises(WebhookVerificationError, match="no webhook-signature matches"):
            verify(SECRET, {**_headers((SECRET,)), name: value}, BODY, now=NOW)


def test_another_secret_fails() -> None:
    with pytest.raises(WebhookVerificationError, match="no webhook-signature matches"):
        verify(OTHER, _headers((SECRET,)), BODY, now=NOW)


def test_an_old_timestamp_fails() -> None:
    with pytest.raises(WebhookVerificationError, match="301 s old"):
        verify(SECRET, _headers((SECRET,)), BODY, now=NOW + 301)
    verify(SECRET, _headers((SECRET,)), BODY, now=NOW + 3000, tolerance_s=3600)


def test_a_future_timestamp_fails() -> None:
    with pytest.raises(WebhookVerificationError, match="301 s ahead"):
        verify(SECRET, _headers((SECRET,)), BODY, now=NOW - 301)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_named(missing: str) -> None:
    headers = {k: v for k, v in _headers((SECRET,)).items() if k != missing}
    with pytest.raises(WebhookVerificationError, match=f"missing header\\(s\\): {missing}"):
        verify(SECRET, headers, BODY, now=NOW)


@pytest.mark.parametrize("stamp", ["", "12.5", "-1", "1e9", "١٢٣"])
def test_a_timestamp_that_is_not_integer_seconds_fails(stamp: str) -> None:
    with pytest.raises(WebhookVerificationError):
        verify(SECRET, {**_headers((SECRET,)), "webhook-timestamp": stamp}, BODY, now=NOW)


def test_during_a_rotation_either_secret_verifies() -> None:
    headers = _headers((OTHER, SECRET))
    assert len(headers["webhook-signature"].split(" ")) == 2
    verify(SECRET, headers, BODY, now=NOW)
    verify(OTHER, headers, BODY, now=NOW)
    with pytest.raises(WebhookVerificationError):
        verify(new_signing_secret(), headers, BODY, now=NOW)


def test_signatures_of_another_version_are_ignored() -> None:
    v1 = _headers((SECRET,))["webhook-signature"]
    with pytest.raises(WebhookVerificationError):
        verify(SECRET, {**_headers((SECRET,)), "webhook-signature": "v2" + v1[2:]}, BODY, now=NOW)
    verify(SECRET, {**_headers((SECRET,)), "webhook-signature": f"v1a,xyz {v1}"}, BODY, now=NOW)


def test_a_malformed_secret_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        verify("whsec_not base64!", _headers((SECRET,)), BODY, now=NOW)


# -- what a delivery carries ---------------------------------------------------------------------------


def test_a_fire_is_signed_under_its_fire_id_an_event_under_its_event_id() -> None:
    fire, event = _schedule(), _schedule(event=True)
    assert signing.signed_headers(fire, NOW, BODY)["webhook-id"] == fire.fire_id
    assert event.event_id is not None and signing.signed_headers(event, NOW, BODY)["webhook-id"] == event.event_id
    assert signing.signed_headers(_schedule(()), NOW, BODY) == {}  # no secret (yet): nothing to sign with


def test_http_headers_are_signed_and_a_schedules_own_are_dropped() -> None:
    schedule = _schedule((SECRET, OTHER))
    own = {"Webhook-Signature": "v1,forged", "WEBHOOK-ID": "mine", "X-Kept": "1"}
    headers = _with_signature(own, schedule, BODY)
    assert headers["X-Kept"] == "1" and "Webhook-Signature" not in headers and "WEBHOOK-ID" not in headers
    verify(SECRET, headers, BODY)
    verify(OTHER, headers, BODY)
    assert _with_signature({"Webhook-Id": "kept"}, _schedule(()), BODY) == {"Webhook-Id": "kept"}


def test_a_kafka_record_is_signed_over_its_value() -> None:
    schedule = _schedule(kafka=True)
    record = signed_record(schedule, 2, FIRE_AT)
    assert [name for name, _ in record.headers][-3:] == ["webhook-id", "webhook-timestamp", "webhook-signature"]
    verify(SECRET, record.headers, record.value)
    with pytest.raises(WebhookVerificationError):
        verify(SECRET, record.headers, record.value + b" ")
    assert [n for n, _ in signed_record(_schedule((), kafka=True), 2, FIRE_AT).headers if n.startswith("webhook")] == []


# -- which secrets ------------------------------------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _client(client_id: str = "acme", **secrets: object) -> Client:
    return Client(client_id, 1, True, "h", FIRE_AT, FIRE_AT, **secrets)  # type: ignore[arg-type]


async def test_a_clients_row_is_read_once_per_refresh() -> None:
    store, ticks = memory_store(lambda: FIRE_AT), Ticks()
    await store.create_client(_client(signing_secret=SECRET))
    reads = 0
    real = store.get_client

    async def counted(client_id: str) -> Client | None:
        nonlocal reads
        reads += 1
        return await real(client_id)

    store.get_client = counted  # type: ignore[method-assign]
    keys = SigningKeys(store, 5.0, monotonic=ticks)
    stamp = SigningStamp(keys, lambda: FIRE_AT)
    stamped = await asyncio.gather(*(stamp(_schedule(())) for _ in range(20)))
    assert reads == 1 and {s.signing_secrets for s in stamped} == {(SECRET,)}
    await store.rotate_signing_secret("acme", SECRET, OTHER, FIRE_AT + timedelta(hours=1))
    ticks.now = 4.9
    assert (await stamp(_schedule(()))).signing_secrets == (SECRET,) and reads == 1
    ticks.now = 5.0
    assert (await stamp(_schedule(()))).signing_secrets == (OTHER, SECRET) and reads == 2


async def test_the_previous_secret_stops_signing_at_its_expiry() -> None:
    store = memory_store(lambda: FIRE_AT)
    until = FIRE_AT + timedelta(hours=1)
    await store.create_client(_client(signing_secret=OTHER, signing_secret_previous=SECRET))
    await store.rotate_signing_secret("acme", OTHER, new := new_signing_secret(), until)
    keys = SigningKeys(store, 5.0)
    assert (await SigningStamp(keys, lambda: until - timedelta(seconds=1))(_schedule(()))).signing_secrets == (
        new,
        OTHER,
    )
    assert (await SigningStamp(keys, lambda: until)(_schedule(()))).signing_secrets == (new,)


async def test_a_client_without_a_secret_gets_one_every_node_agrees_on() -> None:
    store = memory_store(lambda: FIRE_AT)
    await store.create_client(_client())  # registered before secrets existed
    one, two = SigningKeys(store, 5.0), SigningKeys(store, 5.0)
    first, second = await one.client("acme"), await two.client("acme")
    assert first is not None and second is not None and first.signing_secret == second.signing_secret
    stored = await store.get_client("acme")
    assert stored is not None and stored.signing_secret == first.signing_secret != ""


async def test_an_unknown_client_is_not_signed_for() -> None:
    stamp = SigningStamp(SigningKeys(memory_store(lambda: FIRE_AT), 5.0))
    assert (await stamp(_schedule(()))).signing_secrets == ()


async def test_a_failed_reread_keeps_the_secrets_last_read() -> None:
    store, ticks = memory_store(lambda: FIRE_AT), Ticks()
    await store.create_client(_client(signing_secret=SECRET))
    keys = SigningKeys(store, 5.0, monotonic=ticks)
    assert (await keys.client("acme")) is not None
    real = store.get_client

    async def down(client_id: str) -> Client | None:
        raise StoreUnavailable("down")

    store.get_client = down  # type: ignore[method-assign]
    ticks.now = 60
    client = await keys.client("acme")
    assert client is not None and client.signing_secret == SECRET
    with pytest.raises(StoreUnavailable):
        await SigningKeys(store, 5.0).client("acme")  # never read: the delivery is retried, not unsigned
    store.get_client = real  # type: ignore[method-assign]


async def test_stamps_apply_in_order() -> None:
    async def first(schedule: Schedule) -> Schedule:
        return dataclasses.replace(schedule, ack_token="t")

    async def second(schedule: Schedule) -> Schedule:
        assert schedule.ack_token == "t"
        return dataclasses.replace(schedule, signing_secrets=(SECRET,))

    stamped = await Stamps(first, second)(_schedule(()))
    assert (stamped.ack_token, stamped.signing_secrets) == ("t", (SECRET,))
