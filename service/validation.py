"""Request bodies as msgspec Structs, and the rules msgspec's types cannot express.

Every failure names the field (``callback.url``, ``schedules``...) with a stable code. What the types
refuse is ``Malformed`` (400: ``malformed_json``, ``unknown_field``, ``missing_field``, ``wrong_type``,
``invalid_value``, ``out_of_range``); what the rules after decoding refuse is ``Invalid`` (422:
``invalid``, ``out_of_range``, ``forbidden_target``, ``forbidden_port``, ``topic_not_allowed``...).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from tickd.schema import calendars
from tickd.schema.grants import topic_allowed
from tickd.schema.model import MAX_PAUSE_NOTE, Callback, HttpCallback, KafkaCallback
from tickd.service.errors import Invalid, Malformed, PayloadTooLarge
from tickd.service.settings import ApiSettings

T = TypeVar("T")

# What each pattern asks for, in words: msgspec's error quotes the regular expression itself, which tells a
# person little ("Expected `str` matching regex '^[Hh][Tt]...'"). ``invalid_from`` says the words instead,
# and tests/unit/api/test_api_messages.py checks that every pattern the API's spec publishes has them.
PATTERN_WORDS: dict[str, str] = {}


def worded(pattern: str, words: str) -> str:
    """``pattern``, registered with what it asks for in words (shown when a value does not match)."""
    PATTERN_WORDS[pattern] = words
    return pattern


# Every pattern ends in ``(?!\n)$``: in Python (and msgspec) ``$`` also matches before a final newline,
# so ``^[a-z]+$`` would let "name\n" through; the look-ahead works the same in JSON Schema's ECMA regex.
NAME_PATTERN = worded(r"^[a-z0-9_-]{1,64}(?!\n)$", "1-64 characters of a-z, 0-9, _ and -")
CLIENT_ID_PATTERN = NAME_PATTERN
_TOPIC_CHARS = r"[A-Za-z0-9._-]"
TOPIC_PATTERN = worded(
    rf"^(?!\.\.?(?!\n)$){_TOPIC_CHARS}{{1,249}}(?!\n)$",
    "a Kafka topic name: 1-249 characters of A-Z, a-z, 0-9, '.', '_' and '-', not '.' or '..'",
)
# A grant: a topic name, or a prefix of at least one character, then ".", "-" or "_", then "*" ("orders.*").
TOPIC_GRANT_PATTERN = worded(
    rf"^(?:(?!\.\.?(?!\n)$){_TOPIC_CHARS}{{1,249}}|{_TOPIC_CHARS}{{1,247}}[._-]\*)(?!\n)$",
    "a Kafka topic name, or a prefix ending in '.*', '_*' or '-*' (such as 'orders.*')",
)
DURATION_PATTERN = worded(
    r"^[1-9][0-9]{0,8}[smhd](?!\n)$", "a duration such as 30s, 5m, 2h or 1d (a whole number from 1)"
)
ZONE_PATTERN = worded(r"^[A-Za-z][A-Za-z0-9_+/-]{0,63}(?!\n)$", "an IANA time zone name such as Europe/Berlin or UTC")
URL_PATTERN = worded(
    r"^[Hh][Tt][Tt][Pp][Ss]?://[^\x00-\x20\x7f/?#@\\]+(?:[/?#][^\x00-\x20\x7f]*)?(?!\n)$",
    "an http:// or https:// URL with a host, no user info ('@') and no spaces or control characters",
)
METHOD_PATTERN = worded(
    r"^(?:[Gg][Ee][Tt]|[Pp][Oo][Ss][Tt]|[Pp][Uu][Tt]|[Pp][Aa][Tt][Cc][Hh]|[Dd][Ee][Ll][Ee][Tt][Ee])(?!\n)$",
    "one of GET, POST, PUT, PATCH and DELETE",
)
HEADER_NAME_PATTERN = worded(
    r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}(?!\n)$", "an HTTP header name: 1-256 letters, digits and !#$%&'*+.^_`|~-"
)
HEADER_VALUE_PATTERN = worded(
    r"^[\t\x20-\x7e]{0,8192}(?!\n)$", "an HTTP header value: up to 8192 printable ASCII characters or tabs"
)
PAUSE_NOTE_PATTERN = worded(r"^[^\x00-\x1f\x7f]*(?!\n)$", f"at most {MAX_PAUSE_NOTE} characters, no control characters")
CRON_PATTERN = worded(r"^[^\x00-\x1f\x7f]+(?!\n)$", "a cron expression (no control characters)")
MAX_TOPIC_GRANTS = 100
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_HEADERS = 32
MAX_HEADER_BYTES = 8192
MAX_URL_LENGTH = 2048
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 60.0
MAX_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z
MAX_FIRES = 1_000_000_000
MAX_PREVIEW = 100
MAX_RELEASE_TIMEOUT_S = 86400
# Fires in a row that pause a recurring schedule (0: never).
MAX_PAUSE_AFTER_FAILURES = 1000
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
_TOPIC = re.compile(TOPIC_PATTERN)
_RANGE = re.compile(r"Expected `\w+` (?:of length )?[<>]=? ")
_AT = re.compile(r" - at (?:`key` in )?`\$(.*)`$")
_NAMED = re.compile(r"field `([^`]*)`")
# JSON Schema counts 1764.0 as an integer, msgspec does not: such a top-level field is given again as 1764.
_INT_GOT_FLOAT = re.compile(r"^Expected `[^`]*\bint\b[^`]*`, got `float` - at `\$\.(\w+(?:\.\w+)*)`$")
_VERBATIM = frozenset({"payload"})  # delivered byte for byte, never rewritten
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Name = Annotated[str, Meta(pattern=NAME_PATTERN, description="1-64 of a-z, 0-9, _ and -")]
ClientId = Name
Topic = Annotated[str, Meta(pattern=TOPIC_PATTERN)]
TopicGrant = Annotated[str, Meta(pattern=TOPIC_GRANT_PATTERN)]
Duration = Annotated[str, Meta(pattern=DURATION_PATTERN, description="<n>s, <n>m, <n>h or <n>d")]
EpochSeconds = Annotated[int, Meta(ge=0, le=MAX_EPOCH_S)]
# RFC 3339 with an offset (naive times are ambiguous), or epoch seconds.
Moment = Annotated[datetime, Meta(tz=True)] | EpochSeconds
AwareTime = Annotated[datetime, Meta(tz=True)]
Url = Annotated[str, Meta(min_length=1, max_length=MAX_URL_LENGTH, pattern=URL_PATTERN)]
HeaderName = Annotated[str, Meta(pattern=HEADER_NAME_PATTERN)]
HeaderValue = Annotated[str, Meta(pattern=HEADER_VALUE_PATTERN)]
Headers = Annotated[dict[HeaderName, HeaderValue], Meta(max_length=MAX_HEADERS)]
Cron = Annotated[str, Meta(min_length=1, max_length=256, pattern=CRON_PATTERN)]
Zone = Annotated[str, Meta(pattern=ZONE_PATTERN)]
Timeout = Annotated[float, Meta(ge=MIN_TIMEOUT_S, le=MAX_TIMEOUT_S)]
Count = Annotated[int, Meta(ge=1)]
PauseAfter = Annotated[int, Meta(ge=0, le=MAX_PAUSE_AFTER_FAILURES)]
MAX_TAGS = 16
TAG_KEY_PATTERN = worded(
    r"^[a-z0-9][a-z0-9_.-]{0,62}(?!\n)$", "1-63 characters of a-z, 0-9, _ . -, not starting with _ . -"
)
TAG_VALUE_PATTERN = worded(r"^[\x20-\x7e]{0,128}(?!\n)$", "0-128 printable ASCII characters")
TAG_FILTER_PATTERN = worded(
    r"^[a-z0-9][a-z0-9_.-]{0,62}=[\x20-\x7e]{0,128}(?!\n)$", "key=value, as the schedule's tags give them"
)
TARGET_PATTERN = worded(r"^[A-Za-z0-9._-]{1,255}(?!\n)$", "a callback URL's host name, or a Kafka topic")
TagKey = Annotated[str, Meta(pattern=TAG_KEY_PATTERN)]
TagValue = Annotated[str, Meta(pattern=TAG_VALUE_PATTERN)]
PauseText = Annotated[str, Meta(max_length=MAX_PAUSE_NOTE, pattern=PAUSE_NOTE_PATTERN)]
Tags = Annotated[dict[TagKey, TagValue], Meta(max_length=MAX_TAGS, description=f"at most {MAX_TAGS} key: value labels")]


class HttpTarget(Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="http"):
    """An HTTP callback as a request gives it (stored as ``schema.model.HttpCallback``)."""

    url: Url
    method: Annotated[str, Meta(pattern=METHOD_PATTERN)] = "POST"
    headers: Headers = msgspec.field(default_factory=dict)
    timeout_s: Timeout = 5.0


class KafkaTarget(Struct, frozen=True, forbid_unknown_fields=True, tag_field="type", tag="kafka"):
    topic: Topic


Target = HttpTarget | KafkaTarget


def as_callback(target: Target) -> Callback:
    if isinstance(target, KafkaTarget):
        return KafkaCallback(target.topic)
    return HttpCallback(target.url, target.method.upper(), target.headers, target.timeout_s)


class ClientCreate(Struct, forbid_unknown_fields=True):
    client_id: ClientId
    poller_count: Count
    kafka_topics: Annotated[list[TopicGrant], Meta(max_length=MAX_TOPIC_GRANTS)] = msgspec.field(default_factory=list)


class ClientPatch(Struct, forbid_unknown_fields=True):
    poller_count: Count | UnsetType = UNSET
    active: bool | UnsetType = UNSET
    kafka_topics: Annotated[list[TopicGrant], Meta(max_length=MAX_TOPIC_GRANTS)] | UnsetType = UNSET


class MissedFields(Struct, forbid_unknown_fields=True):
    """A missed-fire policy (``schema.missed``): fire_all (every late occurrence fires), skip (one that cannot
    start within ``deadline`` of its due time does not), fire_once (only the latest of those fires)."""

    policy: Literal["fire_all", "skip", "fire_once"] | UnsetType = UNSET
    deadline: Duration | UnsetType = UNSET


CalendarNames = Annotated[list[Annotated[str, Meta(max_length=64)]], Meta(max_length=calendars.MAX_PER_SCHEDULE)]


class RepeatFields(Struct, forbid_unknown_fields=True):
    """The recurrence fields a create or patch may carry (``cron`` or ``every`` makes it recurring)."""

    cron: Cron | UnsetType = UNSET
    timezone: Zone | UnsetType = UNSET
    every: Duration | UnsetType = UNSET
    start_at: AwareTime | UnsetType = UNSET
    end_at: AwareTime | UnsetType = UNSET
    max_fires: Annotated[int, Meta(ge=1, le=MAX_FIRES)] | UnsetType = UNSET
    on_gap: Literal["shift", "skip"] | UnsetType = UNSET
    on_overlap: Literal["first", "last", "both"] | UnsetType = UNSET
    # The client's calendars whose exclusions the timeline skips (a preview shows each excluded occurrence
    # with the calendar that excludes it); on a patch, [] or null names none.
    calendars: CalendarNames | UnsetType | None = UNSET
    # What an occurrence that cannot start in time does; null (on a patch): back to the client's default.
    missed: MissedFields | UnsetType | None = UNSET


REPEAT_FIELDS = tuple(RepeatFields.__struct_fields__)


class ScheduleCreate(RepeatFields, forbid_unknown_fields=True, kw_only=True):
    callback: Target
    fire_at: Moment | UnsetType = UNSET
    delay_s: Annotated[float, Meta(ge=0)] | UnsetType = UNSET
    payload: Raw | UnsetType = UNSET
    jitter: Duration | UnsetType = UNSET
    events: Count | UnsetType = UNSET
    window: Duration | UnsetType = UNSET
    throttle: Name | UnsetType = UNSET
    tags: Tags | UnsetType = UNSET
    # Recurring only: pause after this many fires in a row dead-lettered (0: never; absent: the client's default).
    pause_after_failures: PauseAfter | UnsetType = UNSET


# A debounce window's bounds (seconds): down to 1 s, up to a day; a burst waits at most a week.
DEBOUNCE_WINDOW_MIN_S, DEBOUNCE_WINDOW_MAX_S, DEBOUNCE_MAX_WAIT_MAX_S = 1.0, 86_400.0, 604_800.0


class DebounceFields(Struct, forbid_unknown_fields=True):
    """A by-key PUT's debounce (``service.debounce``): the key's pending fire goes out ``window_s`` after
    the latest PUT (pushed back by each one), never more than ``max_wait_s`` after the first PUT it
    carries; ``edge: leading`` also fires the first PUT of a burst at once."""

    window_s: Annotated[float, Meta(ge=DEBOUNCE_WINDOW_MIN_S, le=DEBOUNCE_WINDOW_MAX_S)]
    max_wait_s: Annotated[float, Meta(ge=DEBOUNCE_WINDOW_MIN_S, le=DEBOUNCE_MAX_WAIT_MAX_S)] | UnsetType = UNSET
    edge: Literal["trailing", "leading"] = "trailing"


class KeyedCreate(ScheduleCreate, forbid_unknown_fields=True, kw_only=True):
    """A by-key PUT's body: a create's, and a debounce."""

    debounce: DebounceFields | UnsetType = UNSET


class SchedulePatch(RepeatFields, forbid_unknown_fields=True):
    fire_at: Moment | UnsetType = UNSET
    delay_s: Annotated[float, Meta(ge=0)] | UnsetType = UNSET
    payload: Raw | UnsetType = UNSET
    callback: Target | UnsetType = UNSET
    jitter: Duration | UnsetType = UNSET
    events: Count | UnsetType = UNSET
    window: Duration | UnsetType = UNSET
    throttle: Name | UnsetType | None = UNSET
    # The schedule's tags, all replaced; {} or null removes them.
    tags: Tags | UnsetType | None = UNSET
    # null: back to the client's default.
    pause_after_failures: PauseAfter | UnsetType | None = UNSET


class SettingsPatch(Struct, forbid_unknown_fields=True):
    """The client's own settings: each given field replaces its value; ``notify: null`` removes the target."""

    pause_after_failures: PauseAfter | UnsetType = UNSET
    notify: Target | UnsetType | None = UNSET
    # The default missed-fire policy of its recurring schedules; null: fire_all.
    missed: MissedFields | UnsetType | None = UNSET
    # Seconds its records are kept (0: the deployment's default); bounded by TICKD_*RETENTION_MAX_S.
    retention_s: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    audit_retention_s: Annotated[int, Meta(ge=0)] | UnsetType = UNSET


class CalendarRange(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """[from, to): local wall times in the calendar's zone, YYYY-MM-DDTHH:MM[:SS], no offset."""

    start: Annotated[str, Meta(max_length=19)]
    end: Annotated[str, Meta(max_length=19)]


class CalendarPut(Struct, forbid_unknown_fields=True):
    """A calendar (``schema.calendars``): excluded dates, ranges and weekdays, in one IANA zone."""

    timezone: Annotated[str, Meta(max_length=64)] | UnsetType = UNSET
    dates: Annotated[list[Annotated[str, Meta(max_length=10)]], Meta(max_length=calendars.MAX_DATES)] = msgspec.field(
        default_factory=list
    )
    ranges: Annotated[list[CalendarRange], Meta(max_length=calendars.MAX_RANGES)] = msgspec.field(default_factory=list)
    weekdays: Annotated[list[Annotated[str, Meta(max_length=9)]], Meta(max_length=7)] = msgspec.field(
        default_factory=list
    )
    business_days: bool = False


class PolicyPut(Struct, forbid_unknown_fields=True):
    max_in_flight: Count
    release_timeout_s: Annotated[int, Meta(ge=1, le=MAX_RELEASE_TIMEOUT_S)]


class PreviewRequest(RepeatFields, forbid_unknown_fields=True):
    count: Annotated[int, Meta(ge=1, le=MAX_PREVIEW)] = 10
    after: Moment | UnsetType = UNSET


class PauseRequest(Struct, forbid_unknown_fields=True):
    """A pause with a time or a reason (the body is optional): ``until``, the schedule resumes by itself
    then; ``note``, shown with the pause. A pause with a body replaces the schedule's pause, if it has one."""

    until: Moment | UnsetType | None = UNSET
    note: PauseText | UnsetType | None = UNSET


class BackfillRequest(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """A backfill of a recurring schedule: each of its occurrences in [``from``, ``to``) (``to`` no later
    than now) fired once, oldest first, ``rate_per_s`` a second (default ``TICKD_BACKFILL_RATE_PER_S``)."""

    start: Moment
    end: Moment
    rate_per_s: Annotated[float, Meta(gt=0, le=100_000)] | UnsetType = UNSET


class RedriveRequest(Struct, forbid_unknown_fields=True):
    """When a redriven fire is due: ``at`` (a time already past is due now); absent: now."""

    at: Moment | UnsetType = UNSET


class BatchCreate(Struct, forbid_unknown_fields=True):
    schedules: Annotated[list[Raw], Meta(min_length=1)]


@dataclass(frozen=True)
class RequestTypes:
    """The request bodies with the limits of one ``ApiSettings`` in their types: what ``decode`` checks
    is what ``/openapi.json`` publishes (service.openapi builds from these same classes)."""

    client_create: type[ClientCreate]
    client_patch: type[ClientPatch]
    schedule_create: type[ScheduleCreate]
    keyed_create: type[KeyedCreate]
    schedule_patch: type[SchedulePatch]
    policy_put: type[PolicyPut]
    preview: type[PreviewRequest]
    batch: type[BatchCreate]

    def all(self) -> list[type[Any]]:
        return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _narrowed(base: type[T], fields: list[tuple[str, Any, Any]]) -> type[T]:
    """``base`` with some fields' types replaced (same name, so the schema component keeps it)."""
    spec = [(name, kind, default) for name, kind, default in fields]
    kw_only = issubclass(base, ScheduleCreate)
    narrowed: type[T] = msgspec.defstruct(  # type: ignore[assignment]
        base.__name__, spec, bases=(base,), forbid_unknown_fields=True, kw_only=kw_only, module=__name__
    )
    return narrowed


def request_types(settings: ApiSettings) -> RequestTypes:
    s = settings
    pollers = Annotated[int, Meta(ge=s.poller_count_min, le=s.poller_count_max)]
    events = Annotated[int, Meta(ge=1, le=s.max_events)] | UnsetType
    delay = Annotated[float, Meta(ge=0, le=s.max_horizon_s)] | UnsetType
    schedules = Annotated[list[Raw], Meta(min_length=1, max_length=s.max_batch)]
    timing = [("delay_s", delay, UNSET), ("events", events, UNSET)]
    return RequestTypes(
        client_create=_narrowed(ClientCreate, [("poller_count", pollers, msgspec.NODEFAULT)]),
        client_patch=_narrowed(ClientPatch, [("poller_count", pollers | UnsetType, UNSET)]),
        schedule_create=_narrowed(ScheduleCreate, timing),
        keyed_create=_narrowed(KeyedCreate, timing),
        schedule_patch=_narrowed(SchedulePatch, timing),
        policy_put=_narrowed(
            PolicyPut, [("max_in_flight", Annotated[int, Meta(ge=1, le=s.max_in_flight)], msgspec.NODEFAULT)]
        ),
        preview=PreviewRequest,
        batch=_narrowed(BatchCreate, [("schedules", schedules, msgspec.NODEFAULT)]),
    )


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
        integral = _integral_floats(body, str(exc))
        if integral is None:
            raise invalid_from(str(exc), prefix) from None
        return decode(kind, integral, prefix=prefix)  # one field fewer to fix each time
    except msgspec.DecodeError as exc:
        raise Malformed(f"body is not valid JSON: {exc}", code="malformed_json", field=prefix or None) from None
    except RecursionError:
        raise Malformed("body is nested too deeply", code="malformed_json", field=prefix or None) from None
    except UnicodeError:
        raise Malformed("body is not UTF-8", code="malformed_json", field=prefix or None) from None
    return result


def _integral_floats(body: bytes, error: str) -> bytes | None:
    """``body`` with the integer field msgspec refused as a float (``1764.0``) written as an integer, if its
    value is integral; None otherwise. The field may be nested in objects (``filter.from``). Only on the
    error path; strings stay refused, and the top-level field it is in is the only one written again."""
    match = _INT_GOT_FLOAT.match(error)
    if match is None:
        return None
    top, *inner = match.group(1).split(".")
    if top in _VERBATIM:
        return None
    fields = msgspec.json.decode(body, type=dict[str, Raw])
    whole = msgspec.json.decode(fields[top])
    holder, name = None, top
    value: Any = whole
    for part in inner:
        if not isinstance(value, dict) or part not in value:
            return None
        holder, name, value = value, part, value[part]
    if not (isinstance(value, float) and value.is_integer()):
        return None
    if holder is None:
        whole = int(value)
    else:
        holder[name] = int(value)
    fields[top] = Raw(msgspec.json.encode(whole))
    return msgspec.json.encode(fields)


def convert(kind: type[T], values: dict[str, str], *, field: str | None = None) -> T:
    """Query, path or header values (strings) as ``kind``, converted the way JSON would be; errors name
    the parameter."""
    try:
        return msgspec.convert(values, kind, strict=False)
    except msgspec.ValidationError as exc:
        raise invalid_from(str(exc)) from None


def invalid_from(message: str, prefix: str = "") -> Malformed:
    """Map msgspec's "... - at `$.a.b`" to a dotted field name and a code."""
    at = _AT.search(message)
    path = at.group(1).lstrip(".") if at else ""
    text = message[: at.start()] if at else message
    code = "wrong_type" if ", got `" in text else "invalid_value"
    if _RANGE.match(text):
        code = "out_of_range"
    if text.startswith("Object contains unknown field"):
        code = "unknown_field"
    elif text.startswith("Object missing required field"):
        code = "missing_field"
    if code in ("unknown_field", "missing_field") and (named := _NAMED.search(text)):
        path = f"{path}.{named.group(1)}" if path else named.group(1)
    path = re.sub(r"\[(\d+)\]", r".\1", path.replace("[...]", ""))  # list index -> .i; dict key unknown
    field = ".".join(p for p in (prefix, path) if p) or None
    return Malformed(_in_words(text), field=field, code=code)


def _in_words(text: str) -> str:
    """msgspec's "Expected `str` matching regex '<pattern>'" as what the pattern asks for, in words."""
    if not text.startswith(_MATCHING):
        return text
    for pattern, words in PATTERN_WORDS.items():
        if text == _matching_message(pattern):
            return f"Expected {words}"
    return "Expected a string of the form the API's documentation (/docs) gives for this field"


_MATCHING = "Expected `str` matching regex "


@functools.cache
def _matching_message(pattern: str) -> str:
    """The message msgspec gives for a string ``pattern`` refuses (its own quoting of the pattern)."""
    try:
        msgspec.convert("\x00", Annotated[str, Meta(pattern=pattern)])
    except msgspec.ValidationError as exc:
        return str(exc)
    return ""


# -- time -------------------------------------------------------------------------------------------


def to_ms(moment: datetime) -> datetime:
    """Cassandra keeps milliseconds; truncate so what we answer is what we stored."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def parse_time(value: datetime | int, field: str) -> datetime:
    """A decoded ``Moment`` in UTC; 422 for a time that leaves the calendar (year 1 or 9999 with an offset)."""
    if isinstance(value, int):
        if not 0 <= value <= MAX_EPOCH_S:  # through year 9999
            raise Malformed("epoch seconds out of range", field=field, code="out_of_range")
        return _EPOCH + timedelta(seconds=value)
    if value.tzinfo is None:
        raise Malformed("time needs an offset (Z or +hh:mm); naive times are ambiguous", field=field)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise Invalid("time is outside years 1-9999 in UTC", field=field, code="out_of_range") from None


def fire_time(
    fire_at: datetime | int | UnsetType, delay_s: float | UnsetType, now: datetime, settings: ApiSettings
) -> datetime:
    """The nominal fire time from exactly one of ``fire_at`` / ``delay_s``, within the horizon."""
    if (fire_at is UNSET) == (delay_s is UNSET):
        raise Invalid("give exactly one of fire_at and delay_s", field="fire_at", code="missing_field")
    if isinstance(delay_s, float):
        if not (math.isfinite(delay_s) and 0 <= delay_s <= settings.max_horizon_s):
            raise Malformed(
                f"delay_s must be between 0 and {settings.max_horizon_s}", field="delay_s", code="out_of_range"
            )
        return to_ms(now + timedelta(seconds=delay_s))
    assert not isinstance(fire_at, UnsetType)
    moment = parse_time(fire_at, "fire_at")
    if moment.year >= 9999:  # beyond any horizon, and no room left for the jitter or a window
        raise Invalid(f"fire_at is more than {settings.max_horizon_s} s ahead", field="fire_at", code="out_of_range")
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
    """The topics an admin lets a client target: names, or prefixes like ``orders.*`` (``TopicGrant``)."""
    return frozenset(grants)


def check_kafka(target: KafkaTarget, grants: frozenset[str], prefix: str) -> KafkaCallback:
    if not _TOPIC.match(target.topic):
        raise Malformed("topic must match [A-Za-z0-9._-]{1,249}", field=f"{prefix}topic")
    if not topic_allowed(target.topic, grants):
        raise Invalid("this client may not send to that topic", field=f"{prefix}topic", code="topic_not_allowed")
    return KafkaCallback(target.topic)


def check_headers(headers: dict[str, str], prefix: str) -> None:
    field = f"{prefix}headers"
    if len(headers) > MAX_HEADERS:
        raise Malformed(f"at most {MAX_HEADERS} headers", field=field, code="out_of_range")
    if sum(len(k) + len(v) for k, v in headers.items()) > MAX_HEADER_BYTES:
        raise Invalid(f"headers exceed {MAX_HEADER_BYTES} bytes", field=field, code="out_of_range")
    for name in headers:
        lowered = name.lower()
        if lowered in FORBIDDEN_HEADERS or lowered.startswith("x-tickd-"):
            raise Invalid(f"header {name!r} is set by tickd or hop-by-hop", field=f"{field}.{name}")


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


def check_http_shape(target: HttpTarget, prefix: str, settings: ApiSettings) -> tuple[HttpCallback, str]:
    """Everything about an HTTP callback the types cannot say, except where its host points; returns
    the callback to store and the host. A port the policy denies is ``forbidden_port`` (schema.ports)."""
    try:
        host = url_host(target.url)
    except ValueError as exc:
        raise Invalid(str(exc), field=f"{prefix}url") from None
    refused = settings.callback_ports.url_refusal(target.url)
    if refused is not None:
        raise Invalid(refused, field=f"{prefix}url", code="forbidden_port")
    check_headers(target.headers, prefix)
    callback = as_callback(target)
    assert isinstance(callback, HttpCallback)
    return callback, host


class BulkFilterBody(Struct, forbid_unknown_fields=True, rename={"start": "from", "end": "to"}):
    """Which schedules a bulk job acts on: those with ``tag`` (key=value), and if given, of ``status``,
    due in [from, to), calling ``target`` (an HTTP callback's host, or a Kafka topic). For a redrive,
    from/to is when their fires failed (the dead letters redriven), as in the dead-letter listing."""

    tag: Annotated[str, Meta(pattern=TAG_FILTER_PATTERN, description="key=value: schedules with this tag")]
    status: Literal["scheduled", "paused", "cancelled", "succeeded", "failed"] | UnsetType = UNSET
    start: Moment | UnsetType = UNSET
    end: Moment | UnsetType = UNSET
    target: Annotated[str, Meta(min_length=1, max_length=255, pattern=TARGET_PATTERN)] | UnsetType = UNSET


class BulkJobCreate(Struct, forbid_unknown_fields=True):
    """A bulk job: ``action`` on every schedule ``filter`` selects, or with ``dry_run`` only counted."""

    action: Literal["cancel", "pause", "resume", "trigger", "redrive"]
    filter: BulkFilterBody
    dry_run: bool = False
