"""Request bodies as msgspec Structs, and the rules msgspec's types cannot express.

Every failure is an ``Invalid`` naming the field (``callback.url``, ``schedules``...) with a stable code:
``malformed_json``, ``unknown_field``, ``missing_field``, ``wrong_type``, ``invalid_value``,
``out_of_range``, ``forbidden_target``, ``topic_not_allowed``.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from schema.model import Callback, HttpCallback, KafkaCallback
from service.errors import Invalid, PayloadTooLarge
from service.settings import ApiSettings

T = TypeVar("T")

CLIENT_ID_PATTERN = r"^[a-z0-9_-]{1,64}$"
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
# A prefix grant: at least one character, then ".", "-" or "_", then "*" ("orders.*").
TOPIC_PREFIX_PATTERN = r"^[A-Za-z0-9._-]{1,247}[._-]\*$"
MAX_TOPIC_GRANTS = 100
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_HEADERS = 32
MAX_HEADER_BYTES = 8192
MAX_URL_LENGTH = 2048
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 60.0
# Hop-by-hop headers, and those the poller sets itself.
FORBIDDEN_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_TOPIC = re.compile(TOPIC_PATTERN)
_TOPIC_PREFIX = re.compile(TOPIC_PREFIX_PATTERN)
_AT = re.compile(r" - at `\$(.*)`$")
_NAMED = re.compile(r"field `([^`]*)`")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

ClientId = Annotated[str, Meta(pattern=CLIENT_ID_PATTERN)]


class ClientCreate(Struct, forbid_unknown_fields=True):
    client_id: ClientId
    poller_count: int
    kafka_topics: list[str] = msgspec.field(default_factory=list)


class ClientPatch(Struct, forbid_unknown_fields=True):
    poller_count: int | UnsetType = UNSET
    active: bool | UnsetType = UNSET
    kafka_topics: list[str] | UnsetType = UNSET


class RepeatFields(Struct, forbid_unknown_fields=True):
    """The recurrence fields a create or patch may carry (``cron`` or ``every`` makes it recurring)."""

    cron: str | UnsetType = UNSET
    timezone: str | UnsetType = UNSET
    every: str | UnsetType = UNSET
    start_at: datetime | UnsetType = UNSET
    end_at: datetime | UnsetType = UNSET
    max_fires: int | UnsetType = UNSET
    on_gap: str | UnsetType = UNSET
    on_overlap: str | UnsetType = UNSET


REPEAT_FIELDS = tuple(RepeatFields.__struct_fields__)


class ScheduleCreate(RepeatFields, forbid_unknown_fields=True, kw_only=True):
    callback: Callback
    fire_at: datetime | int | UnsetType = UNSET
    delay_s: float | UnsetType = UNSET
    payload: Raw | UnsetType = UNSET
    jitter: str | UnsetType = UNSET
    events: int | UnsetType = UNSET
    window: str | UnsetType = UNSET
    throttle: str | UnsetType = UNSET


class SchedulePatch(RepeatFields, forbid_unknown_fields=True):
    fire_at: datetime | int | UnsetType = UNSET
    delay_s: float | UnsetType = UNSET
    payload: Raw | UnsetType = UNSET
    callback: Callback | UnsetType = UNSET
    jitter: str | UnsetType = UNSET
    events: int | UnsetType = UNSET
    window: str | UnsetType = UNSET
    throttle: str | UnsetType | None = UNSET


class PolicyPut(Struct, forbid_unknown_fields=True):
    max_in_flight: int
    release_timeout_s: int


class PreviewRequest(RepeatFields, forbid_unknown_fields=True):
    count: int = 10
    after: datetime | int | UnsetType = UNSET


class BatchCreate(Struct, forbid_unknown_fields=True):
    schedules: list[Raw]


# -- decoding ---------------------------------------------------------------------------------------

_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def decode(kind: type[T], body: bytes, *, prefix: str = "") -> T:
    """Decode ``body`` as ``kind``; msgspec's error becomes an ``Invalid`` naming the field."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        result: T = decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise invalid_from(str(exc), prefix) from None
    except msgspec.DecodeError as exc:
        raise Invalid(f"body is not valid JSON: {exc}", code="malformed_json") from None
    return result


def invalid_from(message: str, prefix: str = "") -> Invalid:
    """Map msgspec's "... - at `$.a.b`" to a dotted field name and a code."""
    at = _AT.search(message)
    path = at.group(1).lstrip(".") if at else ""
    text = message[: at.start()] if at else message
    code = "wrong_type" if ", got `" in text else "invalid_value"
    if text.startswith("Object contains unknown field"):
        code = "unknown_field"
    elif text.startswith("Object missing required field"):
        code = "missing_field"
    if code in ("unknown_field", "missing_field") and (named := _NAMED.search(text)):
        path = f"{path}.{named.group(1)}" if path else named.group(1)
    path = re.sub(r"\[(\d+)\]", r".\1", path.replace("[...]", ""))  # list index -> .i; dict key unknown
    field = ".".join(p for p in (prefix, path) if p) or None
    return Invalid(text, field=field, code=code)


# -- time -------------------------------------------------------------------------------------------


def to_ms(moment: datetime) -> datetime:
    """Cassandra keeps milliseconds; truncate so what we answer is what we stored."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def parse_time(value: datetime | int, field: str) -> datetime:
    if isinstance(value, int):
        if not 0 <= value <= 253402300799:  # through year 9999
            raise Invalid("epoch seconds out of range", field=field, code="out_of_range")
        return _EPOCH + timedelta(seconds=value)
    if value.tzinfo is None:
        raise Invalid("time needs an offset (Z or +hh:mm); naive times are ambiguous", field=field)
    return value.astimezone(UTC)


def fire_time(
    fire_at: datetime | int | UnsetType, delay_s: float | UnsetType, now: datetime, settings: ApiSettings
) -> datetime:
    """The nominal fire time from exactly one of ``fire_at`` / ``delay_s``, within the horizon."""
    if (fire_at is UNSET) == (delay_s is UNSET):
        raise Invalid("give exactly one of fire_at and delay_s", field="fire_at", code="missing_field")
    if isinstance(delay_s, float):
        if not (math.isfinite(delay_s) and 0 <= delay_s <= settings.max_horizon_s):
            raise Invalid(
                f"delay_s must be between 0 and {settings.max_horizon_s}", field="delay_s", code="out_of_range"
            )
        return to_ms(now + timedelta(seconds=delay_s))
    assert not isinstance(fire_at, UnsetType)
    moment = parse_time(fire_at, "fire_at")
    if (moment - now).total_seconds() > settings.max_horizon_s:
        raise Invalid(f"fire_at is more than {settings.max_horizon_s} s ahead", field="fire_at", code="out_of_range")
    return to_ms(moment)


# -- payload, topics, callbacks ---------------------------------------------------------------------


def payload_bytes(payload: Raw | UnsetType, settings: ApiSettings) -> bytes:
    data = b"null" if isinstance(payload, UnsetType) else bytes(payload)
    if len(data) > settings.max_payload_bytes:
        raise PayloadTooLarge(
            f"payload is {len(data)} bytes; the limit is {settings.max_payload_bytes}",
            field="payload",
            code="payload_too_large",
        )
    return data


def topic_grants(grants: list[str]) -> frozenset[str]:
    """Validate the topics an admin lets a client target: names, or prefixes like ``orders.*``."""
    if len(grants) > MAX_TOPIC_GRANTS:
        raise Invalid(f"at most {MAX_TOPIC_GRANTS} topic grants", field="kafka_topics", code="out_of_range")
    for i, grant in enumerate(grants):
        if not (_TOPIC.match(grant) or _TOPIC_PREFIX.match(grant)) or grant in (".", ".."):
            raise Invalid(
                "a grant is a topic name [A-Za-z0-9._-]{1,249} or a prefix ending in '.*', '-*' or '_*'",
                field=f"kafka_topics.{i}",
            )
    return frozenset(grants)


def topic_allowed(topic: str, grants: frozenset[str]) -> bool:
    if topic in grants:
        return True
    return any(g.endswith("*") and topic.startswith(g[:-1]) and len(topic) >= len(g) for g in grants)


def check_kafka(callback: KafkaCallback, grants: frozenset[str], prefix: str) -> KafkaCallback:
    if not _TOPIC.match(callback.topic) or callback.topic in (".", ".."):
        raise Invalid("topic must match [A-Za-z0-9._-]{1,249}", field=f"{prefix}topic")
    if not topic_allowed(callback.topic, grants):
        raise Invalid("this client may not send to that topic", field=f"{prefix}topic", code="topic_not_allowed")
    return callback


def check_headers(headers: dict[str, str], prefix: str) -> None:
    field = f"{prefix}headers"
    if len(headers) > MAX_HEADERS:
        raise Invalid(f"at most {MAX_HEADERS} headers", field=field, code="out_of_range")
    if sum(len(k) + len(v) for k, v in headers.items()) > MAX_HEADER_BYTES:
        raise Invalid(f"headers exceed {MAX_HEADER_BYTES} bytes", field=field, code="out_of_range")
    for name, value in headers.items():
        lowered = name.lower()
        if not _HEADER_NAME.match(name):
            raise Invalid(f"{name!r} is not a valid header name", field=f"{field}.{name}")
        if lowered in FORBIDDEN_HEADERS or lowered.startswith("x-tickd-"):
            raise Invalid(f"header {name!r} is set by tickd or hop-by-hop", field=f"{field}.{name}")
        if any(c in value for c in "\r\n\0"):
            raise Invalid("header values must not contain CR, LF or NUL", field=f"{field}.{name}")


@functools.lru_cache(maxsize=4096)
def url_host(url: str) -> str:
    """The host of a valid callback URL; ``ValueError`` saying what is wrong otherwise. Cached: a
    client sends the same few URLs, and the checks were ~3% of the API's CPU per create."""
    if len(url) > MAX_URL_LENGTH or any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError(f"url must be at most {MAX_URL_LENGTH} characters without spaces")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError("url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be http(s)://host/...")
    if "@" in parts.netloc:
        raise ValueError("url must not carry credentials; use headers")
    return parts.hostname


def check_http_shape(callback: HttpCallback, prefix: str) -> tuple[HttpCallback, str]:
    """Everything about an HTTP callback except where its host points; returns it and the host."""
    try:
        host = url_host(callback.url)
    except ValueError as exc:
        raise Invalid(str(exc), field=f"{prefix}url") from None
    method = callback.method.upper()
    if method not in HTTP_METHODS:
        raise Invalid(f"method must be one of {', '.join(sorted(HTTP_METHODS))}", field=f"{prefix}method")
    if not (math.isfinite(callback.timeout_s) and MIN_TIMEOUT_S <= callback.timeout_s <= MAX_TIMEOUT_S):
        raise Invalid(
            f"timeout_s must be between {MIN_TIMEOUT_S} and {MAX_TIMEOUT_S}",
            field=f"{prefix}timeout_s",
            code="out_of_range",
        )
    check_headers(callback.headers, prefix)
    if method != callback.method:
        callback = msgspec.structs.replace(callback, method=method)
    return callback, host
