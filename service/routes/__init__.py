"""HTTP handlers, one module per resource, each operation declared on its handler (``declare``);
``service.app`` mounts ``operations()`` and ``service.openapi`` publishes them."""

from __future__ import annotations

from tickd.service.declare import Operation
from tickd.service.routes import (
    admin,
    audit,
    bulk,
    calendars,
    clients,
    dead_letters,
    keyed,
    notices,
    ops,
    schedules,
    stats,
    throttle,
    ui,
)

# The order of the API reference (and of bench-isolation's rows): the client API, then operations.
_MODULES = (clients, schedules, keyed, bulk, stats, dead_letters, throttle, calendars, audit, notices, admin, ui, ops)


def operations() -> tuple[Operation, ...]:
    """Every operation the API serves: module by module in the order above, each in declaration order."""
    return tuple(op for module in _MODULES for op in module.routes.operations)
