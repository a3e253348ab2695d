"""bench-isolation: the largest request of every endpoint from one client, beside another client's cheap reads.

Issue 25 promises that no single request hurts other tenants: the largest request each endpoint accepts
should answer within 2 s while another client's requests keep answering within 100 ms. This measures it
(and asserts nothing): one real ``tickd-api`` process on a fresh keyspace (``tickd_bench_isolation``,
dropped and migrated each run) over the local Cassandra, two registered clients, and for every operation
of ``service.routes.operations()`` (every declared operation, so a new endpoint is measured too):

- client A sends that endpoint's largest request: the most items a batch takes, each as large as the body
  limit allows, with distinct 200-character cron rules whose next-fire search skips DST gaps (Santiago,
  on_gap skip, on_overlap both: accepted; or New York, whose rules are refused only after the whole
  search budget), maximal payloads, callbacks and headers, the largest preview count, listing limit and
  range, redrive-all over 31 days, statistics over a day of seeded minutes... (each limit read from
  ``ApiSettings``, ``service.validation`` and ``service.params``);
- client B, in a process of its own so A's client work cannot delay it, sends ``GET /v1/schedules/{id}``
  every 20 ms (open loop: a stalled API shows up as every request queued behind the stall).

Last, two bulk jobs run to done beside B (a redrive of the listed schedules' dead letters over 31 days,
then a pause of every listed schedule by its tag): a job is background work, so its row gives B's
latency over the job's whole run and the API's CPU per schedule (dead letter) the job matched.

An endpoint without a builder here is still measured with a generic request (path parameters filled in,
no body) and its row says so. Each row: A's answer status and median and maximum latency, B's p50/p99/max over every
request that overlapped A's, and the API process's CPU per A request (utime + stime from /proc, which
includes B's few requests), beside B's max in the 0.4 s before each A request and how busy the whole
machine was (others' work raises B's latency too). A row is flagged when A took over 2 s or B's max went
over 100 ms.

    .venv/bin/python -m bench.isolation [--reps 3] [--budget-s 180] [--api-env NAME=VALUE ...]

Bounded: each A request times out after ``--request-timeout-s``; a request slower than 5 s is not
repeated; once ``--budget-s`` is spent the remaining rows say "not run". The API process is killed at the
end, also on error. Rate limits the API has (any ``*_rate_per_s`` / ``*_burst`` setting of ``ApiSettings``)
are raised through their TICKD_* variables, so A's requests measure work, not 429s (the header says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import msgspec

from bench.api import ADMIN_TOKEN, CLK_TCK, REPO, ApiProcesses, cpu_model, log, machine_busy_s, proc_cpu_s
from tickd.schema import calendars as cal
from tickd.schema import stats, timing
from tickd.schema.cassandra import CassandraStore
from tickd.schema.errors import ConfigError
from tickd.schema.migrate import drop, migrate
from tickd.schema.model import DeadLetter, HttpCallback, Run, Status
from tickd.schema.settings import StoreSettings
from tickd.service import dead_letters, params, validation
from tickd.service.declare import Operation
from tickd.service.routes import operations
from tickd.service.settings import ApiSettings

KEYSPACE = "tickd_bench_isolation"
PROBE_PERIOD_S = 0.02
SLOW_A_S = 2.0  # issue 25: the largest request answers within 2 s ...
SLOW_B_S = 0.1  # ... while another client's requests keep answering within 100 ms
REPEAT_BELOW_S = 5.0  # a request slower than this is measured once
# B alone just before each A request: what B saw without A, at that moment (others share the machine).
CONTROL_S = 0.4
THROTTLE = "bench-throttle"
# A cron whose next-fire search skips wall times in DST gaps and is still accepted (Chile's clocks jump at
# midnight on the first Sunday of September: each year's first matches fall in the gap), and one whose
# every match falls in New York's spring gap, refused only once the whole search budget is spent.
ACCEPTED_RULE = ("{minutes} 0 * 9 0#1", "America/Santiago")
REFUSED_RULE = ("{minutes} 2 * 3 0#2", "America/New_York")
CALLBACK_URL = "http://127.0.0.1:18080/"


# -- client B: the probe, in a process of its own -----------------------------------------------------


async def probe(url: str, api_key: str, period_s: float) -> None:
    """Every ``period_s`` a GET of one schedule, whatever the earlier ones are doing; one line per answer
    on stdout: ``<monotonic start> <monotonic end> <status>`` (CLOCK_MONOTONIC is system-wide on Linux)."""
    headers = {"Authorization": f"Bearer {api_key}"}
    connector = aiohttp.TCPConnector(limit=200)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        tasks: set[asyncio.Task[None]] = set()
        tick = time.monotonic()
        while True:
            if len(tasks) < 1000:
                task = asyncio.create_task(_probe_once(session, url))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            tick += period_s
            await asyncio.sleep(max(0.0, tick - time.monotonic()))


async def _probe_once(session: aiohttp.ClientSession, url: str) -> None:
    started = time.monotonic()
    try:
        async with session.get(url) as resp:
            await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        status = 0
    print(f"{started:.6f} {time.monotonic():.6f} {status}", flush=True)


@dataclass(frozen=True)
class Sample:
    started: float
    ended: float
    status: int

    @property
    def latency_s(self) -> float:
        return self.ended - self.started


class Probe:
    """Client B running in a child process; its answers are collected by a reader thread."""

    def __init__(self, url: str, api_key: str) -> None:
        self.samples: list[Sample] = []
        command = [sys.executable, "-m", "bench.isolation", "--probe", url, "--probe-key", api_key]
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, name="probe-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            started, ended, status = line.split()
            self.samples.append(Sample(float(started), float(ended), int(status)))

    def overlapping(self, start: float, end: float) -> list[Sample]:
        return [s for s in list(self.samples) if s.started <= end and s.ended >= start]

    async def settled(self, limit_s: float = 15.0) -> None:
        """Until a request sent from now on has been answered (or ``limit_s``): the API has worked through
        what the previous request left queued. Not "answered fast": on a machine others load too, B may
        never be fast, and every row would wait the whole limit."""
        since, deadline = time.monotonic(), time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if any(s.started >= since for s in list(self.samples)[-50:]):
                return
            await asyncio.sleep(0.02)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


# -- what client A sends ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One HTTP request of client A; ``what`` says in a few words what makes it large."""

    what: str
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class World:
    """What the builders need: the limits, the clients, and ids made during set-up (pools handed out
    one per repetition, for requests that use their target up: delete, pause, rotate a key...)."""

    settings: ApiSettings
    key_a: str
    key_b: str
    client_a: str
    spare_client: str
    b_schedule: str = ""
    big_schedule: str = ""
    one_time: list[str] = field(default_factory=list)
    recurring: list[str] = field(default_factory=list)
    runs_schedule: str = ""
    dead_letter_ids: list[str] = field(default_factory=list)
    new_clients: list[str] = field(default_factory=list)
    business_keys: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    # Client A's calendars, each as large as one may be; schedules and previews name the first eight.
    calendars: list[str] = field(default_factory=list)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def pick(self, pool: list[str], rep: int) -> str:
        return pool[rep % len(pool)]


def minutes_field(i: int) -> str:
    """Every minute, rotated by ``i``, and a few more: distinct text per item (each parse is its own)."""
    order = [(m + i) % 60 for m in range(60)]
    return ",".join(map(str, order)) + "," + ",".join(str((i // 60 + j) % 60) for j in range(8))


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def payload_of(size: int) -> bytes:
    """A JSON string ``size`` bytes long, quotes included (``size`` >= 2)."""
    return b'"' + b"p" * (size - 2) + b'"'


def max_callback() -> dict[str, Any]:
    """The largest HTTP callback: the longest URL, the most headers in the most header bytes, the longest timeout."""
    url = CALLBACK_URL + "u" * (validation.MAX_URL_LENGTH - len(CALLBACK_URL))
    count = validation.MAX_HEADERS
    value_len = validation.MAX_HEADER_BYTES // count - len("X-Bench-00")
    headers = {f"X-Bench-{i:02d}": "v" * value_len for i in range(count)}
    return {"type": "http", "url": url, "method": "POST", "headers": headers, "timeout_s": validation.MAX_TIMEOUT_S}


def rule_fields(
    i: int, rule: tuple[str, str], s: ApiSettings, now: datetime, calendars: list[str] | None = None
) -> dict[str, Any]:
    expr, zone = rule
    named = {"calendars": calendars[: cal.MAX_PER_SCHEDULE]} if calendars else {}
    return {
        **named,
        "cron": expr.format(minutes=minutes_field(i)),
        "timezone": zone,
        "on_gap": "skip",
        "on_overlap": "both",
        "end_at": (now + timedelta(seconds=s.max_horizon_s - 86400)).isoformat(),
        "max_fires": validation.MAX_FIRES,
        "jitter": f"{s.max_jitter_s}s",
    }


def events_for(payload_size: int, s: ApiSettings) -> int:
    """The most events per fire the amplification limits allow with this payload (a cron fires once a minute)."""
    return max(1, min(s.max_events, s.max_fire_bytes // payload_size, s.max_events_per_minute))


def create_item(i: int, payload_size: int, rule: tuple[str, str], w: World) -> bytes:
    s = w.settings
    fields = {
        **rule_fields(i, rule, s, w.now, w.calendars),
        "events": events_for(payload_size, s),
        "window": f"{s.max_window_s}s",
        "throttle": THROTTLE,
        "callback": max_callback(),
    }
    head = json_bytes(fields)[:-1]
    return head + b',"payload":' + payload_of(payload_size) + b"}"


def batch_payload_size(w: World) -> int:
    """The payload that fills the body limit with the most items (never over the payload limit)."""
    s = w.settings
    overhead = len(create_item(0, 2, ACCEPTED_RULE, w)) + 1
    room = (s.max_body_bytes - len(b'{"schedules":[]}')) // s.max_batch - overhead - 16
    return max(2, min(s.max_payload_bytes, room))


def batch_call(w: World, rule: tuple[str, str], what: str) -> Call:
    size = batch_payload_size(w)
    items = b",".join(create_item(i, size, rule, w) for i in range(w.settings.max_batch))
    body = b'{"schedules":[' + items + b"]}"
    return Call(f"{w.settings.max_batch} items, {size} B payloads, {what}; {len(body) >> 10} KiB", "POST", "", {}, body)


def single_create(w: World, rep: int, path: str, method: str = "POST") -> Call:
    body = create_item(rep, w.settings.max_payload_bytes, ACCEPTED_RULE, w)
    headers = {"Idempotency-Key": f"k{rep:03d}-" + "i" * 250} if method == "POST" else {}
    return Call(
        f"{w.settings.max_payload_bytes} B payload, DST-gap cron, max callback", method, path, {}, body, headers
    )


def patch_call(w: World, rep: int) -> Call:
    fields = {**rule_fields(rep + 7, ACCEPTED_RULE, w.settings, w.now, w.calendars), "callback": max_callback()}
    body = json_bytes(fields)[:-1] + b',"payload":' + payload_of(w.settings.max_payload_bytes) + b"}"
    path = f"/v1/schedules/{w.pick(w.recurring, rep)}"
    return Call("max payload, DST-gap cron, max callback", "PATCH", path, {}, body)


def preview_call(w: World, rep: int) -> Call:
    fields = {**rule_fields(rep + 11, ACCEPTED_RULE, w.settings, w.now, w.calendars), "count": validation.MAX_PREVIEW}
    fields.pop("jitter")
    named = len(fields.get("calendars", []))
    what = f"count {validation.MAX_PREVIEW}, DST-gap cron, {named} largest calendars"
    return Call(what, "POST", "", {}, json_bytes(fields))


def largest_calendar(w: World) -> dict[str, Any]:
    """A calendar as large as one may be: the most dates (from five years ahead: the accepted rule's first
    fire, a first Sunday of September about four years ahead, lies before them, so a create passes over
    no exclusion and a batch stays within its search budget, while a preview's later occurrences are read
    against them), the most ranges (after the dates), six weekdays (all but Sunday, the accepted rule's
    day), a long zone name."""
    first = (w.now + timedelta(days=5 * 366)).date()
    dates = [(first + timedelta(days=d)).isoformat() for d in range(cal.MAX_DATES)]
    start = datetime.combine(first + timedelta(days=cal.MAX_DATES + 10), datetime.min.time())
    ranges = [
        {
            "from": (start + timedelta(days=2 * r)).strftime("%Y-%m-%dT%H:%M:%S"),
            "to": (start + timedelta(days=2 * r, hours=20)).strftime("%Y-%m-%dT%H:%M:%S"),
        }
        for r in range(cal.MAX_RANGES)
    ]
    weekdays = ["mon", "tue", "wed", "thu", "fri", "sat"]
    return {"timezone": "America/Argentina/ComodRivadavia", "dates": dates, "ranges": ranges, "weekdays": weekdays}


def calendar_call(w: World, rep: int) -> Call:
    name = f"iso-cal-{rep}-" + "c" * 50
    body = json_bytes(largest_calendar(w))
    return Call(f"1,000 dates, 200 ranges; {len(body) >> 10} KiB", "PUT", f"/v1/calendars/{name}", {}, body)


def horizon(w: World) -> bytes:
    return json_bytes({"at": int(time.time()) + w.settings.max_horizon_s - 3600})


def grants(prefix: str) -> list[str]:
    """The most topic grants, each as long as allowed and distinct per client (none overlaps another's)."""
    return [f"{prefix}.{i:03d}." + "t" * (240 - len(prefix)) for i in range(validation.MAX_TOPIC_GRANTS)]


def new_client_call(w: World, rep: int) -> Call:
    client_id = f"iso-new-{rep}-" + "c" * 50
    w.new_clients.append(client_id)
    body = {"client_id": client_id, "poller_count": w.settings.poller_count_max, "kafka_topics": grants(f"n{rep}")}
    return Call("max poller_count, 100 longest grants", "POST", "", {}, json_bytes(body))


def patch_client_call(w: World, rep: int) -> Call:
    target = w.pick(w.new_clients, rep) if w.new_clients else w.spare_client
    body = {"poller_count": w.settings.poller_count_max, "active": True, "kafka_topics": grants(f"p{rep}")}
    return Call("max poller_count, 100 longest grants", "PATCH", f"/v1/clients/{target}", {}, json_bytes(body))


def max_limit(query: type[msgspec.Struct]) -> int:
    """The largest ``limit`` a query Struct of ``service.params`` takes (its ``le``)."""
    (found,) = (f.type for f in msgspec.inspect.type_info(query).fields if f.name == "limit")  # type: ignore[attr-defined]
    kind = found.type if isinstance(found, msgspec.inspect.Metadata) else found
    assert isinstance(kind, msgspec.inspect.IntType) and kind.le is not None
    return kind.le


def listing_query(w: World) -> dict[str, str]:
    start = w.now.replace(microsecond=0)
    end = start + timedelta(seconds=w.settings.list_max_range_s)
    return {"from": start.isoformat(), "to": end.isoformat(), "limit": str(max_limit(params.ListQuery))}


def letters_query(query: type[msgspec.Struct]) -> dict[str, str]:
    """The widest range a dead-letter query takes (31 days), at its largest limit."""
    end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    start = end - dead_letters.MAX_RANGE
    return {"from": start.isoformat(), "to": end.isoformat(), "limit": str(max_limit(query))}


def runs_call(w: World, rep: int) -> Call:
    query = {"limit": str(max_limit(params.RunsQuery))}
    return Call("the largest limit, of 1,200 runs", "GET", f"/v1/schedules/{w.runs_schedule}/runs", query)


def policy_call(w: World, rep: int) -> Call:
    name = f"iso-policy-{rep}-" + "q" * 40
    w.policies.append(name)
    body = {"max_in_flight": w.settings.max_in_flight, "release_timeout_s": validation.MAX_RELEASE_TIMEOUT_S}
    return Call("max max_in_flight and release timeout", "PUT", f"/v1/throttle-policies/{name}", {}, json_bytes(body))


def business_key_call(w: World, rep: int) -> Call:
    key = f"iso-{rep}-" + "k" * 120
    w.business_keys.append(key)
    return single_create(w, rep + 100, f"/v1/schedules/by-key/{key}", "PUT")


Builder = Callable[[World, int], Call]


def largest() -> dict[tuple[str, str], list[tuple[str, Builder]]]:
    """Per operation, its largest requests (a variant name each); the rest get ``generic_call``."""
    return {
        ("post", "/v1/clients"): [("", new_client_call)],
        ("patch", "/v1/clients/{client_id}"): [("", patch_client_call)],
        ("post", "/v1/schedules"): [("", lambda w, rep: single_create(w, rep, ""))],
        ("post", "/v1/schedules/batch"): [
            ("accepted", lambda w, rep: batch_call(w, ACCEPTED_RULE, "DST-gap crons accepted")),
            ("refused", lambda w, rep: batch_call(w, REFUSED_RULE, "crons refused after the whole search")),
        ],
        ("post", "/v1/schedules/preview"): [("", preview_call)],
        ("get", "/v1/schedules/{schedule_id}/runs"): [("", runs_call)],
        ("get", "/v1/schedules"): [
            ("", lambda w, rep: Call("the largest limit, the widest range", "", "", listing_query(w)))
        ],
        ("get", "/v1/schedules/{schedule_id}"): [
            ("", lambda w, rep: Call("the largest schedule", "", f"/v1/schedules/{w.big_schedule}"))
        ],
        ("patch", "/v1/schedules/{schedule_id}"): [("", patch_call)],
        ("post", "/v1/schedules/{schedule_id}/trigger"): [("", trigger_call)],
        ("put", "/v1/schedules/by-key/{key}"): [("", business_key_call)],
        ("get", "/v1/dead-letters"): [
            ("", lambda w, rep: Call("the largest limit over 31 days", "", "", letters_query(params.DeadLetterQuery)))
        ],
        ("post", "/v1/dead-letters/redrive"): [
            (
                "",
                lambda w, rep: Call(
                    "redrive-all: its largest limit over 31 days", "", "", letters_query(params.RedriveQuery)
                ),
            )
        ],
        ("post", "/v1/dead-letters/{dead_letter_id}/redrive"): [
            (
                "",
                lambda w, rep: Call(
                    "due at the horizon",
                    "",
                    f"/v1/dead-letters/{w.pick(w.dead_letter_ids, rep)}/redrive",
                    {},
                    horizon(w),
                ),
            )
        ],
        ("put", "/v1/throttle-policies/{name}"): [("", policy_call)],
        ("put", "/v1/calendars/{name}"): [("", calendar_call)],
    }


def path_values(w: World, rep: int) -> dict[str, str]:
    """What a generic request puts in each path parameter (by name)."""
    return {
        "client_id": w.pick(w.new_clients, rep) if w.new_clients else w.spare_client,
        "schedule_id": w.pick(w.recurring if rep % 2 else w.one_time, rep // 2),
        "key": w.pick(w.business_keys, rep) if w.business_keys else "iso-missing",
        "name": w.pick(w.policies, rep) if w.policies else THROTTLE,
        "calendar": w.pick(w.calendars, rep),
        "dead_letter_id": w.pick(w.dead_letter_ids, rep + 1000),
        "event_id": f"{w.b_schedule}:{timing.to_epoch_ms(w.now)}:0",
    }


# Operations with nothing in the request to enlarge: what the set-up made large for them, if anything.
DESCRIBED = {
    ("get", "/v1/clients"): "every client (the new ones with 100 grants each)",
    ("get", "/v1/clients/{client_id}"): "a client with 100 longest grants",
    ("get", "/v1/schedules/by-key/{key}"): "the largest schedule, by its 128-character key",
    ("delete", "/v1/schedules/by-key/{key}"): "the largest schedule, by its 128-character key",
    ("get", "/v1/stats"): "its day: 1,440 seeded minutes x writers",
    ("get", "/v1/admin/stats"): "every client's day: 1,440 seeded minutes x writers",
    ("get", "/v1/dead-letters/{dead_letter_id}"): "a dead letter with a 64 KiB payload",
    ("get", "/v1/throttle-policies"): "every policy of the client",
    ("get", "/v1/calendars"): "every calendar of the client, each as large as allowed",
    ("get", "/v1/calendars/{name}"): "a calendar as large as allowed",
    ("delete", "/v1/calendars/{name}"): "a calendar as large as allowed",
    ("get", "/v1/throttle-policies/{name}"): "a policy at its maximal limits",
    ("delete", "/v1/throttle-policies/{name}"): "a policy at its maximal limits",
    ("post", "/v1/events/{event_id}/release"): "an event id (no such event: no pollers run here)",
    ("get", "/v1/admin/nodes"): "every instance of every client (the new ones at the max poller_count)",
}


class _Filled(dict[str, str]):
    """Path values by name; a parameter no builder knows yet gets a placeholder (the row shows its status)."""

    def __missing__(self, name: str) -> str:
        return "bench-unknown"


def generic_call(op: Operation, w: World, rep: int) -> Call:
    values = path_values(w, rep)
    if op.path.startswith("/v1/calendars/"):
        values["name"] = values["calendar"] if op.method == "get" else w.calendars.pop()  # a delete uses one up
    path = op.path.format_map(_Filled(values))
    what = DESCRIBED.get((op.method, op.path))
    if what is None:
        what = "nothing to enlarge" if "{" not in op.path else "generic (no builder: path filled in, no body)"
    return Call(what, op.method.upper(), path)


def trigger_call(w: World, rep: int) -> Call:
    path = f"/v1/schedules/{w.pick(w.recurring, 40 + rep)}/trigger"
    key = f"t{rep:03d}-" + "t" * 250
    return Call("an Idempotency-Key of 255 characters", "POST", path, {}, None, {"Idempotency-Key": key})


# Generic requests that use up their target take it from a pool of their own, one per repetition.
def pooled_path(op: Operation, w: World, rep: int) -> str | None:
    pools = {
        ("delete", "/v1/schedules/{schedule_id}"): ("schedule_id", w.one_time, 0),
        ("post", "/v1/schedules/{schedule_id}/pause"): ("schedule_id", w.recurring, 20),
        ("post", "/v1/schedules/{schedule_id}/resume"): ("schedule_id", w.recurring, 20),
        ("post", "/v1/clients/{client_id}/api-keys"): ("client_id", [w.spare_client], 0),
        ("post", "/v1/clients/{client_id}/signing-secrets"): ("client_id", [w.spare_client], 0),
    }
    found = pools.get((op.method, op.path))
    if found is None:
        return None
    name, pool, offset = found
    return op.path.replace("{" + name + "}", w.pick(pool, offset + rep))


def calls_of(op: Operation, w: World) -> list[tuple[str, Builder]]:
    specific = largest().get((op.method, op.path))
    if specific is not None:
        return specific
    if (pooled := pooled_path(op, w, 0)) is not None:
        what = "generic, a fresh target per repetition"
        return [("", lambda w, rep: Call(what, op.method.upper(), pooled_path(op, w, rep) or pooled))]
    return [("", lambda w, rep: generic_call(op, w, rep))]


def finished(op: Operation, call: Call) -> Call:
    """Method and path from the operation where the builder left them out."""
    method = call.method or op.method.upper()
    return dataclasses.replace(call, method=method, path=call.path or op.path)


# -- measuring ------------------------------------------------------------------------------------------


@dataclass
class Row:
    endpoint: str
    what: str
    statuses: list[int] = field(default_factory=list)
    a_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    b: list[Sample] = field(default_factory=list)
    before: list[Sample] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    note: str = ""
    # The whole machine's busy CPU seconds during A's requests, and their wall seconds: how loaded it was.
    busy_s: float = 0.0
    wall_s: float = 0.0
    # A's time is a background job's whole run, not a request's answer: not held to the 2 s.
    background: bool = False

    @property
    def busy_cores(self) -> str:
        return f"{self.busy_s / self.wall_s:.1f}" if self.wall_s >= 0.05 else "-"

    def b_ms(self, q: float) -> float:
        data = sorted(s.latency_s for s in self.b)
        if not data:
            return math.nan
        return 1000 * data[min(len(data) - 1, max(0, math.ceil(q * len(data)) - 1))]

    @property
    def flags(self) -> str:
        out = []
        if self.a_s and max(self.a_s) > SLOW_A_S and not self.background:
            out.append("A>2s")
        if self.b and self.b_ms(1.0) > 1000 * SLOW_B_S:
            out.append("B>100ms")
        if any(s.status != 200 for s in self.b):
            out.append(f"B non-200: {sum(s.status != 200 for s in self.b)}")
        return ", ".join(out)


@dataclass
class Bench:
    args: argparse.Namespace
    session: aiohttp.ClientSession
    url: str
    api_pid: int
    probe: Probe
    world: World
    deadline: float
    rows: list[Row] = field(default_factory=list)

    def auth(self, op: Operation) -> dict[str, str]:
        if op.auth == "admin":
            return {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        if op.auth == "client":
            return {"Authorization": f"Bearer {self.world.key_a}"}
        return {}

    async def send(self, op: Operation, call: Call) -> tuple[int, str, float, float]:
        """A's request: (status, what the answer held, seconds, API CPU seconds); status 0 when it timed
        out or failed. The clock stops once the answer has arrived, before this process reads it."""
        headers = {**self.auth(op), **call.headers}
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        timeout = aiohttp.ClientTimeout(total=self.args.request_timeout_s)
        cpu, started = proc_cpu_s(self.api_pid), time.monotonic()
        try:
            url = self.url + call.path
            async with self.session.request(
                call.method, url, params=call.query, data=call.body, headers=headers, timeout=timeout
            ) as resp:
                status, body = resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, body = 0, type(exc).__name__.encode()
        seconds, cpu = time.monotonic() - started, proc_cpu_s(self.api_pid) - cpu
        for code, message in error_messages(body).items():
            log(f"  {call.method} {call.path}: {code} ({message})")
        return status, answer_summary(body) if status else body.decode(), seconds, cpu

    async def measure(self, op: Operation, variant: str, builder: Builder) -> Row:
        endpoint = f"{op.method.upper()} {op.path}" + (f" ({variant})" if variant else "")
        row = Row(endpoint, "")
        for rep in range(self.args.reps):
            if time.monotonic() > self.deadline:
                row.note = row.note or "not run: time budget spent"
                break
            call = finished(op, builder(self.world, rep))
            row.what = call.what
            await self.probe.settled()
            await asyncio.sleep(CONTROL_S)
            started, busy = time.monotonic(), machine_busy_s()
            row.before.extend(self.probe.overlapping(started - CONTROL_S, started))
            status, answer, seconds, cpu = await self.send(op, call)
            row.busy_s += machine_busy_s() - busy
            row.wall_s += seconds
            await asyncio.sleep(2 * PROBE_PERIOD_S)  # B's requests sent during A's are answered
            row.statuses.append(status)
            row.answers.append(answer)
            row.a_s.append(seconds)
            row.cpu_s.append(cpu)
            row.b.extend(self.probe.overlapping(started, started + seconds))
            if seconds > REPEAT_BELOW_S:
                break
        log(f"{endpoint}: {row.statuses} in {[round(s, 3) for s in row.a_s]} s; B max {row.b_ms(1.0):.0f} ms")
        return row

    async def baseline(self, seconds: float) -> Row:
        await self.probe.settled()
        started, busy = time.monotonic(), machine_busy_s()
        await asyncio.sleep(seconds)
        row = Row("baseline: B alone", f"{seconds:.0f} s of B's GETs, no A request")
        row.b = self.probe.overlapping(started, started + seconds)
        row.busy_s, row.wall_s = machine_busy_s() - busy, seconds
        return row

    async def bulk_job(self, action: str, what: str) -> Row:
        """A bulk job over every listed schedule (or their dead letters), from its create to done: B over
        the whole run, and the API's CPU per schedule (or dead letter) the job matched. Its rate limit is
        raised with the others, so the job runs as fast as the replica lets it: the worst case for B."""
        row = Row(f"bulk job: {action} (its whole run)", what, background=True)
        await self.probe.settled()
        await asyncio.sleep(CONTROL_S)
        headers = {"Authorization": f"Bearer {self.world.key_a}"}
        body = {"action": action, "filter": {"tag": "iso=listed"}}
        if action == "redrive":
            # The seeded letters' 31 days, fixed to when they were seeded: the run is minutes long by now,
            # and a default "to" (now) would put "from" more than the 31 days allowed before it.
            body["filter"]["from"] = (self.world.now - timedelta(days=31) + timedelta(minutes=1)).isoformat()
            body["filter"]["to"] = (self.world.now + timedelta(minutes=1)).isoformat()
        started, busy, cpu = time.monotonic(), machine_busy_s(), proc_cpu_s(self.api_pid)
        row.before.extend(self.probe.overlapping(started - CONTROL_S, started))
        async with self.session.post(f"{self.url}/v1/bulk-jobs", json=body, headers=headers) as resp:
            job = await resp.json()
            assert resp.status == 202, job
        while job["state"] in ("queued", "running") and time.monotonic() < self.deadline + 300:
            await asyncio.sleep(0.1)
            async with self.session.get(f"{self.url}/v1/bulk-jobs/{job['job_id']}", headers=headers) as resp:
                job = await resp.json()
        seconds = time.monotonic() - started
        row.busy_s, row.wall_s = machine_busy_s() - busy, seconds
        await asyncio.sleep(2 * PROBE_PERIOD_S)
        row.statuses.append(200 if job["state"] == "done" else 0)
        reasons = Counter(f["reason"] for f in job["failures"])
        why = f" ({', '.join(f'{n} {r}' for r, n in sorted(reasons.items()))})" if reasons else ""
        row.answers.append(
            f"{job['state']}: matched {job['matched']}, changed {job['changed']}, failed {job['failed']}{why}"
        )
        row.a_s.append(seconds)
        row.cpu_s.append((proc_cpu_s(self.api_pid) - cpu) / max(1, job["matched"]))
        row.b.extend(self.probe.overlapping(started, started + seconds))
        row.note = "A ms: the job's run, from its create to done; API CPU: per schedule (dead letter) matched"
        log(f"{row.endpoint}: {row.answers[-1]} in {seconds:.1f} s; B max {row.b_ms(1.0):.0f} ms")
        return row

    async def run(self) -> None:
        self.rows.append(await self.baseline(self.args.baseline_s))
        for op in operations():
            for variant, builder in calls_of(op, self.world):
                endpoint = f"{op.method.upper()} {op.path}" + (f" ({variant})" if variant else "")
                if self.args.only and not any(text in endpoint for text in self.args.only):
                    continue
                self.rows.append(await self.measure(op, variant, builder))
        if not self.args.only or any(text in "bulk job" for text in self.args.only):
            listed = f"{self.args.listed:,} listed schedules' dead letters over 31 days"
            self.rows.append(await self.bulk_job("redrive", listed))
            self.rows.append(await self.bulk_job("pause", f"{self.args.listed:,} listed schedules, by their tag"))
        self.rows.append(await self.baseline(self.args.baseline_s))


def answer_summary(body: bytes) -> str:
    """A few words on what an answer held: an error's code, a batch's outcome, the length of each list."""
    try:
        value = json.loads(body)
    except ValueError:
        return f"{len(body) >> 10} KiB" if body else ""
    if not isinstance(value, dict):
        return ""
    if isinstance(value.get("error"), dict):
        return str(value["error"].get("code"))
    if isinstance(value.get("results"), list):
        return batch_summary(value["results"])
    lists = [f"{len(v)} {k}" for k, v in value.items() if isinstance(v, list)]
    return ", ".join(lists + (["a next_cursor"] if value.get("next_cursor") else []))


def error_messages(body: bytes) -> dict[str, str]:
    """The first message of each error code in an answer (a batch's items included), for the log."""
    with contextlib.suppress(ValueError):
        value = json.loads(body)
        errors = [value.get("error")] if isinstance(value, dict) else []
        if isinstance(value, dict) and isinstance(value.get("results"), list):
            errors += [r.get("error") for r in value["results"]]
        if isinstance(value, dict) and isinstance(value.get("errors"), list):
            errors += value["errors"]  # redrive-all: the dead letters it could not redrive
        found = [e for e in errors if isinstance(e, dict)]
        return {str(e.get("code")): f"{e.get('field')}: {str(e.get('message'))[:160]}" for e in reversed(found)}
    return {}


def batch_summary(results: list[dict[str, Any]]) -> str:
    codes = Counter(r["error"]["code"] for r in results if "error" in r)
    created = len(results) - sum(codes.values())
    return ", ".join([f"{created} created", *(f"{n} {code}" for code, n in codes.most_common())])


# -- set-up: clients, schedules, and rows written straight to the store ------------------------------------


async def api(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    token: str,
    body: Any = None,
    ok: tuple[int, ...] = (200, 201),
) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    data = body if isinstance(body, bytes) else None if body is None else json_bytes(body)
    if data is not None:
        headers["Content-Type"] = "application/json"
    async with session.request(method, url, data=data, headers=headers) as resp:
        text = await resp.text()
        if resp.status not in ok:
            raise RuntimeError(f"set-up {method} {url}: {resp.status} {text[:500]}")
        return json.loads(text) if text else None


async def register(session: aiohttp.ClientSession, url: str, client_id: str, pollers: int) -> str:
    body = {"client_id": client_id, "poller_count": pollers}
    answer = await api(session, "POST", f"{url}/v1/clients", ADMIN_TOKEN, body)
    key: str = answer["api_key"]
    return key


# The listed schedules' tag: a bulk job over all of them (and their dead letters) runs last.
LISTED_TAG = {"iso": "listed"}


def one_time(fire_at: datetime, payload_size: int) -> dict[str, Any]:
    return {
        "fire_at": int(fire_at.timestamp()),
        "payload": json.loads(payload_of(payload_size)),
        "callback": {"type": "http", "url": CALLBACK_URL},
    }


async def seed_listing(session: aiohttp.ClientSession, url: str, w: World, count: int) -> list[dict[str, Any]]:
    """``count`` one-time schedules spread over the listing's widest range, with large payloads."""
    size = batch_payload_size(w)
    span = w.settings.list_max_range_s - 120
    made: list[dict[str, Any]] = []
    for first in range(0, count, w.settings.max_batch):
        n = min(w.settings.max_batch, count - first)
        items = [
            {**one_time(w.now + timedelta(seconds=60 + (first + i) * span // count), size), "tags": LISTED_TAG}
            for i in range(n)
        ]
        answer = await api(session, "POST", f"{url}/v1/schedules/batch", w.key_a, {"schedules": items})
        made.extend(item for item in answer["results"] if "schedule_id" in item)
    return made


async def seed_pools(session: aiohttp.ClientSession, url: str, w: World) -> None:
    """One-time schedules a day out (for cancels) and recurring ones (pause, resume, trigger, patch)."""
    later = w.now + timedelta(days=1)
    for _ in range(20):
        made = await api(session, "POST", f"{url}/v1/schedules", w.key_a, one_time(later, 64))
        w.one_time.append(made["schedule_id"])
    for _ in range(60):
        body = {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "callback": {"type": "http", "url": CALLBACK_URL}}
        made = await api(session, "POST", f"{url}/v1/schedules", w.key_a, body)
        w.recurring.append(made["schedule_id"])


async def seed_store(store: CassandraStore, w: World, listed: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """What only the pollers write: dead letters with the largest payloads over 31 days, 1,200 runs of one
    schedule, and a day of per-minute statistics from several writers, for the client and the cluster."""
    await seed_dead_letters(store, w, listed[: args.dead_letters])
    runs = [
        Run(w.now - timedelta(minutes=i + 1), Status.SUCCEEDED, 1, w.now - timedelta(minutes=i)) for i in range(1200)
    ]
    w.runs_schedule = w.recurring[-1]
    await store.add_runs(w.client_a, uuid.UUID(w.runs_schedule), runs)
    minute = w.now.replace(second=0, microsecond=0)
    rows = [
        stats.MinuteStats(client, minute - timedelta(minutes=m), f"node-{n}", 10, 1, 1, (1,) * stats.BUCKETS, 0.5)
        for client in (w.client_a, stats.CLUSTER)
        for m in range(1440)
        for n in range(args.stats_writers)
    ]
    for first in range(0, len(rows), 500):
        await store.write_stats(rows[first : first + 500])


async def seed_dead_letters(store: CassandraStore, w: World, listed: list[dict[str, Any]]) -> None:
    payload = payload_of(w.settings.max_payload_bytes)
    callback = HttpCallback(CALLBACK_URL)
    gate = asyncio.Semaphore(16)

    async def one(i: int, item: dict[str, Any]) -> None:
        schedule_id = uuid.UUID(item["schedule_id"])
        fire_at = datetime.fromisoformat(item["fire_at"])
        # Half failed today, the rest spread over the 30 days before: a 31-day page reads every day.
        failed_at = w.now - timedelta(seconds=i) - timedelta(days=0 if i % 2 else 1 + i % 30)
        failed_at = failed_at.replace(microsecond=failed_at.microsecond // 1000 * 1000)
        letter = DeadLetter(
            w.client_a, schedule_id, timing.fire_id(schedule_id, fire_at), failed_at, 5, "HTTP 503", callback, payload
        )
        async with gate:
            await store.add_dead_letter(letter)
        w.dead_letter_ids.append(f"{timing.to_epoch_ms(failed_at)}-{schedule_id}")

    await asyncio.gather(*(one(i, item) for i, item in enumerate(listed)))


async def set_up(session: aiohttp.ClientSession, url: str, store: CassandraStore, args: argparse.Namespace) -> World:
    s = api_settings(args)
    key_a = await register(session, url, "iso-a", s.poller_count_max)
    w = World(s, key_a, await register(session, url, "iso-b", 16), "iso-a", "iso-spare")
    await register(session, url, w.spare_client, 4)
    limits = {"max_in_flight": 10, "release_timeout_s": 60}
    await api(session, "PUT", f"{url}/v1/throttle-policies/{THROTTLE}", w.key_a, limits)
    for i in range(cal.MAX_PER_SCHEDULE + 12):  # named by schedules, read and deleted by rows
        name = f"iso-cal-{i:02d}-" + "k" * 50
        await api(session, "PUT", f"{url}/v1/calendars/{name}", w.key_a, largest_calendar(w))
        w.calendars.append(name)
    b_one = await api(session, "POST", f"{url}/v1/schedules", w.key_b, one_time(w.now + timedelta(days=2), 64))
    w.b_schedule = b_one["schedule_id"]
    big = await api(session, "POST", f"{url}/v1/schedules", w.key_a, single_create(w, 999, "").body)
    w.big_schedule = big["schedule_id"]
    listed = await seed_listing(session, url, w, args.listed)
    await seed_pools(session, url, w)
    await seed_store(store, w, listed, args)
    log(f"set up: {len(listed)} listed schedules, {len(w.dead_letter_ids)} dead letters, 1,200 runs, stats")
    return w


# -- the API process and its settings -----------------------------------------------------------------


def high_limits(base_env: dict[str, str]) -> dict[str, str]:
    """Every rate limit of ``ApiSettings`` (``*_rate_per_s``, ``*_burst``) set high through its TICKD_*
    variable, each kept only if ``ApiSettings.from_env`` takes it (so new limits are raised too)."""
    chosen: dict[str, str] = {}
    for name in (f.name for f in dataclasses.fields(ApiSettings)):
        if not (name.endswith("rate_per_s") or name.endswith("burst")):
            continue
        env_name = f"TICKD_{name.upper()}"
        for value in ("10000000", "1000000", "100000"):
            with contextlib.suppress(ConfigError, ValueError):
                ApiSettings.from_env({**base_env, **chosen, env_name: value})
                chosen[env_name] = value
                break
    return chosen


def api_env(args: argparse.Namespace) -> dict[str, str]:
    extra = dict(kv.split("=", 1) for kv in args.api_env)
    return {**high_limits({**os.environ, **extra}), **extra}


def api_settings(args: argparse.Namespace) -> ApiSettings:
    """The limits the API process runs with: its own environment, read the way it reads it."""
    return ApiSettings.from_env({**os.environ, **api_env(args)})


async def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, str]]:
    settings = dataclasses.replace(StoreSettings.from_env(), keyspace=KEYSPACE)
    log(f"fresh keyspace {KEYSPACE}")
    await asyncio.to_thread(drop, settings)
    await asyncio.to_thread(migrate, settings)
    env = api_env(args)
    apis = ApiProcesses(1, settings, env)
    apis.log_dir = REPO / ".cache" / "bench-isolation"
    timeout = aiohttp.ClientTimeout(total=120)
    with apis:
        store = await CassandraStore.connect(settings)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await apis.wait_ready(session)
                url = apis.urls[0]
                world = await set_up(session, url, store, args)
                rows = await measure_all(args, session, url, apis.pids[0], world)
        finally:
            await store.close()
    return rows, env


async def measure_all(
    args: argparse.Namespace, session: aiohttp.ClientSession, url: str, pid: int, world: World
) -> list[Row]:
    probe = Probe(f"{url}/v1/schedules/{world.b_schedule}", world.key_b)
    try:
        deadline = time.monotonic() + args.budget_s
        bench = Bench(args, session, url, pid, probe, world, deadline)
        await bench.run()
        return bench.rows
    finally:
        probe.close()


# -- the report -------------------------------------------------------------------------------------------


def fmt_ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):.0f}" if values else "-"


def a_ms(values: list[float]) -> str:
    return f"{fmt_ms(values)} / {1000 * max(values):.0f}" if values else "-"


def statuses(row: Row) -> str:
    counts: dict[int, int] = {}
    for status in row.statuses:
        counts[status] = counts.get(status, 0) + 1
    answers = sorted(set(row.answers) - {""})
    held = f" ({'; '.join(answers)})" if answers else ""
    return (" ".join(f"{s}" if n == 1 else f"{s}x{n}" for s, n in counts.items()) or "-") + held


def print_report(rows: list[Row], env: dict[str, str], args: argparse.Namespace) -> None:
    print(f"\n### bench-isolation: {os.cpu_count()} cores ({cpu_model()}), one tickd-api process\n")
    print(
        "| endpoint | A's request | A's status | A ms (median / max) | B p50 ms | B p99 ms | B max ms | B n "
        "| B max ms just before | API CPU ms / A request | machine busy, cores | flags |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        b = (f"{r.b_ms(0.5):.0f}", f"{r.b_ms(0.99):.0f}", f"{r.b_ms(1.0):.0f}") if r.b else ("-", "-", "-")
        flags = "; ".join(x for x in (r.flags, r.note) if x)
        before = f"{1000 * max(x.latency_s for x in r.before):.0f}" if r.before else "-"
        print(
            f"| {r.endpoint} | {r.what} | {statuses(r)} | {a_ms(r.a_s)} | {' | '.join(b)} | {len(r.b)} | {before} | "
            f"{fmt_ms(r.cpu_s)} | {r.busy_cores} | {flags} |"
        )
    flagged = [r for r in rows if "A>2s" in r.flags or "B>100ms" in r.flags]
    print(
        f"\n{len(flagged)} of {len(rows)} rows flagged (A over {SLOW_A_S:g} s in any repetition, or B's max over "
        f"{1000 * SLOW_B_S:g} ms)."
    )
    raised = ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none"
    print(
        f"\nA: up to {args.reps} repetitions per row (one when it took over {REPEAT_BELOW_S:g} s); status 0 = no "
        f"answer within {args.request_timeout_s:g} s. B: GET /v1/schedules/{{id}} every {1000 * PROBE_PERIOD_S:g} ms "
        f"from its own process, open loop; its columns pool every B request that overlapped A's; 'just before': "
        f"B alone in the {1000 * CONTROL_S:g} ms before each A request. API CPU (in "
        f"{1000 // CLK_TCK} ms ticks) includes B's requests. Machine busy: every process's CPU during A's "
        f"requests (of {os.cpu_count()} cores; others' work on the machine shows here). API environment beyond "
        f"the defaults: {raised}."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench-isolation", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per endpoint (median shown)")
    parser.add_argument("--budget-s", type=float, default=180.0, help="no new row starts after this long")
    parser.add_argument("--request-timeout-s", type=float, default=30.0, help="A's requests give up after this")
    parser.add_argument("--baseline-s", type=float, default=3.0, help="B alone, before and after")
    parser.add_argument("--listed", type=int, default=2000, help="schedules seeded in the listing range")
    parser.add_argument("--dead-letters", type=int, default=400, help="dead letters seeded (64 KiB payloads)")
    parser.add_argument("--stats-writers", type=int, default=4, help="writers per seeded statistics minute")
    parser.add_argument("--api-env", action="append", default=[], metavar="NAME=VALUE", help="extra API env")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT", help="measure only rows whose endpoint contains TEXT"
    )
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--probe-key", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(probe(args.probe, args.probe_key, PROBE_PERIOD_S))
        return 0
    rows, env = asyncio.run(run(args))
    print_report(rows, env, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
