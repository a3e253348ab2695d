"""Query strings, path parameters and headers, parsed the typed way bodies are: one msgspec Struct per
operation and place, whose field names are the parameter names (``service.openapi`` publishes the same
Structs as the operation's parameters). Each error names the parameter: 400 for a value the schema
refuses (or a parameter given twice), 422 for a cursor this API did not hand out.
"""

from __future__ import annotations

import functools
import re
import uuid
from typing import Annotated, Literal, TypeVar

import msgspec
from aiohttp import web
from msgspec import UNSET, Meta, Struct, UnsetType

from tickd.schema.errors import InvalidInput
from tickd.schema.model import ListCursor
from tickd.service.errors import Invalid, Malformed
from tickd.service.validation import NAME_PATTERN, TAG_FILTER_PATTERN, TARGET_PATTERN, Moment, convert, worded

T = TypeVar("T")

CURSOR_PATTERN = worded(r"^[A-Za-z0-9_-]{1,128}(?!\n)$", "the next_cursor of a previous page, as it was given")
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What ``schema.events.event_schedule_id`` reads: a schedule id, the fire's epoch ms, the event's index.
EVENT_ID_PATTERN = worded(
    rf"^{_UUID}:[0-9]{{1,15}}:[0-9]{{1,7}}(?!\n)$",
    "an event id as delivered: <schedule_id (lowercase UUID)>:<epoch ms>:<index>",
)
IDEMPOTENCY_KEY_PATTERN = worded(r"^[\x20-\x7e]{1,255}(?!\n)$", "1-255 printable ASCII characters")

Cursor = Annotated[str, Meta(pattern=CURSOR_PATTERN, description="next_cursor of the previous page")]
Limit = Annotated[int, Meta(ge=1, le=1000, description="1-1000, default 100")]


class ListQuery(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """Schedules due in [from, to); with ``tag`` and neither, every schedule with the tag (any due time)."""

    start: Moment | UnsetType = UNSET
    end: Moment | UnsetType = UNSET
    status: Literal["scheduled", "succeeded", "failed", "cancelled", "paused"] | UnsetType = UNSET
    tag: Annotated[str, Meta(pattern=TAG_FILTER_PATTERN, description="key=value: only schedules with this tag")] | (
        UnsetType
    ) = UNSET
    target: (
        Annotated[
            str, Meta(pattern=TARGET_PATTERN, description="only schedules calling this host (HTTP) or topic (Kafka)")
        ]
        | UnsetType
    ) = UNSET
    limit: Limit = 100
    cursor: Cursor | UnsetType = UNSET


class RunsQuery(Struct, forbid_unknown_fields=True):
    limit: Limit = 100
    cursor: Cursor | UnsetType = UNSET


class AuditQuery(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """The client's audit records in [from, to) (default: the last 7 days; at most 31), newest first."""

    start: Moment | UnsetType = UNSET
    end: Moment | UnsetType = UNSET
    limit: Limit = 100
    cursor: Cursor | UnsetType = UNSET


class NoQuery(Struct, forbid_unknown_fields=True):
    pass


class SchedulePath(Struct, forbid_unknown_fields=True):
    schedule_id: uuid.UUID


class ClientPath(Struct, forbid_unknown_fields=True):
    client_id: Annotated[str, Meta(pattern=NAME_PATTERN)]


class PolicyPath(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(pattern=NAME_PATTERN)]


class CalendarPath(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(pattern=NAME_PATTERN)]


class EventPath(Struct, forbid_unknown_fields=True):
    event_id: Annotated[str, Meta(pattern=EVENT_ID_PATTERN, description="<schedule_id>:<epoch ms>:<index>")]


DEAD_LETTER_ID_PATTERN = worded(
    rf"^[0-9]{{1,15}}-{_UUID}(?!\n)$", "a dead letter id as listed: <failed_at epoch ms>-<schedule_id (lowercase UUID)>"
)
RedriveLimit = Annotated[int, Meta(ge=1, le=100, description="1-100, default 100")]


class DeadLetterPath(Struct, forbid_unknown_fields=True):
    dead_letter_id: Annotated[
        str, Meta(pattern=DEAD_LETTER_ID_PATTERN, description="<failed_at epoch ms>-<schedule_id>")
    ]


class AdminStatsQuery(Struct, forbid_unknown_fields=True):
    """One client's statistics; absent: every client's together."""

    client_id: Annotated[str, Meta(pattern=NAME_PATTERN)] | UnsetType = UNSET


class DeadLetterQuery(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """Dead letters that failed in [from, to) (default: the last 7 days), of one schedule if given."""

    start: Moment | UnsetType = UNSET
    end: Moment | UnsetType = UNSET
    schedule_id: uuid.UUID | UnsetType = UNSET
    limit: Limit = 100
    cursor: Cursor | UnsetType = UNSET


class RedriveQuery(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """The dead letters not yet redriven among those ``DeadLetterQuery`` selects, ``limit`` per call."""

    start: Moment | UnsetType = UNSET
    end: Moment | UnsetType = UNSET
    schedule_id: uuid.UUID | UnsetType = UNSET
    limit: RedriveLimit = 100
    cursor: Cursor | UnsetType = UNSET


BUSINESS_KEY_PATTERN = worded(r"^[A-Za-z0-9._~:@-]{1,128}(?!\n)$", "1-128 characters of A-Z, a-z, 0-9 and . _ ~ : @ -")


class BusinessKeyPath(Struct, forbid_unknown_fields=True):
    key: Annotated[str, Meta(pattern=BUSINESS_KEY_PATTERN, description="1-128 of A-Z a-z 0-9 . _ ~ : @ -")]


class CreateHeaders(Struct, rename={"idempotency_key": "Idempotency-Key"}):
    idempotency_key: Annotated[str, Meta(pattern=IDEMPOTENCY_KEY_PATTERN)] | UnsetType = UNSET


# An ETag as answered ("7"), or the bare version (7): some clients and tools drop the quotes.
_ETAG = r'(?:"[0-9]{1,18}"|[0-9]{1,18})'
ETAGS_PATTERN = worded(
    rf"^(\*|{_ETAG}( *, *{_ETAG}){{0,15}})(?!\n)$",
    'the ETag of a schedule as answered ("7") or its version (7), a list of them, or *',
)


class ChangeHeaders(Struct, rename={"if_match": "If-Match"}):
    """A change of a schedule: ``If-Match`` makes it conditional on its version (``service.preconditions``)."""

    if_match: (
        Annotated[str, Meta(pattern=ETAGS_PATTERN, description='ETags as answered ("7") or versions (7), or *')]
        | UnsetType
    ) = UNSET


_TIME_PARAMS = frozenset({"from", "to", "at"})
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def query(kind: type[T], request: web.Request) -> T:
    """The query string as ``kind``; a parameter given twice is refused (which one would count?)."""
    values: dict[str, str] = {}
    for name, value in request.query.items():
        if name in values:
            raise Malformed(f"query parameter {name!r} is given more than once", field=name)
        values[name] = value
        if name in _TIME_PARAMS and _NUMBER.fullmatch(value) and not value.lstrip("-").isdigit():
            # A time is RFC 3339 or whole epoch seconds; msgspec would take "0.5" as a time too.
            raise Malformed("a time is RFC 3339 or whole epoch seconds", field=name)
    return convert(kind, values)


def path(kind: type[T], request: web.Request) -> T:
    return convert(kind, dict(request.match_info))


def headers(kind: type[T], request: web.Request) -> T:
    """The headers ``kind`` names (by their wire names); one given twice is refused."""
    values: dict[str, str] = {}
    for name in _header_names(kind):  # type: ignore[arg-type]
        given = request.headers.getall(name, [])
        if len(given) > 1:
            raise Malformed(f"header {name} is given more than once", field=name)
        if given:
            values[name] = given[0]
    return convert(kind, values)


@functools.cache
def _header_names(kind: type) -> tuple[str, ...]:
    # Once per struct: msgspec.structs.fields re-evaluates the annotations at every call (7% of the
    # API's CPU per single create in make bench-api, on a create with no header to read).
    return tuple(field.encode_name for field in msgspec.structs.fields(kind))


def cursor(value: str | UnsetType) -> ListCursor | None:
    if isinstance(value, UnsetType):
        return None
    try:
        return ListCursor.decode(value)
    except (InvalidInput, OverflowError, ValueError):  # a forged cursor can overflow the calendar
        raise Invalid("cursor is not one this API handed out", field="cursor") from None
