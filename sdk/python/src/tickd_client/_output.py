"""How the CLI prints answers: ``json`` (the answer as JSON, for scripts), ``table`` (for people: a list
shows the columns most wanted) or ``wide`` (a list shows every field as a column)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickd_client.models import (
    AuditRecord,
    BatchItem,
    BulkJob,
    Calendar,
    Client,
    DeadLetter,
    Occurrence,
    Policy,
    Run,
    Schedule,
)

# The columns of a list, per kind of row; a single object prints all its fields.
COLUMNS: dict[type, tuple[str, ...]] = {
    Client: ("client_id", "poller_count", "poller_span", "active", "kafka_topics"),
    Schedule: ("schedule_id", "status", "fire_at", "attempts", "last_error", "tags"),
    Run: ("fire_id", "nominal_at", "status", "attempts", "lateness_s", "last_error"),
    Policy: ("name", "max_in_flight", "release_timeout_s", "in_flight"),
    Calendar: ("name", "version", "timezone", "dates", "ranges", "weekdays", "updated_at"),
    BatchItem: ("index", "schedule_id", "status", "fire_at", "error"),
    Occurrence: ("utc", "local", "timezone"),
    AuditRecord: ("at", "actor", "action", "target", "version", "request_id"),
    DeadLetter: ("dead_letter_id", "fire_id", "failed_at", "attempts", "last_error", "redriven_due_at"),
    BulkJob: ("job_id", "action", "state", "dry_run", "matched", "changed", "unchanged", "failed", "created_at"),
}


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as objects, times in RFC 3339."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def render(value: Any, output: str) -> str:
    if output == "json":
        return json.dumps(plain(value), indent=2, ensure_ascii=False)
    if isinstance(value, list):
        return _table(value, wide=output == "wide")
    return _fields(plain(value))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict) and value.keys() == {"from", "to"}:  # a calendar's range, as --range takes it
        return f"{_cell(value['from'])}/{_cell(value['to'])}"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


# Nested views a single object shows field by field (``pause.until  ...``) rather than as one JSON cell.
_SPREAD = frozenset({"pause", "debounce"})


def _fields(data: Mapping[str, Any]) -> str:
    shown: dict[str, Any] = {}
    for name, value in data.items():
        if name in _SPREAD and isinstance(value, Mapping):
            shown.update({f"{name}.{inner}": v for inner, v in value.items() if v is not None})
        elif value is not None:
            shown[name] = value
    width = max((len(name) for name in shown), default=0)
    return "\n".join(f"{name.ljust(width)}  {_cell(value)}" for name, value in shown.items())


def _table(rows: Sequence[Any], wide: bool = False) -> str:
    if not rows:
        return "(none)"
    first = rows[0]
    data = [plain(row) for row in rows]
    if isinstance(first, Mapping) or wide:
        columns = tuple(dict.fromkeys(name for row in data for name in row))  # every field, in first-seen order
    else:
        columns = COLUMNS.get(type(first), ())
    cells = [list(columns)] + [[_cell(row.get(c)) for c in columns] for row in data]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)
