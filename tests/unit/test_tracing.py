"""Tracing (``schema.tracing``): the API over the in-memory store and the HTTP dispatcher, spans recorded by
an in-memory exporter. A create's ``traceparent`` is stored with its schedule; the fire's delivery span
links to it, and the callback carries the delivery's own ``traceparent``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime

import pytest
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.integration.api_helpers import ADMIN, ADMIN_TOKEN, Api, schedule_body, serve
from tickd.poller.callbacks.backoff import RetryPolicy
from tickd.poller.callbacks.http import HttpDispatcher, HttpSettings
from tickd.poller.callbacks.kafka import _traced, signed_record
from tickd.schema import tracing
from tickd.schema.memory import memory_store
from tickd.schema.model import KafkaCallback, Location, Schedule
from tickd.schema.store import Store
from tickd.schema.traced import traced
from tickd.service.settings import ApiSettings

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
Got = asyncio.Queue[dict[str, str]]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(TracerProvider(), SimpleSpanProcessor(exporter))
    yield exporter
    tracing.install(None)


@pytest.fixture
async def subscriber() -> AsyncIterator[tuple[str, Got]]:
    got: Got = asyncio.Queue()

    async def hook(request: web.Request) -> web.Response:
        await got.put(dict(request.headers))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/hook", got
    await runner.cleanup()


def _settings() -> ApiSettings:
    return ApiSettings(admin_token=ADMIN_TOKEN, callback_allow_private=True)


async def _create_and_fire(store: Store, url: str, headers: dict[str, str]) -> uuid.UUID:
    """Register a client, create a schedule through the API (with ``headers``), deliver it once."""
    async for api in serve(_settings(), store):
        key = await _register(api)
        body = schedule_body(callback={"type": "http", "url": url})
        resp = await api.post("/v1/schedules", json=body, headers={**key, **headers})
        assert resp.status == 201, await resp.text()
        client_id, schedule_id = key["X-Client"], uuid.UUID((await resp.json())["schedule_id"])
    row = await store.get_schedule(client_id, schedule_id)
    assert row is not None
    async with HttpDispatcher(HttpSettings(allow_private=True), RetryPolicy(max_attempts=1)) as http:
        result = await http.deliver(row, 1, datetime.now(UTC))
    assert result.ok, result
    return schedule_id


async def _register(api: Api) -> dict[str, str]:
    client_id = f"t{uuid.uuid4().hex[:12]}"
    resp = await api.post("/v1/clients", json={"client_id": client_id, "poller_count": 1}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return {"Authorization": f"Bearer {(await resp.json())['api_key']}", "X-Client": client_id}


def span_tree(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an indented tree (children under their parent, in start order), links shown."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans}
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in by_parent.get(parent, []):
            kind = s.kind.name.lower()
            extra = " ".join(f"{k}={v}" for k, v in (s.attributes or {}).items())
            links = " ".join(f"link->{link.context.trace_id:032x}" for link in s.links)
            lines.append(f"{'  ' * depth}{s.name} [{kind}] trace={s.context.trace_id:032x} {extra} {links}".rstrip())
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


async def test_fire_links_to_the_create_and_the_callback_carries_its_trace(
    spans: InMemorySpanExporter, subscriber: tuple[str, Got]
) -> None:
    url, got = subscriber
    store = traced(memory_store(lambda: datetime.now(UTC)))
    schedule_id = await _create_and_fire(store, url, {"traceparent": INCOMING})
    recorded = spans.get_finished_spans()
    print("\n" + span_tree(recorded))

    (create,) = [s for s in recorded if s.name == "POST /v1/schedules"]
    assert create.kind is SpanKind.SERVER and f"{create.context.trace_id:032x}" == TRACE_ID
    assert create.attributes is not None and create.attributes["http.response.status_code"] == 201
    under_create = [s for s in recorded if s.parent is not None and s.parent.span_id == create.context.span_id]
    assert any(s.name.startswith("store.create_schedule") and s.kind is SpanKind.CLIENT for s in under_create)

    (deliver,) = [s for s in recorded if s.name == "deliver"]
    assert deliver.parent is None and f"{deliver.links[0].context.trace_id:032x}" == TRACE_ID
    assert deliver.attributes is not None and deliver.attributes["tickd.schedule_id"] == str(schedule_id)
    assert deliver.links[0].context.span_id == create.context.span_id
    (attempt,) = [s for s in recorded if s.name == "callback.http"]
    assert attempt.parent is not None and attempt.parent.span_id == deliver.context.span_id

    headers = got.get_nowait()
    sent_trace, sent_span = headers["traceparent"].split("-")[1:3]
    assert sent_trace == f"{deliver.context.trace_id:032x}" != TRACE_ID
    assert sent_span == f"{attempt.context.span_id:016x}"


async def test_off_records_nothing_and_sends_no_traceparent(subscriber: tuple[str, Got]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # never installed: tracing stays off
    assert not tracing.on() and not tracing.setup("tickd-test", {})
    url, got = subscriber
    store = memory_store(lambda: datetime.now(UTC))
    assert traced(store) is store
    await _create_and_fire(store, url, {"traceparent": INCOMING})
    assert exporter.get_finished_spans() == ()
    assert "traceparent" not in {name.lower() for name in got.get_nowait()}


def _kafka_schedule() -> Schedule:
    at = datetime.now(UTC)
    callback = KafkaCallback(topic="orders.fired")
    return Schedule("c1", uuid.uuid4(), Location(0, at), at, b"{}", callback, at)


def test_a_kafka_record_carries_the_attempt_traceparent_only_when_on(spans: InMemorySpanExporter) -> None:
    schedule = _kafka_schedule()
    with tracing.deliver_span(schedule), tracing.span("callback.kafka", SpanKind.PRODUCER) as attempt:
        assert attempt is not None
        record = _traced(signed_record(schedule, 1, datetime.now(UTC)))
    (traceparent,) = [v.decode() for k, v in record.headers if k == "traceparent"]
    assert traceparent.split("-")[2] == f"{attempt.get_span_context().span_id:016x}"
    tracing.install(None)
    with tracing.span("callback.kafka", SpanKind.PRODUCER) as off:
        assert off is None
        record = _traced(signed_record(schedule, 1, datetime.now(UTC)))
    assert "traceparent" not in {k for k, _ in record.headers}
