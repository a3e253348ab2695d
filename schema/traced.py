"""``TracedStore``: a Store that opens a client span around every call of the store it wraps.

It delegates by name instead of restating the port's 50-odd methods, so a method added to the port is
traced without an edit here. Only awaited calls get a span; ``read_minute`` (an async iterator, one
call per page) is passed through as it is. Entry points wrap their store with ``traced()``, which
returns the store itself when tracing is off.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, cast

from opentelemetry.trace import SpanKind

from tickd.schema import tracing
from tickd.schema.store import Store

_UNTRACED = frozenset({"read_minute", "read_minute_stamps", "close"})


class TracedStore:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name in _UNTRACED or name.startswith("_") or not callable(attribute):
            return attribute
        traced = _traced(name, attribute)
        setattr(self, name, traced)  # looked up once per method
        return traced


def _traced(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    span_name = f"store.{name}"

    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        with tracing.tracer().start_as_current_span(span_name, kind=SpanKind.CLIENT):
            return await method(*args, **kwargs)

    return call


def traced(store: Store) -> Store:
    """``store`` with a span per call when tracing is on; ``store`` itself when it is off."""
    return cast(Store, TracedStore(store)) if tracing.on() else store
