"""The app factory: ``create_app(settings, store)``; ``service.main`` runs it, tests call it."""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

import structlog
from aiohttp import web
from opentelemetry.trace import SpanKind

from tickd.schema import deadline, tracing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.settings import StoreSettings
from tickd.schema.store import Store
from tickd.schema.traced import traced
from tickd.service import audit, declare, keys, limits, refusals
from tickd.service.auth import Authenticator, ClientCache
from tickd.service.bulk import BulkRunner
from tickd.service.creates import CreateCombiner
from tickd.service.errors import Handler, error_middleware
from tickd.service.metrics import ApiMetrics
from tickd.service.routes import operations, ops, ui
from tickd.service.serial import KeyedLocks
from tickd.service.settings import ApiSettings
from tickd.service.targets import TargetGuard
from tickd.service.validation import request_types

# Generated request ids must be unique, not unguessable: a random per-process prefix and a counter
# (a uuid4 per request was ~5% of the API's CPU per create in make bench-api).
_REQUEST_IDS = (f"{uuid.uuid4().hex[:16]}{n:08x}" for n in itertools.count())
# A client's request id is echoed and logged only if it is short and plain; otherwise one is generated.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind a request id to every log line of this request; echo it back."""
    given = request.headers.get("X-Request-Id", "")
    request_id = given if _REQUEST_ID.fullmatch(given) else next(_REQUEST_IDS)
    request[audit.REQUEST_ID] = request_id
    with structlog.contextvars.bound_contextvars(request_id=request_id):
        response = await handler(request)
    response.headers["X-Request-Id"] = request_id
    return response


@web.middleware
async def store_budget(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's store requests share TICKD_STORE_BUDGET_S, so a slow store is a timely 503."""
    with deadline.budget(request.app[keys.SETTINGS].store_budget_s):
        return await handler(request)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@web.middleware
async def trace_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One server span per request, named by route, a child of the caller's ``traceparent`` if it sent one."""
    if not tracing.on():
        return await handler(request)
    resource = request.match_info.route.resource
    # Bounded names: a client can send any method, and an unmatched path is any string.
    method = request.method if request.method in _METHODS else "OTHER"
    name = f"{method} {resource.canonical if resource is not None else 'unmatched'}"
    with (
        tracing.attached(tracing.extract(request.headers)),
        tracing.tracer().start_as_current_span(name, kind=SpanKind.SERVER) as span,
    ):
        span.set_attribute("http.request.method", method)
        response = await handler(request)
        span.set_attribute("http.response.status_code", response.status)
        return response


def create_app(
    settings: ApiSettings, store: Store | None = None, store_settings: StoreSettings | None = None
) -> web.Application:
    """The API app. With no ``store``, one is connected (from ``store_settings``) in a cleanup context."""
    metrics = ApiMetrics()
    refusals.install()
    app = web.Application(
        middlewares=[metrics.middleware(), request_context, trace_request, error_middleware, store_budget],
        client_max_size=settings.max_body_bytes,
        handler_args={
            "max_line_size": settings.max_line_bytes,
            "max_field_size": settings.max_line_bytes,
            "max_headers": settings.max_headers,
            "keepalive_timeout": settings.keepalive_s,
        },
    )
    app[keys.SETTINGS] = settings
    app[keys.TYPES] = request_types(settings)
    app[keys.METRICS] = metrics
    app[keys.LIMITER] = limits.create_limiter(settings)
    app[keys.TARGETS] = TargetGuard.from_settings(settings)
    app.on_cleanup.append(_close_targets)
    app[keys.ADMIN_LOCKS] = defaultdict(asyncio.Lock)
    app[keys.KEY_LOCKS] = KeyedLocks()
    if store is not None:
        _use_store(app, store)
    else:
        app.cleanup_ctx.append(_connected_store(store_settings or StoreSettings.from_env()))
    if settings.bulk_runner:
        app.cleanup_ctx.append(_bulk_runner)
    declared = operations()
    declare.mount(app, declared)
    app.middlewares.append(declare.no_query_guard(declared))  # inside error_middleware: its 400 is answered as any
    app[ops.OPERATIONS] = declared
    ui.setup(app)
    ops.setup(app)
    return app


async def _bulk_runner(app: web.Application) -> AsyncIterator[None]:
    """Run the bulk jobs this replica takes (``service.bulk``) while the app serves."""
    task = asyncio.create_task(BulkRunner(app).run())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _use_store(app: web.Application, store: Store) -> None:
    settings = app[keys.SETTINGS]
    app[keys.STORE] = store
    cache = ClientCache(store, settings.client_cache_s, settings.client_cache_max, settings.client_cache_misses_max)
    reads, failures = limits.read_limiter(settings), limits.auth_failure_limiter(settings)
    app[keys.AUTH] = Authenticator(settings.admin_token, cache, reads=reads, failures=failures)
    app[keys.CREATES] = CreateCombiner(store, settings.write_group, settings.batch_max_bytes)


async def _close_targets(app: web.Application) -> None:
    app[keys.TARGETS].close()


def _connected_store(store_settings: StoreSettings) -> Callable[[web.Application], AsyncIterator[None]]:
    async def connect(app: web.Application) -> AsyncIterator[None]:
        store = await CassandraStore.connect(store_settings)
        app[keys.METRICS].watch_store(store.request_counts)
        _use_store(app, traced(store))
        yield
        await store.close()

    return connect
