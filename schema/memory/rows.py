"""Stored rows (column -> value, as Cassandra returns them) back into the model, the way the Cassandra
adapter reads them: a missing cell reads as the driver's None, with the same defaults."""

from __future__ import annotations

from tickd.schema.memory.engine import Values
from tickd.schema.model import (
    Client,
    DeadLetter,
    HotMark,
    InstanceKey,
    Location,
    NodeInfo,
    RowStamp,
    Schedule,
    Status,
    ThrottlePolicy,
    Token,
    decode_callback,
    decode_options,
)


def client(row: Values) -> Client:
    return Client(
        client_id=row.client_id,
        poller_count=row.poller_count,  # None if an UPDATE created the row  # a row an UPDATE created lacks it
        poller_span=row.poller_span or row.poller_count,
        active=bool(row.active),
        api_key_hash=row.api_key_hash or "",
        kafka_topics=frozenset(row.kafka_topics or ()),
        created_at=row.created_at,
        updated_at=row.updated_at,
        resized_at=row.resized_at,
        ack_secret=row.ack_secret or "",
        signing_secret=row.signing_secret or "",
        signing_secret_previous=row.signing_secret_previous or "",
        signing_previous_until=row.signing_previous_until,
    )


def is_fence(row: Values) -> bool:
    """A row holding only the status a client change fenced an abandoned target with (``schema.changes``)."""
    return row.fire_at is None


def schedule(row: Values) -> Schedule:
    """Fails, as the Cassandra adapter does, on a row whose callback cell is gone (no status: an event row
    not fired yet, scheduled). Memoized on the row: rows read are never mutated (the engine keeps a
    partition's rows between writes), and pollers re-read the same minutes often."""
    parsed: Schedule | None = row.__dict__.get("_schedule")
    if parsed is None:
        parsed = row.__dict__["_schedule"] = _schedule(row)
    return parsed


def stamp(row: Values) -> RowStamp:
    status = Status(row.status) if row.status else Status.SCHEDULED
    return RowStamp(row.due_at, row.schedule_id, row.version or 1, status, row.attempts or 0)


def _schedule(row: Values) -> Schedule:
    options = row.options
    return Schedule(
        client_id=row.client_id,
        schedule_id=row.schedule_id,
        location=Location(row.poller_id, row.due_at),
        fire_at=row.fire_at,
        payload=row.payload or b"",
        callback=decode_callback(row.callback),
        created_at=row.created_at,
        status=Status(row.status) if row.status else Status.SCHEDULED,
        version=row.version or 1,
        attempts=row.attempts or 0,
        fired_at=row.fired_at,
        last_error=row.last_error,
        options=decode_options(options) if options else None,
        seq=row.seq or 0,
    )


def policy(row: Values) -> ThrottlePolicy:
    return ThrottlePolicy(
        row.client_id,
        row.name,
        row.max_in_flight,
        row.release_timeout_s,
        row.created_at,
        row.updated_at,
    )


def token(row: Values) -> Token:
    return Token(row.client_id, row.policy, row.slot, row.event_id, row.holder, row.taken_at)


def node(row: Values) -> NodeInfo:
    return NodeInfo(row.node_id, row.address, row.metrics_port, row.started_at, row.heartbeat_at)


def hot_mark(row: Values) -> HotMark:
    return HotMark(row.minute, InstanceKey(row.client_id, row.poller_id), row.touched_at)


def dead_letter(row: Values) -> DeadLetter:
    return DeadLetter(
        row.client_id,
        row.schedule_id,
        row.fire_id,
        row.failed_at,
        row.attempts,
        row.last_error,
        decode_callback(row.callback),
        row.payload,
    )
