"""tickd: the tickd API from a shell, on the SDK.

Settings: --url or TICKD_URL (default http://127.0.0.1:8080); --api-key or TICKD_API_KEY (schedules,
dead letters, policies, calendars, events, stats); --admin-token or TICKD_ADMIN_TOKEN (clients, admin).

Exit codes: 0 ok; 1 unexpected error; 2 usage (bad arguments); 3 not found; 4 conflict, or a version
--if-match did not match (also: a `dead-letters redrive` of many that could not redrive some); 5 invalid
input (the API's 400/413/415/422, naming the field); 6 unauthorized or forbidden; 7 unavailable or rate
limited; 141 the output's reader went away (`tickd schedules list ... | head`), said nowhere, as other
command-line tools do.

Output: -o table (default: a list shows the columns most wanted), -o wide (a list shows every field as a
column) or -o json (the answer as JSON).

Completion: eval "$(tickd completion bash)".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tickd_client import _completion
from tickd_client._core import env_settings
from tickd_client._output import plain, render
from tickd_client._sync import Tickd
from tickd_client.calls import CallbackSpec, Time
from tickd_client.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    PreconditionFailed,
    RateLimited,
    TickdError,
    Unauthorized,
    Unavailable,
)
from tickd_client.models import Cluster, HttpCallback, Instance, KafkaCallback, Occurrence, Redrive, Stats
from tickd_client.retry import NO_RETRY, RetryPolicy

OK, UNEXPECTED, USAGE, NOT_FOUND, CONFLICT, INVALID, AUTH, UNAVAILABLE = range(8)
BROKEN_PIPE = 128 + 13  # as a shell reports a process ended by SIGPIPE
_EXIT_BY_ERROR: tuple[tuple[type[TickdError], int], ...] = (
    (NotFound, NOT_FOUND),
    (Conflict, CONFLICT),
    (PreconditionFailed, CONFLICT),  # the schedule changed since --if-match's version was read
    (Invalid, INVALID),
    (Unauthorized, AUTH),
    (Forbidden, AUTH),
    (Unavailable, UNAVAILABLE),
    (RateLimited, UNAVAILABLE),
)
_RULE = ("cron", "timezone", "every", "start_at", "end_at", "max_fires", "on_gap", "on_overlap", "calendars")
_TIMES = ("fire_at", "start_at", "end_at", "after")
Handler = Callable[[Tickd, argparse.Namespace], Any]


class UsageError(Exception):
    """Arguments that parse but cannot be sent (a payload that is not JSON, a header without a colon)."""


@dataclass(frozen=True)
class Finished:
    """What a handler returns to print ``value`` and exit with ``code`` rather than 0."""

    value: Any
    code: int


def _time(text: str) -> Time:
    return int(text) if text.isdigit() else text


def _json_arg(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{name} is not JSON: {exc}") from None


def _given(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    found = {name: getattr(args, name, None) for name in names}
    return {name: _time(v) if name in _TIMES else v for name, v in found.items() if v is not None}


def _callback(args: argparse.Namespace) -> CallbackSpec | None:
    if args.callback is not None:
        return dict(_json_arg(args.callback, "--callback"))
    if args.kafka_topic is not None:
        return KafkaCallback(args.kafka_topic)
    if args.callback_url is None:
        return None
    headers = {}
    for header in args.callback_header:
        name, colon, value = header.partition(":")
        if not colon:
            raise UsageError(f"--callback-header {header!r}: write it as 'Name: value'")
        headers[name.strip()] = value.strip()
    return HttpCallback(args.callback_url, args.callback_method, headers, args.callback_timeout_s)


def _schedule_fields(args: argparse.Namespace) -> dict[str, Any]:
    named = (*_RULE, "fire_at", "delay_s", "jitter", "events", "window", "throttle", "pause_after_failures")
    fields = _given(args, named)
    if args.payload is not None:
        fields["payload"] = _json_arg(args.payload, "--payload")
    callback = _callback(args)
    if callback is not None:
        fields["callback"] = callback
    if args.tag:
        fields["tags"] = dict(_tag(given) for given in args.tag)
    _missed(args, fields)
    return fields


def _missed(args: argparse.Namespace, fields: dict[str, Any]) -> None:
    """--missed-policy (with --missed-deadline) as ``fields["missed"]``; --no-missed, where offered: None."""
    clear = getattr(args, "no_missed", False)
    if args.missed_deadline is not None and args.missed_policy is None:
        raise UsageError("--missed-deadline goes with --missed-policy")
    if args.missed_policy is not None and clear:
        raise UsageError("give --missed-policy or --no-missed, not both")
    if args.missed_policy is not None:
        deadline = {} if args.missed_deadline is None else {"deadline": args.missed_deadline}
        fields["missed"] = {"policy": args.missed_policy, **deadline}
    elif clear:
        fields["missed"] = None


def _tag(given: str) -> tuple[str, str]:
    key, sep, value = given.partition("=")
    if not sep:
        raise UsageError(f"--tag {given!r}: write it as key=value")
    return key, value


# Handlers: (client, args) -> what to print.


def _clients_create(client: Tickd, args: argparse.Namespace) -> Any:
    return client.create_client(args.client_id, args.pollers, args.kafka_topic)


def _clients_update(**change: Any) -> Handler:
    return lambda client, args: client.update_client(args.client_id, **change)


def _schedules_create(client: Tickd, args: argparse.Namespace) -> Any:
    fields = _schedule_fields(args)
    if "callback" not in fields:
        raise UsageError("give a callback: --callback-url URL, --kafka-topic TOPIC or --callback JSON")
    schedule = client.create_schedule(idempotency_key=args.idempotency_key, **fields)
    return schedule.schedule_id if args.quiet else schedule


def _schedules_trigger(client: Tickd, args: argparse.Namespace) -> Any:
    trigger = client.trigger_schedule(args.schedule_id, idempotency_key=args.idempotency_key)
    return trigger.schedule_id if args.quiet else trigger


def _schedules_put_by_key(client: Tickd, args: argparse.Namespace) -> Any:
    fields = _schedule_fields(args)
    if "callback" not in fields:
        raise UsageError("give a callback: --callback-url URL, --kafka-topic TOPIC or --callback JSON")
    _debounce(args, fields)
    schedule = client.put_schedule_by_key(args.key, if_match=_if_match(args), **fields)
    return schedule.schedule_id if args.quiet else schedule


def _debounce(args: argparse.Namespace, fields: dict[str, Any]) -> None:
    """--debounce-window-s (with --debounce-max-wait-s, --debounce-edge) as ``fields["debounce"]``."""
    if args.debounce_window_s is None:
        if args.debounce_max_wait_s is not None or args.debounce_edge is not None:
            raise UsageError("--debounce-max-wait-s and --debounce-edge go with --debounce-window-s")
        return
    debounce: dict[str, Any] = {"window_s": args.debounce_window_s}
    if args.debounce_max_wait_s is not None:
        debounce["max_wait_s"] = args.debounce_max_wait_s
    if args.debounce_edge is not None:
        debounce["edge"] = args.debounce_edge
    fields["debounce"] = debounce


def _if_match_arg(parser: argparse.ArgumentParser, what: str = "schedule") -> None:
    parser.add_argument(
        "--if-match",
        type=int,
        metavar="VERSION",
        help=f"change only this version of the {what} (its 'version'); else exit 4 with precondition_failed",
    )


def _if_match(args: argparse.Namespace) -> int | None:
    return args.if_match if isinstance(args.if_match, int) else None


def _conditional(change: Callable[..., Any]) -> Handler:
    """A handler calling ``change(client, schedule_id, if_match=...)``: cancel, resume."""
    return lambda client, args: change(client, args.schedule_id, if_match=_if_match(args))


def _schedules_pause(client: Tickd, args: argparse.Namespace) -> Any:
    until = None if args.until is None else _until(args.until)
    return client.pause_schedule(args.schedule_id, until=until, note=args.note, if_match=_if_match(args))


def _until(text: str) -> datetime | int:
    """--until as epoch seconds or a time with an offset, checked here: a clear error naming the option."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        given = datetime.fromisoformat(text)
    except ValueError:
        given = None
    if given is None or given.tzinfo is None:
        raise UsageError(
            f"--until {text!r}: give RFC 3339 with an offset (2026-12-24T18:00:00Z, ...+01:00) or epoch seconds"
        )
    return given


def _schedules_update(client: Tickd, args: argparse.Namespace) -> Any:
    fields = _schedule_fields(args)
    if args.no_throttle:
        fields["throttle"] = None
    if args.no_tags:
        fields["tags"] = None
    if args.no_calendars:
        fields["calendars"] = None
    return client.update_schedule(args.schedule_id, if_match=_if_match(args), **fields)


def _schedules_list(client: Tickd, args: argparse.Namespace) -> Any:
    start: Time | None = None
    end: Time | None = None
    if args.tag is None or args.start or args.end:  # a tag alone lists every schedule with it
        start = _time(args.start) if args.start else datetime.now(UTC)
        end = _time(args.end) if args.end else _default_end(start)
    found = client.list_schedules(
        start, end, status=args.status, tag=args.tag, target=args.target, page_size=args.page_size
    )
    return list(itertools.islice(found, args.limit))


def _schedules_backfill(client: Tickd, args: argparse.Namespace) -> Any:
    job = client.backfill_schedule(
        args.schedule_id,
        start=_time(args.start),
        end=_time(args.end),
        rate_per_s=args.rate_per_s,
        idempotency_key=args.idempotency_key,
    )
    if args.wait:
        job = client.wait_bulk_job(job.job_id, poll_s=args.poll_s, timeout_s=args.wait_s)
    return job.job_id if args.quiet else job


def _bulk_start(action: str) -> Handler:
    def start(client: Tickd, args: argparse.Namespace) -> Any:
        job = client.create_bulk_job(
            action,
            tag=args.tag,
            status=args.status,
            due_from=_optional_time(args.start),
            due_to=_optional_time(args.end),
            target=args.target,
            dry_run=args.dry_run,
            idempotency_key=args.idempotency_key,
        )
        if args.wait:
            job = client.wait_bulk_job(job.job_id, poll_s=args.poll_s, timeout_s=args.wait_s)
        return job.job_id if args.quiet else job

    return start


def _default_end(start: Time) -> Time:
    if isinstance(start, datetime):
        return start + timedelta(days=1)
    raise UsageError("--to is needed when --from is given")


def _calendars_put(client: Tickd, args: argparse.Namespace) -> Any:
    return client.put_calendar(
        args.name,
        timezone=args.timezone,
        dates=args.date,
        ranges=[_range(given) for given in args.range],
        weekdays=args.weekday,
        business_days=args.business_days,
        if_match=_if_match(args),
    )


def _range(given: str) -> tuple[str, str]:
    start, sep, end = given.partition("/")
    if not sep:
        raise UsageError(f"--range {given!r}: write it as FROM/TO, e.g. 2026-08-03T00:00/2026-08-17T00:00")
    return start, end


def _runs(client: Tickd, args: argparse.Namespace) -> Any:
    return list(itertools.islice(client.runs(args.schedule_id, page_size=args.page_size), args.limit))


def _audit(client: Tickd, args: argparse.Namespace) -> Any:
    if args.schedule is not None:
        records = client.schedule_audit(args.schedule, page_size=args.page_size)
    else:
        records = client.audit(_optional_time(args.start), _optional_time(args.end), page_size=args.page_size)
    return list(itertools.islice(records, args.limit))


def _notices(client: Tickd, args: argparse.Namespace) -> Any:
    found = client.notices(_optional_time(args.start), _optional_time(args.end), page_size=args.page_size)
    return list(itertools.islice(found, args.limit))


def _settings(client: Tickd, args: argparse.Namespace) -> Any:
    """Shown as they are, or changed: only the options given change."""
    change: dict[str, Any] = {}
    for name in ("pause_after_failures", "retention_s", "audit_retention_s"):
        if getattr(args, name) is not None:
            change[name] = getattr(args, name)
    given = [args.notify_url is not None, args.notify_topic is not None, args.no_notify]
    if sum(given) > 1:
        raise UsageError("give one of --notify-url, --notify-topic and --no-notify")
    if args.notify_url is not None:
        change["notify"] = {"type": "http", "url": args.notify_url}
    elif args.notify_topic is not None:
        change["notify"] = {"type": "kafka", "topic": args.notify_topic}
    elif args.no_notify:
        change["notify"] = None
    _missed(args, change)
    return client.patch_settings(**change) if change else client.get_settings()


def _optional_time(text: str | None) -> Time | None:
    return _time(text) if text else None


def _dead_letters_list(client: Tickd, args: argparse.Namespace) -> Any:
    start, end = _optional_time(args.start), _optional_time(args.end)
    found = client.list_dead_letters(start, end, schedule_id=args.schedule, page_size=args.page_size)
    return list(itertools.islice(found, args.limit))


def _dead_letters_redrive(client: Tickd, args: argparse.Namespace) -> Any:
    """One dead letter by id, or every one not yet redriven that the filters match."""
    filtered = args.schedule is not None or args.start is not None or args.end is not None or args.all
    at = _optional_time(args.at)
    if args.dead_letter_id is not None:
        if filtered:
            raise UsageError("give a dead letter id or filters (--schedule, --from, --to, --all), not both")
        return client.redrive_dead_letter(args.dead_letter_id, at=at)
    if not filtered:
        raise UsageError("give a dead letter id, or --schedule/--from/--to (--all: every one of the last 7 days)")
    start, end = _optional_time(args.start), _optional_time(args.end)
    done = client.redrive_dead_letters(start, end, schedule_id=args.schedule, at=at, page_size=args.page_size)
    shown = done if getattr(args, "output", "table") == "json" else _redrive_rows(done)
    return Finished(shown, CONFLICT if done.errors else OK)


def _redrive_rows(done: Redrive) -> list[dict[str, Any]]:
    """A redrive of many as one table: each dead letter, redriven (and when due) or why not."""
    rows = [
        {"dead_letter_id": d.dead_letter_id, "outcome": "redriven", "detail": f"due {plain(d.redriven_due_at)}"}
        for d in done.redriven
    ]
    rows += [{"dead_letter_id": e.dead_letter_id, "outcome": e.code, "detail": e.message} for e in done.errors]
    return rows


def _admin_nodes(client: Tickd, args: argparse.Namespace) -> Any:
    cluster = client.cluster()
    return cluster if getattr(args, "output", "table") == "json" else _cluster_rows(cluster)


def _cluster_rows(cluster: Cluster) -> list[dict[str, Any]]:
    """The cluster view as one table: a row per instance, under the live node holding it or none."""
    rows: list[dict[str, Any]] = []
    for node in cluster.nodes:
        held: list[Instance | None] = [*node.instances] or [None]  # a node holding nothing still shows
        for instance in held:
            rows.append(_instance_row(node.node_id, node.heartbeat_age_s, instance))
    rows += [_instance_row(None, None, instance) for instance in cluster.unowned]
    return rows


def _instance_row(node_id: str | None, age_s: float | None, instance: Instance | None) -> dict[str, Any]:
    keys = ("client_id", "poller_id", "epoch", "owner", "draining")
    row = {"node_id": node_id, "heartbeat_age_s": age_s}
    return {**row, **{key: getattr(instance, key, None) for key in keys}}


def _admin_stats(client: Tickd, args: argparse.Namespace) -> Any:
    found = client.admin_stats(args.client)
    return found if getattr(args, "output", "table") == "json" else _stats_rows(found)


def _stats(client: Tickd, args: argparse.Namespace) -> Any:
    found = client.stats()
    return found if getattr(args, "output", "table") == "json" else _stats_rows(found)


def _stats_rows(found: Stats) -> list[dict[str, Any]]:
    """A row per window (5m, 1h, 24h); first-attempt lateness as seconds, ``-`` when nothing fired."""
    return [
        {
            "window": _span(w.window_s),
            "fired": w.fired,
            "delivered": w.delivered,
            "retried": w.retried,
            "failed": w.failed,
            "p50": _seconds(w.lateness_p50_s),
            "p99": _seconds(w.lateness_p99_s),
            "max": _seconds(w.lateness_max_s),
        }
        for w in found.windows
    ]


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:g}s"


def _span(seconds: int) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _preview(client: Tickd, args: argparse.Namespace) -> Any:
    after = _time(args.after) if args.after else None
    found = client.preview(count=args.count, after=after, **_given(args, _RULE))
    rows = [_with_note(o, found[i - 1] if i else None) for i, o in enumerate(found)]
    if getattr(args, "output", "table") != "json" and not any(o.excluded_by for o in found):
        for row in rows:  # no calendar excludes any of them: no column saying so
            del row["excluded_by"]
    return rows


def _with_note(occurrence: Occurrence, before: Occurrence | None) -> dict[str, Any]:
    """The occurrence, noting a change of the zone's UTC offset since the one before (DST)."""
    row: dict[str, Any] = plain(occurrence)
    was, now = (before.local.utcoffset() if before else None), occurrence.local.utcoffset()
    row["note"] = f"UTC offset {_offset(was)} -> {_offset(now)}" if before and was != now else None
    return row


def _offset(delta: timedelta | None) -> str:
    minutes = int((delta or timedelta()).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _dev(dev_args: Sequence[str]) -> None:
    """Replace this process with ``tickd-dev`` (the one beside this Python first), passing its arguments."""
    beside = Path(sys.executable).parent / "tickd-dev"
    found = str(beside) if beside.exists() else shutil.which("tickd-dev")
    if found is None:
        print(
            "tickd dev: tickd-dev is not installed here; it comes with the tickd server package "
            "(in a tickd checkout: make dev)",
            file=sys.stderr,
        )
        raise SystemExit(UNEXPECTED)
    os.execv(found, ["tickd-dev", *dev_args])


def _completion_bash(client: Tickd | None, args: argparse.Namespace) -> Any:
    print(_completion.bash(build_parser()), end="")
    return None


# The parser.


def _common() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (defaults applied after parsing)."""
    common = argparse.ArgumentParser(add_help=False)
    s = argparse.SUPPRESS
    common.add_argument("--url", default=s, help="the API (TICKD_URL; default http://127.0.0.1:8080)")
    common.add_argument("--api-key", default=s, help="a client's API key (TICKD_API_KEY)")
    common.add_argument("--admin-token", default=s, help="the admin token, for clients (TICKD_ADMIN_TOKEN)")
    common.add_argument(
        "--output",
        "-o",
        choices=("table", "wide", "json"),
        default=s,
        help="table (default), wide (every column) or json",
    )
    common.add_argument("--timeout-s", type=float, default=s, help="per request (default 10)")
    common.add_argument("--no-retry", action="store_true", default=s, help="send each request once")
    return common


def _leaf(group: Any, name: str, handler: Handler, help: str, common: argparse.ArgumentParser) -> Any:
    parser = group.add_parser(name, help=help, description=help, parents=[common])
    parser.set_defaults(handler=handler)
    return parser


def _rule_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cron", help="5-field cron or @hourly/@daily/@weekly/@monthly")
    parser.add_argument("--timezone", help="IANA zone the cron is read in (default UTC)")
    parser.add_argument("--every", help="an interval: <n>s|m|h|d")
    parser.add_argument("--start-at", dest="start_at", help="first fire (RFC 3339 with offset, or epoch s)")
    parser.add_argument("--end-at", dest="end_at", help="last possible fire")
    parser.add_argument("--max-fires", dest="max_fires", type=int)
    parser.add_argument("--on-gap", dest="on_gap", choices=("shift", "skip"), help="a local time DST skips")
    parser.add_argument("--on-overlap", dest="on_overlap", choices=("first", "last", "both"))
    parser.add_argument(
        "--calendar",
        dest="calendars",
        action="append",
        metavar="NAME",
        help="skip what this calendar of yours excludes (repeatable; on update: all replaced)",
    )


def _schedule_args(parser: argparse.ArgumentParser) -> None:
    _rule_args(parser)
    parser.add_argument("--fire-at", dest="fire_at", help="RFC 3339 with an offset, or epoch seconds")
    parser.add_argument("--delay-s", dest="delay_s", type=float, help="seconds from now")
    parser.add_argument("--payload", help="any JSON, delivered as given")
    parser.add_argument("--jitter", help="spread each fire over [0, jitter): 30s, 5m")
    parser.add_argument("--events", type=int, help="events per fire")
    parser.add_argument("--window", help="spread the events over this long: 2h")
    parser.add_argument("--throttle", help="a throttle policy's name")
    parser.add_argument("--callback-url", help="HTTP callback URL")
    parser.add_argument("--callback-method", default="POST")
    parser.add_argument("--callback-header", action="append", default=[], help="'Name: value' (repeatable)")
    parser.add_argument("--callback-timeout-s", type=float, default=5.0)
    parser.add_argument("--kafka-topic", help="Kafka callback topic (granted to the client)")
    parser.add_argument("--callback", help='the callback as JSON: {"type": "http", "url": ...}')
    parser.add_argument("--tag", action="append", default=[], help="key=value (repeatable; on update: all replaced)")
    parser.add_argument(
        "--pause-after-failures",
        dest="pause_after_failures",
        type=int,
        metavar="N",
        help="recurring: pause after N fires in a row dead-lettered (0: never; default: your settings')",
    )
    _missed_args(parser, "recurring: what an occurrence that cannot start in time does (default: your settings')")


_MISSED_POLICIES = ("fire_all", "skip", "fire_once")


def _debounce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debounce-window-s",
        dest="debounce_window_s",
        type=float,
        metavar="S",
        help="debounce: fire S seconds after the latest put of the key, each put pushing it back (1-86400; "
        "no --fire-at or --delay-s)",
    )
    parser.add_argument(
        "--debounce-max-wait-s",
        dest="debounce_max_wait_s",
        type=float,
        metavar="S",
        help="with --debounce-window-s: never later than S seconds after the burst's first put (default: no cap)",
    )
    parser.add_argument(
        "--debounce-edge",
        dest="debounce_edge",
        choices=("trailing", "leading"),
        help="with --debounce-window-s: leading also fires a burst's first put at once (default trailing)",
    )


def _missed_args(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--missed-policy", dest="missed_policy", choices=_MISSED_POLICIES, help=help)
    parser.add_argument(
        "--missed-deadline",
        dest="missed_deadline",
        metavar="DURATION",
        help="with skip or fire_once: how late a first attempt may start, <n>s|m|h|d (default 60s; at most 7d)",
    )


def _clients(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("clients", help="register and manage clients (admin token)").add_subparsers(
        required=True, metavar="COMMAND"
    )
    create = _leaf(group, "create", _clients_create, "register a client; prints its API key once", common)
    create.add_argument("client_id")
    create.add_argument("--pollers", type=int, required=True, help="poller count")
    create.add_argument("--kafka-topic", action="append", default=[], help="a topic or prefix.* (repeatable)")
    _leaf(group, "list", lambda c, a: c.list_clients(), "all clients", common)
    _leaf(group, "get", lambda c, a: c.get_client(a.client_id), "one client", common).add_argument("client_id")
    resize = _leaf(group, "resize", lambda c, a: c.resize_client(a.client_id, a.pollers), "set poller count", common)
    resize.add_argument("client_id")
    resize.add_argument("--pollers", type=int, required=True)
    _leaf(group, "deactivate", _clients_update(active=False), "stop it creating", common).add_argument("client_id")
    _leaf(group, "activate", _clients_update(active=True), "let it create again", common).add_argument("client_id")
    rotate = _leaf(group, "rotate-key", lambda c, a: c.rotate_key(a.client_id), "a new API key", common)
    rotate.add_argument("client_id")
    signing = _leaf(
        group,
        "rotate-signing-secret",
        lambda c, a: c.rotate_signing_secret(a.client_id),
        "a new callback signing secret (the old one signs too for a while)",
        common,
    )
    signing.add_argument("client_id")


def _schedules(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("schedules", help="create, read, list and cancel schedules").add_subparsers(
        required=True, metavar="COMMAND"
    )
    create = _leaf(group, "create", _schedules_create, "a one-time or recurring schedule", common)
    _schedule_args(create)
    create.add_argument("--idempotency-key", help="the same key and request create one schedule")
    create.add_argument("--quiet", "-q", action="store_true", help="print only the schedule id")
    _leaf(group, "get", lambda c, a: c.get_schedule(a.schedule_id), "one schedule", common).add_argument("schedule_id")
    update = _leaf(group, "update", _schedules_update, "reschedule or change a schedule", common)
    update.add_argument("schedule_id")
    _schedule_args(update)
    update.add_argument("--no-throttle", action="store_true", help="remove the throttle policy")
    update.add_argument("--no-tags", action="store_true", help="remove every tag")
    update.add_argument("--no-calendars", action="store_true", help="name no calendar any more")
    update.add_argument("--no-missed", action="store_true", help="no missed-fire policy of its own: your default")
    _if_match_arg(update)
    listing = _leaf(group, "list", _schedules_list, "schedules due in [--from, --to)", common)
    listing.add_argument("--from", dest="start", help="default: now")
    listing.add_argument("--to", dest="end", help="default: --from + 1 day")
    listing.add_argument("--status", choices=("scheduled", "paused", "succeeded", "failed", "cancelled"))
    listing.add_argument("--tag", help="key=value: only schedules with this tag (alone: every one, any due time)")
    listing.add_argument("--target", help="only schedules calling this host (HTTP) or topic (Kafka)")
    listing.add_argument("--page-size", type=int, default=100)
    listing.add_argument("--limit", type=int, default=None, help="stop after this many")
    for name, change, help in (
        ("cancel", Tickd.cancel_schedule, "cancel a schedule"),
        ("resume", Tickd.resume_schedule, "resume a paused one"),
    ):
        leaf = _leaf(group, name, _conditional(change), help, common)
        leaf.add_argument("schedule_id")
        _if_match_arg(leaf)
    pause = _leaf(group, "pause", _schedules_pause, "fire nothing until resumed (or until --until)", common)
    pause.add_argument("schedule_id")
    pause.add_argument(
        "--until",
        metavar="TIME",
        help="resume by itself then: RFC 3339 with an offset, or epoch seconds (ahead of now)",
    )
    pause.add_argument("--note", metavar="TEXT", help="shown with the pause (at most 500 characters)")
    _if_match_arg(pause)
    trigger = _leaf(group, "trigger", _schedules_trigger, "one extra fire now (prints the trigger)", common)
    trigger.add_argument("schedule_id")
    trigger.add_argument("--idempotency-key", help="the same key triggers once")
    trigger.add_argument("--quiet", "-q", action="store_true", help="print only the trigger's schedule id")
    backfill = _leaf(
        group, "backfill", _schedules_backfill, "fire a recurring schedule's past occurrences once each", common
    )
    backfill.add_argument("schedule_id")
    backfill.add_argument("--from", dest="start", required=True, help="its occurrences at or after this time")
    backfill.add_argument("--to", dest="end", required=True, help="and before this time (no later than now)")
    backfill.add_argument("--rate-per-s", type=float, help="fires a second (default: the server's)")
    backfill.add_argument("--wait", action="store_true", help="wait until the backfill is done and print it")
    backfill.add_argument("--wait-s", type=float, default=3600.0, help="at most this long (default 3600)")
    backfill.add_argument("--poll-s", type=float, default=1.0, help="how often to look (default 1)")
    backfill.add_argument("--idempotency-key", help="the same key and request start one backfill")
    backfill.add_argument("--quiet", "-q", action="store_true", help="print only the job id")
    put = _leaf(group, "put-by-key", _schedules_put_by_key, "create or replace the schedule of a key", common)
    put.add_argument("key", help="your business key: 1-128 of A-Z a-z 0-9 . _ ~ : @ -")
    _schedule_args(put)
    _debounce_args(put)
    put.add_argument("--quiet", "-q", action="store_true", help="print only the schedule id")
    _if_match_arg(put)
    get_key = _leaf(group, "get-by-key", lambda c, a: c.get_schedule_by_key(a.key), "a key's schedule", common)
    get_key.add_argument("key")
    cancel_key = _leaf(
        group,
        "cancel-by-key",
        lambda c, a: c.cancel_schedule_by_key(a.key, if_match=_if_match(a)),
        "cancel a key's schedule",
        common,
    )
    cancel_key.add_argument("key")
    _if_match_arg(cancel_key)
    runs = _leaf(group, "runs", _runs, "a schedule's fires, newest first", common)
    runs.add_argument("schedule_id")
    runs.add_argument("--page-size", type=int, default=100)
    runs.add_argument("--limit", type=int, default=None, help="stop after this many")
    preview = _leaf(group, "preview", _preview, "the next fire times of a rule (writes nothing)", common)
    _rule_args(preview)
    preview.add_argument("--count", type=int, default=10)
    preview.add_argument("--after", help="from this time (default: now)")


def _bulk(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser(
        "bulk", help="act on every schedule with a tag: cancel, pause, resume, trigger, redrive (background jobs)"
    ).add_subparsers(required=True, metavar="COMMAND")
    for action, help in (
        ("cancel", "cancel every schedule the filter selects"),
        ("pause", "pause every schedule the filter selects"),
        ("resume", "resume every paused schedule the filter selects"),
        ("trigger", "fire every schedule the filter selects once more now"),
        ("redrive", "redrive the dead letters (not yet redriven) of every schedule the filter selects"),
    ):
        leaf = _leaf(group, action, _bulk_start(action), help, common)
        leaf.add_argument("--tag", required=True, help="key=value: the schedules with this tag")
        leaf.add_argument("--status", choices=("scheduled", "paused", "succeeded", "failed", "cancelled"))
        if action == "redrive":  # the range is when the fires failed, as for dead letters
            leaf.add_argument("--from", dest="start", help="failed at or after (default: 7 days before --to)")
            leaf.add_argument("--to", dest="end", help="failed before (default: now)")
        else:
            leaf.add_argument("--from", dest="start", help="only those due at or after this time")
            leaf.add_argument("--to", dest="end", help="only those due before this time")
        leaf.add_argument("--target", help="only those calling this host (HTTP) or topic (Kafka)")
        leaf.add_argument("--dry-run", action="store_true", help="count them; change nothing")
        leaf.add_argument("--wait", action="store_true", help="wait until the job is done and print it")
        leaf.add_argument("--wait-s", type=float, default=3600.0, help="at most this long (default 3600)")
        leaf.add_argument("--poll-s", type=float, default=1.0, help="how often to look (default 1)")
        leaf.add_argument("--idempotency-key", help="the same key and request start one job")
        leaf.add_argument("--quiet", "-q", action="store_true", help="print only the job id")
    _leaf(group, "get", lambda c, a: c.get_bulk_job(a.job_id), "a job and its progress", common).add_argument("job_id")
    jobs = _leaf(group, "list", lambda c, a: list(itertools.islice(c.list_bulk_jobs(), a.limit)), "your jobs", common)
    jobs.add_argument("--limit", type=int, default=None, help="stop after this many")
    stop = _leaf(group, "stop", lambda c, a: c.cancel_bulk_job(a.job_id), "stop a job (what it did stands)", common)
    stop.add_argument("job_id")


def _policies(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("policies", help="throttle policies").add_subparsers(required=True, metavar="COMMAND")
    put = _leaf(
        group,
        "put",
        lambda c, a: c.put_policy(a.name, max_in_flight=a.max_in_flight, release_timeout_s=a.release_timeout_s),
        "create or replace a policy",
        common,
    )
    put.add_argument("name")
    put.add_argument("--max-in-flight", type=int, required=True)
    put.add_argument("--release-timeout-s", type=int, required=True)
    _leaf(group, "get", lambda c, a: c.get_policy(a.name), "one policy, with in_flight", common).add_argument("name")
    _leaf(group, "list", lambda c, a: c.list_policies(), "all policies", common)
    _leaf(group, "delete", lambda c, a: c.delete_policy(a.name), "delete a policy", common).add_argument("name")


def _calendars(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser(
        "calendars", help="dates, ranges and weekdays the recurring schedules naming them skip"
    ).add_subparsers(required=True, metavar="COMMAND")
    put = _leaf(group, "put", _calendars_put, "create or replace a calendar (each put: a new version)", common)
    put.add_argument("name", help="1-64 of a-z 0-9 _ -")
    put.add_argument("--timezone", help="IANA zone its dates, ranges and weekdays are read in (default UTC)")
    put.add_argument("--date", action="append", default=[], metavar="YYYY-MM-DD", help="a day (repeatable)")
    put.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="FROM/TO",
        help="local wall times, TO excluded: 2026-08-03T00:00/2026-08-17T00:00 (repeatable)",
    )
    put.add_argument("--weekday", action="append", default=[], metavar="DAY", help="mon ... sun (repeatable)")
    put.add_argument("--business-days", action="store_true", help="every Saturday and Sunday")
    _if_match_arg(put, "calendar")
    _leaf(group, "get", lambda c, a: c.get_calendar(a.name), "one calendar", common).add_argument("name")
    _leaf(group, "list", lambda c, a: c.list_calendars(), "all calendars, by name", common)
    delete = _leaf(
        group, "delete", lambda c, a: c.delete_calendar(a.name, if_match=_if_match(a)), "delete a calendar", common
    )
    delete.add_argument("name")
    _if_match_arg(delete, "calendar")


def _dead_letter_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", help="one schedule's dead letters")
    parser.add_argument("--from", dest="start", help="failed at or after (default: 7 days ago)")
    parser.add_argument("--to", dest="end", help="failed before (default: now)")


def _dead_letters(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("dead-letters", help="fires that failed for good; redrive them").add_subparsers(
        required=True, metavar="COMMAND"
    )
    listing = _leaf(group, "list", _dead_letters_list, "dead letters, newest first", common)
    _dead_letter_filters(listing)
    listing.add_argument("--page-size", type=int, default=100)
    listing.add_argument("--limit", type=int, default=None, help="stop after this many")
    get = _leaf(group, "get", lambda c, a: c.get_dead_letter(a.dead_letter_id), "one dead letter", common)
    get.add_argument("dead_letter_id")
    redrive = _leaf(
        group, "redrive", _dead_letters_redrive, "fire again: one by id, or all matching the filters", common
    )
    redrive.add_argument("dead_letter_id", nargs="?", help="one dead letter (else give filters)")
    _dead_letter_filters(redrive)
    redrive.add_argument("--all", action="store_true", help="every one not yet redriven (of --from/--to)")
    redrive.add_argument("--at", help="due then (default: now)")
    redrive.add_argument("--page-size", type=int, default=100, help="dead letters per request (1-100)")


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="tickd",
        parents=[common],
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]) if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    _clients(commands, common)
    _schedules(commands, common)
    _bulk(commands, common)
    _dead_letters(commands, common)
    _policies(commands, common)
    _calendars(commands, common)
    events = commands.add_parser("events", help="throttled events").add_subparsers(required=True, metavar="COMMAND")
    release = _leaf(events, "release", lambda c, a: c.release_event(a.event_id), "free an event's token", common)
    release.add_argument("event_id")
    admin = commands.add_parser("admin", help="cluster views (admin token)").add_subparsers(
        required=True, metavar="COMMAND"
    )
    _leaf(admin, "nodes", _admin_nodes, "live poller nodes and the instances each holds", common)
    admin_stats = _leaf(
        admin, "stats", _admin_stats, "delivery statistics of every client together, or of one: 5m, 1h, 24h", common
    )
    admin_stats.add_argument("--client", metavar="ID", help="one client's statistics (default: every client's)")
    _leaf(commands, "stats", _stats, "your delivery statistics: last 5 minutes, hour and day", common)
    trail = _leaf(commands, "audit", _audit, "who changed what, newest first (yours, or one schedule's)", common)
    trail.add_argument("--schedule", metavar="ID", help="one schedule's changes (also after it ended)")
    trail.add_argument("--from", dest="start", help="default: 7 days before --to")
    trail.add_argument("--to", dest="end", help="default: now")
    trail.add_argument("--page-size", type=int, default=100)
    trail.add_argument("--limit", type=int, default=None, help="stop after this many")
    feed = _leaf(commands, "notifications", _notices, "auto-pauses, dead letters and resumes, newest first", common)
    feed.add_argument("--from", dest="start", help="default: 7 days before --to")
    feed.add_argument("--to", dest="end", help="default: now")
    feed.add_argument("--page-size", type=int, default=100)
    feed.add_argument("--limit", type=int, default=None, help="stop after this many")
    own = _leaf(commands, "settings", _settings, "show your settings, or change the ones given", common)
    own.add_argument("--pause-after-failures", type=int, metavar="N", help="your recurring schedules' default")
    own.add_argument("--notify-url", metavar="URL", help="deliver your notifications to this HTTP endpoint")
    own.add_argument("--notify-topic", metavar="TOPIC", help="... or to this Kafka topic (granted to you)")
    own.add_argument("--no-notify", action="store_true", help="keep notifications in the feed only")
    own.add_argument(
        "--retention-s", type=int, metavar="S", help="keep runs, dead letters, notices S seconds (0: default)"
    )
    own.add_argument("--audit-retention-s", type=int, metavar="S", help="keep audit records S seconds (0: default)")
    _missed_args(own, "your recurring schedules' default: what an occurrence that cannot start in time does")
    own.add_argument("--no-missed", action="store_true", help="the default missed-fire policy back to fire_all")
    # Listed for help and completion; run() hands everything after "dev" to tickd-dev unparsed.
    commands.add_parser("dev", help="run tickd-dev (the whole of tickd in one process, in memory): tickd dev [ARGS]")
    completion = commands.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=("bash",))
    completion.set_defaults(handler=_completion_bash, local=True)
    return parser


def _client(args: argparse.Namespace) -> Tickd:
    settings = env_settings(
        url=getattr(args, "url", None),
        api_key=getattr(args, "api_key", None),
        admin_token=getattr(args, "admin_token", None),
    )
    retry = NO_RETRY if getattr(args, "no_retry", False) else RetryPolicy()
    return Tickd(**settings, timeout_s=getattr(args, "timeout_s", 10.0), retry=retry)


def _exit_code(error: TickdError) -> int:
    return next((code for cls, code in _EXIT_BY_ERROR if isinstance(error, cls)), UNEXPECTED)


def run(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["dev"]:
        _dev(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "local", False):
        args.handler(None, args)
        return OK
    try:
        with _client(args) as client:
            result = args.handler(client, args)
    except UsageError as exc:
        parser.error(str(exc))
    except TickdError as exc:
        print(f"tickd: {exc}", file=sys.stderr)
        return _exit_code(exc)
    code = OK
    if isinstance(result, Finished):
        result, code = result.value, result.code
    if result is not None:
        print(result if isinstance(result, str) else render(result, getattr(args, "output", "table")))
    return code


def main() -> None:
    try:
        code = run()
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader of our output went away (`| head`): stop without a word. Point stdout at /dev/null
        # so the interpreter's last flush does not fail again on the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = BROKEN_PIPE
    except Exception as exc:  # the documented exit code 1, with a one-line reason rather than a traceback
        print(f"tickd: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = UNEXPECTED
    sys.exit(code)
