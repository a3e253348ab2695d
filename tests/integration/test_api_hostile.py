"""A hostile corpus: every request gets its documented 2xx or a 4xx with the error shape naming the
field (within send's 5 s deadline; speed is measured by make bench-isolation), and a refused request writes
nothing (raw row counts)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from cassandra.cluster import Session

from tests.integration.api_helpers import ADMIN_TOKEN, Api, Register, serve, stored_rows, with_settings
from tests.integration.api_raw import build, send
from tickd.schema.cassandra import CassandraStore
from tickd.service.settings import ApiSettings

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.integration.api_fixtures"]

NEW = "2xx"
OK = {200, 201}
RULE = frozenset({422})  # matches /openapi.json, refused by a rule no schema carries


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    method: str
    target: bytes
    body: Any = None  # dict/list -> JSON; bytes as is; None -> no body
    statuses: frozenset[int] | str = frozenset({400})
    field: str | bool | None = False  # False: not checked
    headers: tuple[tuple[bytes, bytes], ...] = ()
    auth: bytes | None = b"{KEY}"
    content_type: bytes | None = b"application/json"
    shaped: bool = True  # False: refused by the HTTP parser before the app (plain-text 4xx)
    private_denied: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def cb(**changes: Any) -> dict[str, Any]:
    return {"type": "http", "url": "http://127.0.0.1:9/cb", **changes}


def sched(**changes: Any) -> dict[str, Any]:
    body = {"delay_s": 3600, "payload": {"n": 1}, "callback": cb(), **changes}
    return {k: v for k, v in body.items() if v is not None}


def rule(**changes: Any) -> dict[str, Any]:
    return sched(**{"delay_s": None, "cron": "0 3 * * *", **changes})


S = b"/v1/schedules"
LIST = b"/v1/schedules?from=1900000000&to=1900003600"
OWN = b"/v1/schedules/{SID}"
DEAD = {"cron": "30 2 * 3 0#2", "timezone": "America/New_York", "on_gap": "skip"}
BIG = "x" * (64 * 1024 - 16)
FORBIDDEN_HOSTS = [
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "127.1",
    "0",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "[64:ff9b::a9fe:a9fe]",
    "[64:ff9b:1::808:808]",
    "[2002:7f00:1::1]",
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",
    "169.254.169.254",
    "100.64.0.1",
    "[fe80::1%25eth0]",
    "\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff11",
    "224.0.0.1",
]


def _cases() -> list[Case]:
    c: list[Case] = []
    add = c.append
    # -- authentication: always 401, alike for known and unknown clients
    for i, auth in enumerate(
        [
            None,
            b"Basic abc",
            b"Bearer",
            b"Bearer ",
            b"Bearer \xff\xfe",
            b"Bearer {CID}.\xff\xfe\xfd",
            b"Bearer {CID}.wrong-secret-000000000000",
            b"Bearer nosuchclient.wrong-secret-000000000000",
            b"Bearer {CID}.",
            b"Bearer {CID}",
            b"Bearer " + b"a" * 600,
            b"Bearer {CID}.s\xc3\xa9cret00000000000000000",
            b"Bearer " + ADMIN_TOKEN.encode(),
        ]
    ):
        add(Case(f"auth-{i}", "auth", "GET", OWN, statuses=frozenset({401}), field="Authorization", auth=auth))
    add(
        Case(
            "auth-runs-overflow-cursor",
            "auth",
            "GET",
            OWN + b"/runs?cursor=MTo5OTk5OTk5OTk5OTk5OTk6",
            auth=None,
            statuses=frozenset({401}),
        )
    )
    add(
        Case(
            "auth-two-headers",
            "auth",
            "GET",
            OWN,
            statuses=frozenset({401}),
            auth=None,
            headers=((b"Authorization", b"Bearer {KEY_RAW}"), (b"Authorization", b"Bearer {KEY_RAW}")),
        )
    )
    add(Case("auth-lowercase-scheme", "auth", "GET", OWN, statuses=frozenset({200}), auth=b"bearer {KEY_RAW}"))
    add(Case("auth-client-on-admin", "auth", "GET", b"/v1/clients", statuses=frozenset({403})))
    # -- encodings
    add(Case("enc-path-pct-ff", "encoding", "GET", b"/v1/schedules/%ff%fe", field=False))
    add(Case("enc-path-raw-ff", "encoding", "GET", b"/v1/schedules/\xff", statuses=frozenset({400, 404}), shaped=False))
    add(Case("enc-query-pct-ff", "encoding", "GET", b"/v1/schedules?from=%ff&to=1900003600", field=False))
    add(Case("enc-query-raw-ff", "encoding", "GET", b"/v1/schedules?from=\xff&to=1900003600", shaped=False))
    add(Case("enc-header-value", "encoding", "GET", OWN, headers=((b"X-Thing", b"\xff\xfe"),), field="X-Thing"))
    add(
        Case(
            "enc-idempotency-key",
            "encoding",
            "POST",
            S,
            sched(),
            headers=((b"Idempotency-Key", b"k\xff"),),
            field="Idempotency-Key",
        )
    )
    add(
        Case(
            "enc-request-id",
            "encoding",
            "GET",
            OWN,
            headers=((b"X-Request-Id", b"\xff\r"),),
            statuses=frozenset({200, 400}),
            shaped=False,
        )
    )
    add(
        Case(
            "enc-payload-invalid-utf8",
            "encoding",
            "POST",
            S,
            b'{"delay_s": 60, "payload": "\xff\xfe", "callback": {"type": "http", "url": "http://127.0.0.1:9/"}}',
            field=None,
        )
    )
    add(
        Case(
            "enc-url-invalid-utf8",
            "encoding",
            "POST",
            S,
            b'{"delay_s": 60, "callback": {"type": "http", "url": "http://h\xff/"}}',
        )
    )
    add(
        Case(
            "enc-charset-latin1",
            "encoding",
            "POST",
            S,
            sched(),
            statuses=frozenset({415}),
            field="Content-Type",
            content_type=b"application/json; charset=latin-1",
        )
    )
    add(
        Case(
            "enc-charset-utf16",
            "encoding",
            "POST",
            S,
            sched(),
            statuses=frozenset({415}),
            field="Content-Type",
            content_type=b"application/json; charset=utf-16",
        )
    )
    add(
        Case(
            "enc-charset-utf8",
            "encoding",
            "POST",
            S,
            sched(),
            statuses=frozenset({201}),
            content_type=b"application/json; charset=utf-8",
        )
    )
    add(Case("enc-text-plain", "encoding", "POST", S, sched(), statuses=frozenset({415}), content_type=b"text/plain"))
    add(Case("enc-no-content-type", "encoding", "POST", S, sched(), statuses=frozenset({415}), content_type=None))
    add(
        Case(
            "enc-gzip",
            "encoding",
            "POST",
            S,
            sched(),
            statuses=frozenset({415}),
            field="Content-Encoding",
            headers=((b"Content-Encoding", b"gzip"),),
        )
    )
    add(Case("enc-bom", "encoding", "POST", S, b"\xef\xbb\xbf" + json.dumps(sched()).encode(), field=None))
    # -- JSON structure
    add(
        Case(
            "json-nested-990",
            "json",
            "POST",
            S,
            b'{"delay_s": 60, "payload": ' + b"[" * 990 + b"]" * 990 + b"}",
            statuses=frozenset({201, 400}),
        )
    )
    add(
        Case(
            "json-nested-5000",
            "json",
            "POST",
            S,
            b'{"delay_s": 60, "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            field=False,
        )
    )
    add(Case("json-body-nested-2000", "json", "POST", S, b"[" * 2000 + b"]" * 2000, field=None))
    add(
        Case(
            "json-duplicate-keys",
            "json",
            "POST",
            S,
            b'{"delay_s": 60, "delay_s": 120, "callback": {"type": "http", "url": "http://127.0.0.1:9/"}}',
            statuses=frozenset({201}),
        )
    )
    add(Case("json-array", "json", "POST", S, [1, 2], field=None))
    add(Case("json-null", "json", "POST", S, b"null", field=None))
    add(Case("json-empty", "json", "POST", S, b"", field=None))
    add(Case("json-nan", "json", "POST", S, b'{"delay_s": NaN, "callback": {"type": "http", "url": "http://h/"}}'))
    add(
        Case(
            "json-huge-float",
            "json",
            "POST",
            S,
            b'{"delay_s": 1e400, "callback": {"type": "http", "url": "http://h/"}}',
            field="delay_s",
        )
    )
    add(
        Case(
            "json-5000-digit-epoch",
            "json",
            "POST",
            S,
            b'{"fire_at": ' + b"9" * 5000 + b', "callback": {"type": "http", "url": "http://h/"}}',
            field="fire_at",
        )
    )
    add(Case("json-nul-in-payload", "json", "POST", S, sched(payload="a\u0000b"), statuses=frozenset({201})))
    add(
        Case(
            "json-lone-surrogate-escape",
            "json",
            "POST",
            S,
            b'{"delay_s": 60, "payload": "\\ud800", "callback": {"type": "http", "url": "http://127.0.0.1:9/"}}',
            statuses=frozenset({201, 400}),
        )
    )
    add(Case("json-trailing-garbage", "json", "POST", S, json.dumps(sched()).encode() + b"}", field=None))
    # -- times
    for i, (value, status) in enumerate(
        [
            ("0001-01-01T00:00:00+01:00", 422),  # a valid date-time, but before year 1 in UTC
            ("9999-12-31T23:59:59-01:00", 422),
            ("9999-12-31T23:59:59Z", 422),  # beyond the horizon
            ("0000-01-01T00:00:00Z", 400),
            (-1, 400),
            (253402300800, 400),
            ("2030-02-30T00:00:00Z", 400),
            ("2030-01-01T00:00:00+25:00", 400),
            (10**30, 400),
        ]
    ):
        fire_at = sched(delay_s=None, fire_at=value)
        add(Case(f"time-fire-at-{i}", "time", "POST", S, fire_at, statuses=frozenset({status}), field="fire_at"))
    add(
        Case(
            "time-past-fires-now",
            "time",
            "POST",
            S,
            sched(delay_s=None, fire_at="0001-01-01T23:00:00Z"),
            statuses=frozenset({201}),
        )
    )
    year_1 = rule(start_at="0001-01-01T00:00:00+01:00")
    add(Case("time-start-year-1", "time", "POST", S, year_1, statuses=RULE, field="start_at"))
    add(
        Case(
            "time-end-9999", "time", "POST", S, rule(end_at="9999-12-31T23:59:59-05:00"), statuses=RULE, field="end_at"
        )
    )
    add(
        Case(
            "time-preview-after-9999",
            "time",
            "POST",
            S + b"/preview",
            {"cron": "0 * * * *", "after": "9999-12-31T23:00:00Z"},
            statuses=frozenset({200, 400}),
        )
    )
    add(
        Case(
            "time-preview-after-year-1",
            "time",
            "POST",
            S + b"/preview",
            {"cron": "0 * * * *", "after": "0001-01-01T00:00:00+14:00"},
            statuses=RULE,
            field="after",
        )
    )
    add(Case("time-delay-horizon", "time", "POST", S, sched(delay_s=10**12), field="delay_s"))
    # -- query strings
    for i, (query, fld) in enumerate(
        [
            (b"from=--5&to=1", "from"),
            (b"from=1900000000&to=1900003600&limit=%C2%B2", "limit"),
            (b"from=1900000000&to=1900003600&limit=%D9%A3", "limit"),
            (b"from=1900000000&to=1900003600&limit=%EF%BC%91%EF%BC%90", "limit"),
            (b"from=1900000000&to=1900003600&limit=-1", "limit"),
            (b"from=" + b"9" * 5000 + b"&to=1", "from"),
            (b"from=1900000000&to=1900003600&limit=1&limit=2", "limit"),
            (b"from=1900000000&to=1900003600&page=2", "page"),
            (b"from=1900000000&to=1900003600&cursor=MTo5OTk5OTk5OTk5OTk5OTk6", "cursor"),
            (b"from=1900000000&to=1900003600&cursor=%E2%98%83", "cursor"),
            (b"from=1900000000&to=1900003600&status=SCHEDULED", "status"),
            (b"from=1900000000%0A&to=1900003600", "from"),
            (b"from=1900000000&to=1900003600&limit=" + b"1" * 400, "limit"),
            (b"from=-9999999999&to=1", "from"),
        ]
    ):
        statuses = RULE if b"cursor=MT" in query else frozenset({400})  # a cursor not handed out: 422
        add(Case(f"query-list-{i}", "query", "GET", S + b"?" + query, statuses=statuses, field=fld))
    add(
        Case(
            "query-runs-overflow-cursor",
            "query",
            "GET",
            OWN + b"/runs?cursor=MTo5OTk5OTk5OTk5OTk5OTk6",
            statuses=RULE,
            field="cursor",
        )
    )
    add(Case("query-runs-limit-unicode", "query", "GET", OWN + b"/runs?limit=%D9%A3", field="limit"))
    add(Case("query-list-ok", "query", "GET", LIST, statuses=frozenset({200})))
    # -- path parameters and other tenants
    add(Case("path-not-uuid", "path", "GET", b"/v1/schedules/not-a-uuid", field="schedule_id"))
    add(Case("path-uuid-newline", "path", "GET", b"/v1/schedules/{SID}%0A", field="schedule_id"))
    add(Case("path-other-get", "path", "GET", b"/v1/schedules/{OTHER}", statuses=frozenset({404})))
    add(Case("path-other-delete", "path", "DELETE", b"/v1/schedules/{OTHER}", statuses=frozenset({404})))
    add(Case("path-other-patch", "path", "PATCH", b"/v1/schedules/{OTHER}", {"delay_s": 60}, statuses=frozenset({404})))
    add(Case("path-other-runs", "path", "GET", b"/v1/schedules/{OTHER}/runs", statuses=frozenset({404})))
    add(Case("path-client-newline", "path", "GET", b"/v1/clients/{CID}%0A", field="client_id", auth=b"{ADMIN}"))
    add(
        Case(
            "path-policy-newline",
            "path",
            "PUT",
            b"/v1/throttle-policies/p%0A",
            {"max_in_flight": 1, "release_timeout_s": 1},
            field="name",
        )
    )
    add(Case("path-policy-upper", "path", "GET", b"/v1/throttle-policies/P", field="name"))
    add(Case("path-event-garbage", "path", "POST", b"/v1/events/zzz/release", field="event_id"))
    add(
        Case(
            "path-very-long",
            "path",
            "GET",
            b"/v1/schedules/" + b"a" * 9000,
            statuses=frozenset({414}),
            shaped=False,
        )
    )
    # -- names with trailing newlines
    add(
        Case(
            "name-client-id-newline",
            "names",
            "POST",
            b"/v1/clients",
            {"client_id": "abc\n", "poller_count": 1},
            field="client_id",
            auth=b"{ADMIN}",
        )
    )
    add(
        Case(
            "name-grant-newline",
            "names",
            "POST",
            b"/v1/clients",
            {"client_id": "abc", "poller_count": 1, "kafka_topics": ["orders.*\n"]},
            field="kafka_topics.0",
            auth=b"{ADMIN}",
        )
    )
    add(
        Case(
            "name-topic-newline",
            "names",
            "POST",
            S,
            sched(callback={"type": "kafka", "topic": "orders.x\n"}),
            field="callback.topic",
        )
    )
    add(Case("name-throttle-newline", "names", "POST", S, sched(throttle="p\n"), field="throttle"))
    add(
        Case(
            "name-header-newline",
            "names",
            "POST",
            S,
            sched(callback=cb(headers={"X-A\n": "v"})),
            field="callback.headers",
        )
    )
    add(Case("name-zone-newline", "names", "POST", S, rule(timezone="UTC\n"), field="timezone"))
    add(Case("name-every-newline", "names", "POST", S, sched(delay_s=None, every="5m\n"), field="every"))
    # -- recurrence rules
    add(Case("rec-dead-create", "recurrence", "POST", S, sched(delay_s=None, **DEAD), statuses=RULE, field="cron"))
    add(Case("rec-dead-preview", "recurrence", "POST", S + b"/preview", DEAD, statuses=RULE, field="cron"))
    add(Case("rec-dead-patch", "recurrence", "PATCH", b"/v1/schedules/{RID}", DEAD, statuses=RULE, field="cron"))
    add(
        Case(
            "rec-minute-gap-dead",
            "recurrence",
            "POST",
            S,
            sched(delay_s=None, cron="* 2 * 3 0#2", timezone="America/New_York", on_gap="skip"),
            statuses=RULE,
            field="cron",
        )
    )
    add(Case("rec-hashed", "recurrence", "POST", S, rule(cron="H * * * *"), statuses=RULE, field="cron"))
    add(Case("rec-six-fields", "recurrence", "POST", S, rule(cron="0 0 0 * * *"), statuses=RULE, field="cron"))
    add(Case("rec-never", "recurrence", "POST", S, rule(cron="0 0 31 2 *"), statuses=RULE, field="cron"))
    add(Case("rec-huge-cron", "recurrence", "POST", S, rule(cron="0," * 5000 + "0 * * * *"), field="cron"))
    add(
        Case("rec-zone-localtime", "recurrence", "POST", S, rule(timezone="localtime"), statuses=RULE, field="timezone")
    )
    add(Case("rec-zone-traversal", "recurrence", "POST", S, rule(timezone="../../etc/passwd"), field="timezone"))
    huge_every = sched(delay_s=None, every="999999999d")
    add(Case("rec-every-huge", "recurrence", "POST", S, huge_every, statuses=RULE, field="every"))
    add(Case("rec-max-fires-huge", "recurrence", "POST", S, rule(max_fires=10**19), field="max_fires"))
    add(
        Case(
            "rec-preview-count-huge",
            "recurrence",
            "POST",
            S + b"/preview",
            {"cron": "* * * * *", "count": 10**9},
            field="count",
        )
    )
    # -- callback address forms (private destinations denied)
    for i, host in enumerate(FORBIDDEN_HOSTS):
        add(
            Case(
                f"addr-{i}",
                "address",
                "POST",
                S,
                sched(callback=cb(url=f"http://{host}/hook")),
                statuses=RULE,
                field="callback.url",
                private_denied=True,
            )
        )
    add(
        Case(
            "addr-userinfo-trick",
            "address",
            "POST",
            S,
            sched(callback=cb(url="http://8.8.8.8@127.0.0.1/")),
            field="callback.url",
            private_denied=True,
        )
    )
    add(
        Case(
            "addr-backslash-trick",
            "address",
            "POST",
            S,
            sched(callback=cb(url="http://8.8.8.8\\@127.0.0.1/")),
            field="callback.url",
            private_denied=True,
        )
    )
    add(
        Case(
            "addr-public-literal",
            "address",
            "POST",
            S,
            sched(callback=cb(url="http://8.8.8.8/hook")),
            statuses=frozenset({201}),
            private_denied=True,
        )
    )
    # -- amplification
    add(
        Case(
            "amp-events-x-payload",
            "amplification",
            "POST",
            S,
            sched(delay_s=0, events=10000, payload=BIG),
            statuses=RULE,
            field="events",
        )
    )
    add(
        Case(
            "amp-events-small-payload",
            "amplification",
            "POST",
            S,
            sched(events=10000, payload=1),
            statuses=frozenset({201}),
        )
    )
    add(
        Case(
            "amp-every-second-events",
            "amplification",
            "POST",
            S,
            sched(delay_s=None, every="1s", events=200),
            statuses=RULE,
            field="events",
        )
    )
    add(
        Case(
            "amp-patch-payload-growth",
            "amplification",
            "PATCH",
            b"/v1/schedules/{EID}",
            {"payload": BIG},
            statuses=RULE,
            field="events",
        )
    )
    add(Case("amp-events-over-max", "amplification", "POST", S, sched(events=10**6), field="events"))
    add(
        Case(
            "amp-batch-over-max",
            "amplification",
            "POST",
            S + b"/batch",
            {"schedules": [sched()] * 1001},
            field="schedules",
        )
    )
    # -- methods
    for i, (method, target) in enumerate(
        [("PUT", S), ("TRACE", S), ("PROPFIND", S), ("HEAD", b"/healthz"), ("OPTIONS", OWN), ("DELETE", S)]
    ):
        # A HEAD answer has no body: only its status and Allow header can be checked.
        add(
            Case(
                f"method-{i}",
                "method",
                method,
                target,
                statuses=frozenset({405}),
                shaped=method != "HEAD",
                extra={"allow": True},
            )
        )
    add(Case("method-invalid-token", "method", "F(O", S, statuses=frozenset({400}), shaped=False))
    # -- headers
    add(
        Case(
            "hdr-idem-too-long",
            "headers",
            "POST",
            S,
            sched(),
            headers=((b"Idempotency-Key", b"k" * 256),),
            field="Idempotency-Key",
        )
    )
    add(
        Case(
            "hdr-idem-twice",
            "headers",
            "POST",
            S,
            sched(),
            headers=((b"Idempotency-Key", b"a"), (b"Idempotency-Key", b"b")),
            field="Idempotency-Key",
        )
    )
    add(
        Case(
            "hdr-idem-unicode",
            "headers",
            "POST",
            S,
            sched(),
            headers=((b"Idempotency-Key", b"\xc3\xa9"),),
            field="Idempotency-Key",
        )
    )
    add(
        Case(
            "hdr-many",
            "headers",
            "GET",
            b"/healthz",
            auth=None,
            headers=tuple((f"X-H{i}".encode(), b"v") for i in range(200)),
            statuses=frozenset({431}),
            shaped=False,
        )
    )
    add(
        Case(
            "hdr-long-line",
            "headers",
            "GET",
            b"/healthz",
            auth=None,
            headers=((b"X-Long", b"v" * 20000),),
            statuses=frozenset({431}),
            shaped=False,
        )
    )
    # -- huge numbers
    add(
        Case(
            "num-poller-count",
            "numbers",
            "POST",
            b"/v1/clients",
            {"client_id": "abc", "poller_count": 10**30},
            field="poller_count",
            auth=b"{ADMIN}",
        )
    )
    add(
        Case(
            "num-max-in-flight",
            "numbers",
            "PUT",
            b"/v1/throttle-policies/p",
            {"max_in_flight": 10**20, "release_timeout_s": 1},
            field="max_in_flight",
        )
    )
    add(Case("num-timeout", "numbers", "POST", S, sched(callback=cb(timeout_s=1e308)), field="callback.timeout_s"))
    add(Case("num-bool-events", "numbers", "POST", S, sched(events=True), field="events"))
    add(Case("num-float-events", "numbers", "POST", S, sched(events=2.5), field="events"))
    return c


CASES = _cases()


def _fill(raw: bytes, ctx: dict[str, str]) -> bytes:
    for name, value in ctx.items():
        raw = raw.replace(("{" + name + "}").encode(), value.encode())
    return raw


@pytest.fixture
async def denied_api(api_settings: ApiSettings, store: CassandraStore) -> AsyncIterator[Api]:
    async for client in serve(with_settings(api_settings, callback_allow_private=False), store):
        yield client


async def _context(api: Api, register: Register) -> dict[str, str]:
    client_id, key = await register(kafka_topics=["orders.*"])
    _, other_key = await register()
    own = await (await api.post("/v1/schedules", json=sched(), headers=key)).json()
    other = await (await api.post("/v1/schedules", json=sched(), headers=other_key)).json()
    recurring = await (await api.post("/v1/schedules", json=rule(), headers=key)).json()
    events = await (await api.post("/v1/schedules", json=sched(events=100, payload=1), headers=key)).json()
    token = key["Authorization"].removeprefix("Bearer ")
    return {
        "client_id": client_id,
        "KEY": f"Bearer {token}",
        "KEY_RAW": token,
        "CID": client_id,
        "ADMIN": f"Bearer {ADMIN_TOKEN}",
        "SID": own["schedule_id"],
        "OTHER": other["schedule_id"],
        "RID": recurring["schedule_id"],
        "EID": events["schedule_id"],
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_hostile_request(api: Api, denied_api: Api, register: Register, cql: Session, case: Case) -> None:
    ctx = await _context(api, register)
    target_api = denied_api if case.private_denied else api
    headers = list(case.headers)
    if case.auth is not None:
        headers.append((b"Authorization", case.auth))
    if case.content_type is not None and case.body is not None:
        headers.append((b"Content-Type", case.content_type))
    body = case.body if isinstance(case.body, bytes) or case.body is None else json.dumps(case.body).encode()
    request = build(case.method, _fill(case.target, ctx), [(n, _fill(v, ctx)) for n, v in headers], body)
    before = await stored_rows(cql, ctx["client_id"])
    server = target_api.server
    # send waits with a deadline (5 s); how fast each is answered is measured by make bench-isolation.
    response = await send(str(server.host), int(server.port or 0), request)
    assert response.status < 500, (case.id, response.status, response.body[:300])
    assert response.status in case.statuses, (case.id, response.status, response.body[:300])
    if response.status >= 400:
        if case.shaped:
            error = response.error()
            assert set(error) == {"code", "message", "field"} and error["code"] and error["message"], error
            if case.field is not False:
                assert error["field"] == case.field, (case.id, error)
        assert await stored_rows(cql, ctx["client_id"]) == before, case.id
    if case.extra.get("allow"):
        assert response.headers.get("allow"), case.id


def test_the_corpus_is_big_and_covers_every_category() -> None:
    categories = {c.category for c in CASES}
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)
    assert {
        "auth",
        "encoding",
        "json",
        "time",
        "query",
        "path",
        "names",
        "recurrence",
        "address",
        "amplification",
        "method",
        "headers",
        "numbers",
    } <= categories


async def test_known_and_unknown_clients_get_the_same_401(api: Api, register: Register) -> None:
    client_id, _ = await register()
    answers = []
    for key in (f"{client_id}.{'x' * 43}", f"nosuch{uuid.uuid4().hex[:6]}.{'x' * 43}", f"{client_id}.\u00e9"):
        resp = await api.get(f"/v1/schedules/{uuid.uuid4()}", headers={"Authorization": f"Bearer {key}"})
        answers.append((resp.status, await resp.json()))
    assert answers[0] == answers[1] and answers[0][0] == 401
    assert answers[2][0] == 401
