"""OpenTelemetry tracing, shared by the API and the pollers; off unless ``OTEL_TRACES_EXPORTER`` is set.

Off (the default, or ``OTEL_TRACES_EXPORTER=none``): no tracer provider is installed, ``tracer()`` is the
API's no-op tracer, ``on()`` is False and callers skip their span and ``traceparent`` work on that check.
On: ``setup()`` installs an SDK provider whose exporter is named by ``OTEL_TRACES_EXPORTER`` (``otlp``:
OTLP over HTTP, configured by the SDK's own ``OTEL_EXPORTER_OTLP_*`` settings; ``console``: stdout), and
whose service name is ``OTEL_SERVICE_NAME`` or the process's own. Trace context crosses processes as a W3C
``traceparent`` (a create's is stored with its schedule; each callback carries its delivery's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from opentelemetry import context, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tickd.schema.errors import ConfigError
from tickd.schema.model import Schedule

TRACEPARENT = "traceparent"
_PROPAGATOR = TraceContextTextMapPropagator()
_NO_OP = trace.NoOpTracer()
_tracer: trace.Tracer = _NO_OP


def on() -> bool:
    """Tracing is configured: the one cheap check on the hot path."""
    return _tracer is not _NO_OP


def tracer() -> trace.Tracer:
    return _tracer


def setup(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider when ``OTEL_TRACES_EXPORTER`` names an exporter; True if tracing is on."""
    env = os.environ if env is None else env
    name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if name in ("", "none"):
        return False
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def _exporter(name: str) -> SpanExporter:
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        return ConsoleSpanExporter()
    raise ConfigError(f"OTEL_TRACES_EXPORTER must be otlp, console or none, not {name!r}", field="OTEL_TRACES_EXPORTER")


def install(provider: TracerProvider | None, processor: SpanProcessor | None = None) -> None:
    """Trace through ``provider`` (tests: with an in-memory exporter); None turns tracing off again."""
    global _tracer
    if provider is not None and processor is not None:
        provider.add_span_processor(processor)
    _tracer = _NO_OP if provider is None else provider.get_tracer("tickd")


def span(name: str, kind: SpanKind, linked: str | None = None) -> AbstractContextManager[Span | None]:
    """A current span when tracing is on, linked to the ``traceparent`` ``linked`` if given; nothing (and
    no cost) when it is off."""
    if not on():
        return nullcontext()
    return _tracer.start_as_current_span(name, kind=kind, links=link_to(linked))


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span; None when there is no valid one."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def with_traceparent(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the current span's ``traceparent`` when tracing is on (the same dict when off)."""
    traceparent = current_traceparent() if on() else None
    return headers if traceparent is None else {**headers, TRACEPARENT: traceparent}


def extract(headers: Mapping[str, str]) -> context.Context:
    """The trace context of incoming headers (an empty context when they carry none)."""
    return _PROPAGATOR.extract(headers)


@contextmanager
def attached(ctx: context.Context) -> Iterator[None]:
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


def deliver_span(schedule: Schedule) -> AbstractContextManager[Span | None]:
    """The span of one fire's delivery (its attempts are children): a root span linked to the stored
    ``traceparent`` of the request that created the schedule, with the fire's ids to search by."""
    if not on():
        return nullcontext()
    linked = schedule.options.traceparent if schedule.options is not None else None
    attributes = {
        "tickd.client_id": schedule.client_id,
        "tickd.schedule_id": str(schedule.public_id),
        "tickd.fire_id": schedule.fire_id,
    }
    return _tracer.start_as_current_span(
        "deliver", kind=SpanKind.INTERNAL, links=link_to(linked), attributes=attributes
    )


def link_to(traceparent: str | None) -> list[Link]:
    """A link to a stored ``traceparent`` (none if it is absent or not valid)."""
    if not traceparent:
        return []
    found = trace.get_current_span(extract({TRACEPARENT: traceparent})).get_span_context()
    return [Link(found)] if found.is_valid else []
