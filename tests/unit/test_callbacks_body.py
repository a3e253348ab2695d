import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from tickd.poller import delivery
from tickd.poller.delivery import CallbackRouter, DeliveryResult
from tickd.schema.model import HttpCallback, KafkaCallback, Location, Schedule

FIRE_AT = datetime(2025, 3, 30, 1, 30, 15, 123456, tzinfo=UTC)
FIRED_AT = datetime(2025, 3, 30, 1, 30, 15, 987000, tzinfo=UTC)
PAYLOAD = b'{"z": 1,   "a": [1.50, "\\u00e9"], "nested": {"k": null}}'


def make(payload: bytes = PAYLOAD, headers: dict[str, str] | None = None) -> Schedule:
    return Schedule(
        client_id="acme",
        schedule_id=uuid.UUID("0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10"),
        location=Location(3, FIRE_AT),
        fire_at=FIRE_AT,
        payload=payload,
        callback=HttpCallback(url="https://example.com/cb", headers=headers or {}),
        created_at=FIRE_AT - timedelta(hours=1),
    )


def test_body_fields() -> None:
    body = json.loads(delivery.encode_body(make(), 2, FIRED_AT))
    assert body == {
        "schedule_id": "0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10",
        "fire_id": "0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10:1743298215123",
        "client_id": "acme",
        "fire_at": "2025-03-30T01:30:15.123Z",
        "fired_at": "2025-03-30T01:30:15.987Z",
        "attempt": 2,
        "payload": {"z": 1, "a": [1.5, "é"], "nested": {"k": None}},
    }


def test_payload_is_embedded_verbatim() -> None:
    raw = delivery.encode_body(make(), 1, FIRED_AT)
    assert raw.endswith(b'"payload":' + PAYLOAD + b"}")


def test_empty_payload_is_null() -> None:
    assert json.loads(delivery.encode_body(make(payload=b""), 1, FIRED_AT))["payload"] is None


def test_times_are_utc_with_z_whatever_the_zone() -> None:
    eastern = FIRED_AT.astimezone(timezone(timedelta(hours=-5)))
    assert json.loads(delivery.encode_body(make(), 1, eastern))["fired_at"] == "2025-03-30T01:30:15.987Z"
    assert delivery.rfc3339_ms(datetime(2025, 1, 1, tzinfo=UTC)) == "2025-01-01T00:00:00.000Z"


def test_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        delivery.encode_body(make(), 1, datetime(2025, 1, 1))  # noqa: DTZ001


def test_fire_id_is_constant_across_attempts() -> None:
    schedule = make()
    ids = set()
    for attempt in range(1, 6):
        ids.add(json.loads(delivery.encode_body(schedule, attempt, FIRED_AT + timedelta(seconds=attempt)))["fire_id"])
        ids.add(delivery.http_headers(schedule, schedule.callback, attempt)[delivery.FIRE_ID_HEADER])  # type: ignore[arg-type]
        ids.add(dict(delivery.kafka_headers(schedule, attempt))[delivery.FIRE_ID_HEADER].decode())
    assert ids == {schedule.fire_id}


def test_http_headers() -> None:
    schedule = make(headers={"Authorization": "Bearer t", "X-Trace": "1"})
    assert delivery.http_headers(schedule, schedule.callback, 3) == {  # type: ignore[arg-type]
        "Authorization": "Bearer t",
        "X-Trace": "1",
        "Content-Type": "application/json",
        "X-Tickd-Schedule-Id": str(schedule.schedule_id),
        "X-Tickd-Fire-Id": schedule.fire_id,
        "X-Tickd-Attempt": "3",
    }


def test_callback_headers_cannot_override_tickd_headers() -> None:
    forged = {
        "X-Tickd-Fire-Id": "forged",
        "x-tickd-attempt": "99",
        "X-TICKD-SCHEDULE-ID": "forged",
        "X-Tickd-Whatever": "forged",
        "content-type": "text/plain",
        "Content-Length": "1",
        "Host": "internal",
    }
    schedule = make(headers=forged)
    headers = delivery.http_headers(schedule, schedule.callback, 1)  # type: ignore[arg-type]
    assert {name.lower() for name in headers} == {
        "content-type",
        "x-tickd-schedule-id",
        "x-tickd-fire-id",
        "x-tickd-attempt",
    }
    assert headers["X-Tickd-Fire-Id"] == schedule.fire_id
    assert headers["X-Tickd-Attempt"] == "1"
    assert headers["Content-Type"] == "application/json"


def test_kafka_key_and_headers() -> None:
    schedule = make()
    assert delivery.kafka_key(schedule) == b"0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10"
    assert delivery.kafka_headers(schedule, 4) == [
        ("X-Tickd-Schedule-Id", b"0b6f0d44-8ad4-4c43-a8a6-3f6b8c8e8f10"),
        ("X-Tickd-Fire-Id", schedule.fire_id.encode()),
        ("X-Tickd-Attempt", b"4"),
    ]


def test_body_is_the_same_json_msgspec_decodes() -> None:
    decoded = msgspec.json.decode(delivery.encode_body(make(), 1, FIRED_AT))
    assert list(decoded) == ["schedule_id", "fire_id", "client_id", "fire_at", "fired_at", "attempt", "payload"]


class Recorder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[Schedule] = []
        self.closed = False

    async def deliver(self, schedule: Schedule, attempt: int, fired_at: datetime) -> DeliveryResult:
        self.seen.append(schedule)
        return DeliveryResult.delivered(attempt)

    async def close(self) -> None:
        self.closed = True


async def test_router_routes_by_callback_type() -> None:
    http, kafka = Recorder("http"), Recorder("kafka")
    router = CallbackRouter(http, kafka)
    to_http = make()
    to_kafka = Schedule(**{**_fields(to_http), "callback": KafkaCallback(topic="t")})
    assert (await router.deliver(to_http, 1, FIRED_AT)).ok
    assert (await router.deliver(to_kafka, 1, FIRED_AT)).ok
    assert (http.seen, kafka.seen) == ([to_http], [to_kafka])
    await router.close()
    assert http.closed and kafka.closed


def _fields(schedule: Schedule) -> dict[str, object]:
    return {name: getattr(schedule, name) for name in Schedule.__dataclass_fields__}
