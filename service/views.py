"""Response bodies as msgspec Structs: encoded fast, and the source of the OpenAPI response schemas."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from msgspec import UNSET, Raw, Struct, UnsetType

from schema.model import Callback, Client, Schedule, Status


class ErrorDetail(Struct):
    code: str
    message: str
    field: str | None = None


class ErrorBody(Struct):
    error: ErrorDetail


class ClientView(Struct):
    client_id: str
    poller_count: int
    poller_span: int
    active: bool
    kafka_topics: list[str]
    created_at: datetime
    updated_at: datetime
    resized_at: datetime | None = None
    # Only in the answer to registration and rotation: shown once, never stored.
    api_key: str | UnsetType = UNSET


class ClientList(Struct):
    clients: list[ClientView]


class ApiKeyView(Struct):
    client_id: str
    api_key: str


class ScheduleView(Struct):
    schedule_id: UUID
    status: str
    fire_at: datetime
    due_at: datetime
    fire_id: str
    attempts: int
    fired_at: datetime | None
    last_error: str | None
    created_at: datetime
    callback: Callback
    payload: Raw


class ScheduleList(Struct):
    schedules: list[ScheduleView]
    next_cursor: str | None


class BatchItemError(Struct):
    code: str
    message: str
    field: str | None
    status: int


class BatchItem(Struct, omit_defaults=True):
    index: int
    schedule_id: UUID | UnsetType = UNSET
    status: str | UnsetType = UNSET
    fire_at: datetime | UnsetType = UNSET
    error: BatchItemError | UnsetType = UNSET


class BatchResult(Struct):
    results: list[BatchItem]


class Health(Struct):
    status: str


def client_view(client: Client, api_key: str | UnsetType = UNSET) -> ClientView:
    return ClientView(
        client_id=client.client_id,
        poller_count=client.poller_count,
        poller_span=client.poller_span,
        active=client.active,
        kafka_topics=sorted(client.kafka_topics),
        created_at=client.created_at,
        updated_at=client.updated_at,
        resized_at=client.resized_at,
        api_key=api_key,
    )


def public_status(status: Status) -> str:
    """ "moved" is internal: a moved row's schedule lives on, scheduled, at its new location."""
    return Status.SCHEDULED.value if status is Status.MOVED else status.value


def schedule_view(s: Schedule) -> ScheduleView:
    return ScheduleView(
        schedule_id=s.schedule_id,
        status=public_status(s.status),
        fire_at=s.fire_at,
        due_at=s.location.due_at,
        fire_id=s.fire_id,
        attempts=s.attempts,
        fired_at=s.fired_at,
        last_error=s.last_error,
        created_at=s.created_at,
        callback=s.callback,
        payload=Raw(s.payload or b"null"),
    )
