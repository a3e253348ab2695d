"""The OpenAPI 3.1 document, built from the request/response Structs, and its self-contained HTML page.

``OPERATIONS`` lists every route the app serves; a test compares it with ``app.router`` both ways.
"""

from __future__ import annotations

import dataclasses
import html
import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tickd.service import params, validation, views
from tickd.service.routes import admin, ui
from tickd.service.settings import ApiSettings

_REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    summary: str
    tag: str
    ok: int = 200
    response: type[Any] | None = None
    request: type[Any] | None = None
    auth: str | None = "client"  # "client", "admin" or None
    errors: tuple[int, ...] = ()
    query: type[Any] | None = None  # a Struct of service.params: the parameters as the handler parses them
    headers: type[Any] | None = None
    description: str = ""
    media: str = "application/json"
    extra: dict[str, Any] = field(default_factory=dict)


_V = (400, 401, 415)
OPERATIONS: tuple[Op, ...] = (
    Op(
        "post",
        "/v1/clients",
        "Register a client; the API key and the callback signing secret are shown only here",
        "clients",
        201,
        views.ClientView,
        validation.ClientCreate,
        "admin",
        (*_V, 403, 409, 422, 503),
        description="422 topic_reserved: a kafka_topics entry reaching Kafka's __* or tickd's own topics. A grant "
        "overlapping another client's is answered with an X-Tickd-Warning header (409 grant_overlaps when "
        "TICKD_KAFKA_REFUSE_GRANT_OVERLAPS is set).",
    ),
    Op("get", "/v1/clients", "List clients", "clients", 200, views.ClientList, None, "admin", (401, 403, 503)),
    Op(
        "get",
        "/v1/clients/{client_id}",
        "Get a client",
        "clients",
        200,
        views.ClientView,
        None,
        "admin",
        (401, 403, 404, 503),
    ),
    Op(
        "patch",
        "/v1/clients/{client_id}",
        "Change poller_count, active or kafka_topics",
        "clients",
        200,
        views.ClientView,
        validation.ClientPatch,
        "admin",
        (*_V, 403, 404, 409, 422, 503),
        description="Lowering poller_count keeps poller_span at the old count so pollers drain the old ids.",
    ),
    Op(
        "post",
        "/v1/clients/{client_id}/api-keys",
        "Rotate the client's API key (the old one stops working)",
        "clients",
        201,
        views.ApiKeyView,
        None,
        "admin",
        (401, 403, 404, 503),
    ),
    Op(
        "post",
        "/v1/clients/{client_id}/signing-secrets",
        "Rotate the client's callback signing secret; the new one is shown only here",
        "clients",
        201,
        views.SigningSecretView,
        None,
        "admin",
        (401, 403, 404, 409, 503),
        description=(
            "Deliveries are signed with the new secret at once (within the pollers' client refresh, a few "
            "seconds) and with the previous one as well until previous_valid_until "
            "(TICKD_SIGNING_OVERLAP_S, a day by default): switch subscribers over meanwhile. Rotating again "
            "drops the older secret at once. 409: a concurrent rotation won; rotate again."
        ),
    ),
    Op(
        "post",
        "/v1/schedules",
        "Create a schedule",
        "schedules",
        201,
        views.ScheduleView,
        validation.ScheduleCreate,
        "client",
        (*_V, 403, 409, 413, 422, 429, 503),
        headers=params.CreateHeaders,
        description=(
            "Idempotency-Key: a retried create with the same key and request returns the original (200); "
            "the key with another request is 422; while the first is still in flight, 409 with Retry-After."
        ),
    ),
    Op(
        "post",
        "/v1/schedules/batch",
        "Create up to TICKD_MAX_BATCH schedules; results in request order",
        "schedules",
        200,
        views.BatchResult,
        validation.BatchCreate,
        "client",
        (*_V, 403, 413, 429, 503),
    ),
    Op(
        "post",
        "/v1/schedules/preview",
        "The next fire times of a cron or every rule, in UTC and local time; writes nothing",
        "schedules",
        200,
        views.PreviewView,
        validation.PreviewRequest,
        "client",
        (*_V, 503),
        description="count: 1-100 (default 10); after: start from this time instead of now.",
    ),
    Op(
        "get",
        "/v1/schedules/{schedule_id}/runs",
        "The schedule's fire history, newest first, paged",
        "schedules",
        200,
        views.RunList,
        None,
        "client",
        (400, 401, 404, 503),
        query=params.RunsQuery,
    ),
    Op(
        "get",
        "/v1/schedules",
        "List schedules due in [from, to), paged",
        "schedules",
        200,
        views.ScheduleList,
        None,
        "client",
        (400, 401, 503),
        query=params.ListQuery,
        description="A page may be short (even empty) and still have a next_cursor: keep paging until it is null. "
        "List items carry no payload (GET of one schedule does).",
    ),
    Op(
        "get",
        "/v1/schedules/{schedule_id}",
        "Get a schedule",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "patch",
        "/v1/schedules/{schedule_id}",
        "Reschedule, or change payload, callback, jitter or a recurring schedule's rule",
        "schedules",
        200,
        views.ScheduleView,
        validation.SchedulePatch,
        "client",
        (*_V, 404, 409, 413, 503),
    ),
    Op(
        "delete",
        "/v1/schedules/{schedule_id}",
        "Cancel a schedule (idempotent)",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 409, 503),
        description="409 already_fired, or fire_imminent (a one-time schedule within TICKD_MUTATION_GUARD_S of "
        "its first due time); a fire in retry can be cancelled at any time (an attempt already on the wire may "
        "still arrive).",
    ),
    Op(
        "post",
        "/v1/schedules/{schedule_id}/pause",
        "Pause a schedule: it fires nothing until resumed (pausing a paused one is 200)",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 409, 503),
        description="409 already_cancelled, already_fired, or fire_imminent (a one-time schedule within "
        "TICKD_MUTATION_GUARD_S of its first due time; a fire in retry can be paused at any time).",
    ),
    Op(
        "post",
        "/v1/schedules/{schedule_id}/resume",
        "Resume a paused schedule from now on; the occurrences missed are recorded in its runs as skipped",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 409, 503),
        description="A recurring schedule goes on with its first occurrence at or after now; a one-time one "
        "fires at its time, or now if that passed. 409 not_paused.",
    ),
    Op(
        "post",
        "/v1/schedules/{schedule_id}/trigger",
        "Fire the schedule once more now, without moving its timeline: a one-time trigger of its own",
        "schedules",
        201,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 403, 404, 409, 422, 429, 503),
        headers=params.CreateHeaders,
        description="The trigger has its own schedule id (trigger_of: the schedule) and fire id "
        "(<schedule_id>:<trigger time ms>), the schedule's payload and callback. Idempotency-Key as on a "
        "create (a replay answers 200). 409 already_cancelled.",
    ),
    Op(
        "put",
        "/v1/schedules/by-key/{key}",
        "Create or replace the one live schedule of a business key",
        "schedules",
        200,
        views.ScheduleView,
        validation.ScheduleCreate,
        "client",
        (*_V, 403, 409, 413, 422, 429, 503),
        description="The body is a create's. 201 when it creates the key's schedule (a new key, or its "
        "schedule fired or was cancelled), 200 when it replaces it (a client change: 409 fire_imminent within "
        "the mutation guard, schedule_paused, conflict after concurrent PUTs won every retry, key_in_progress).",
    ),
    Op(
        "get",
        "/v1/schedules/by-key/{key}",
        "Get the schedule of a business key",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "delete",
        "/v1/schedules/by-key/{key}",
        "Cancel the schedule of a business key (idempotent); the next PUT creates a new one",
        "schedules",
        200,
        views.ScheduleView,
        None,
        "client",
        (400, 401, 404, 409, 503),
    ),
    Op(
        "get",
        "/v1/stats",
        "Your delivery statistics over the last 5 minutes, hour and day",
        "stats",
        200,
        views.StatsView,
        None,
        "client",
        (401, 503),
        description="Per window: attempts delivered, retried (failed, tried again) and failed for good; fired "
        "counts first attempts, whose lateness (sent minus due) is given as p50/p99 (the upper edge of the "
        "histogram bucket holding it, never above the max) and max, in seconds; null when nothing fired. "
        "Windows are whole minutes; pollers write their counts every TICKD_STATS_FLUSH_S (10 s).",
    ),
    Op(
        "get",
        "/v1/admin/stats",
        "Delivery statistics of the whole cluster (every client together), or of one client",
        "admin",
        200,
        views.StatsView,
        None,
        "admin",
        (400, 401, 403, 503),
        query=params.AdminStatsQuery,
        description="As GET /v1/stats; without client_id, every client's attempts together (client_id null).",
    ),
    Op(
        "get",
        "/v1/dead-letters",
        "List dead letters (fires that failed for good), newest first, paged",
        "dead-letters",
        200,
        views.DeadLetterList,
        None,
        "client",
        (400, 401, 503),
        query=params.DeadLetterQuery,
        description="from/to: when they failed (default the last 7 days, at most 31 days); schedule_id: of one "
        "schedule. A page may be short and still have a next_cursor. List items carry no payload (GET of one "
        "dead letter does).",
    ),
    Op(
        "get",
        "/v1/dead-letters/{dead_letter_id}",
        "Get a dead letter",
        "dead-letters",
        200,
        views.DeadLetterView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "post",
        "/v1/dead-letters/{dead_letter_id}/redrive",
        "Redrive a dead letter: its fire again, due now or at `at`, with the same fire id (once)",
        "dead-letters",
        200,
        views.DeadLetterView,
        validation.RedriveRequest,
        "client",
        (*_V, 403, 404, 409, 429, 503),
        description="The body is optional. Redriving it again answers 200 with the same redriven_at and "
        "redriven_due_at and writes no second fire. 409 not_redrivable (an event's dead letter), "
        "schedule_changed (the schedule changed since), schedule_gone (expired), topic_not_allowed (a Kafka "
        "topic no longer granted to the client).",
        extra={"optional_body": True},
    ),
    Op(
        "post",
        "/v1/dead-letters/redrive",
        "Redrive the dead letters not yet redriven that match a filter, up to limit per call",
        "dead-letters",
        200,
        views.RedriveResult,
        validation.RedriveRequest,
        "client",
        (*_V, 403, 429, 503),
        query=params.RedriveQuery,
        description="Same filters as the listing; call again with next_cursor until it is null. Those that "
        "cannot be redriven are listed in errors with their code.",
        extra={"optional_body": True},
    ),
    Op(
        "get",
        "/v1/throttle-policies",
        "List the client's throttle policies",
        "throttle",
        200,
        views.PolicyList,
        None,
        "client",
        (401, 503),
    ),
    Op(
        "put",
        "/v1/throttle-policies/{name}",
        "Create (201) or replace (200) a throttle policy",
        "throttle",
        201,
        views.PolicyView,
        validation.PolicyPut,
        "client",
        (*_V, 503),
        description="At most max_in_flight events of the policy delivered and not yet released, across all "
        "poller nodes; an event not released within release_timeout_s is released automatically.",
    ),
    Op(
        "get",
        "/v1/throttle-policies/{name}",
        "Get a throttle policy and the events it holds now (in_flight)",
        "throttle",
        200,
        views.PolicyView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "delete",
        "/v1/throttle-policies/{name}",
        "Delete a throttle policy (events naming it then go out unthrottled)",
        "throttle",
        200,
        views.PolicyView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "post",
        "/v1/events/{event_id}/release",
        "The consumer is done with an event: free its throttle token (idempotent)",
        "throttle",
        200,
        views.ReleaseView,
        None,
        "client",
        (400, 401, 404, 503),
    ),
    Op(
        "get",
        "/v1/admin/nodes",
        "The live poller nodes, the instances each one holds with their epochs, and the instances none holds",
        "admin",
        200,
        admin.NodesView,
        None,
        "admin",
        (401, 403, 503),
        description=(
            "Read from the store: membership, the client list and each instance's claim. A node fences itself "
            "when its heartbeat has not been answered for TICKD_NODE_TTL_S less 3 s; here that shows as a "
            "growing heartbeat_age_s, then as its claims listed under unowned with their old owner."
        ),
    ),
    *(
        Op("get", path, f"Dashboard: {name}", "dashboard", 200, None, None, None, media=media)
        for path, (name, media) in ui.ASSETS.items()
    ),
    Op("get", "/healthz", "The process is up", "operations", 200, views.Health, None, None),
    Op("get", "/readyz", "Cassandra answers", "operations", 200, views.Health, None, None, (503,)),
    Op(
        "get",
        "/metrics",
        "Prometheus metrics",
        "operations",
        200,
        None,
        None,
        "admin",
        media="text/plain",
        description=(
            "The admin token unless TICKD_METRICS_AUTH=none. TICKD_API_METRICS_PORT serves the same, without a "
            "token, on a listener of its own."
        ),
    ),
    Op("get", "/openapi.json", "This document", "operations", 200, None, None, None),
    Op("get", "/docs", "This document as HTML", "operations", 200, None, None, None, media="text/html"),
)

_STATUS_TEXT = {
    400: "The request does not match this document's schema (the error names the field)",
    408: "The body did not arrive within the read timeout",
    401: "No or unknown key",
    403: "Forbidden for this key",
    404: "Unknown, or another client's",
    409: "Conflict (exists, already fired, fire imminent, raced)",
    413: "Body or payload too large",
    415: "Not application/json",
    422: "The request matches the schema but a rule it cannot carry refuses it (the error names the field): "
    "fields that exclude each other, from before to, a time too far from now, a Kafka topic not granted, a "
    "throttle policy that does not exist, a cron that never fires, a private destination, an amplification "
    "limit, a cursor not handed out; or an Idempotency-Key already used with another request",
    429: "Rate limited (see Retry-After)",
    503: "Store unavailable (see Retry-After), or admin disabled",
}


# Path parameters, typed as the handlers parse them (service.params).
_PATHS: dict[str, type[Any]] = {
    "schedule_id": params.SchedulePath,
    "client_id": params.ClientPath,
    "name": params.PolicyPath,
    "event_id": params.EventPath,
    "dead_letter_id": params.DeadLetterPath,
    "key": params.BusinessKeyPath,
}


def _parameters(kind: type[Any], place: str) -> list[dict[str, Any]]:
    """One OpenAPI parameter per field of a params Struct, with the field's own schema."""
    schema = msgspec.json.schema(kind)
    body = schema["$defs"][kind.__name__]
    required = set(body.get("required", ()))
    return [
        {"name": name, "in": place, "required": name in required or place == "path", "schema": field_schema}
        for name, field_schema in body.get("properties", {}).items()
    ]


def _operation(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "tags": [op.tag], "operationId": _op_id(op)}
    if op.description:
        out["description"] = op.description
    found: list[dict[str, Any]] = []
    for kind, place in ((op.query, "query"), (op.headers, "header")):
        if kind is not None:
            found += _parameters(kind, place)
    for name in _path_params(op):
        found += _parameters(_PATHS[name], "path")
    if found:
        out["parameters"] = found
    if op.request is not None:
        required = not op.extra.get("optional_body", False)
        out["requestBody"] = {"required": required, "content": {"application/json": {"schema": _ref(op.request)}}}
    ok: dict[str, Any] = {"description": "OK"}
    if op.response is not None or op.media != "application/json":
        ok["content"] = {op.media: {"schema": _ref(op.response) if op.response else {"type": "string"}}}
    out["responses"] = {str(op.ok): ok, **{str(s): _error_response(s) for s in sorted(_errors(op))}}
    if op.response is views.PolicyView and op.method == "put":
        out["responses"]["200"] = {"description": "Replaced", "content": ok["content"]}
    if op.path == "/v1/schedules/by-key/{key}" and op.method == "put":
        out["responses"]["201"] = {"description": "Created (a new schedule for the key)", "content": ok["content"]}
    if op.path in ("/v1/schedules", "/v1/schedules/{schedule_id}/trigger") and op.method == "post":
        out["responses"]["200"] = {"description": "Replayed (Idempotency-Key)", "content": ok["content"]}
    out["security"] = [{op.auth: []}] if op.auth else []
    return out


def _errors(op: Op) -> set[int]:
    """Every status the operation can answer besides its success: the ones listed, and those that any
    operation of its kind can get (bad parameters, auth, body limits, the store). Every operation that
    takes input lists 400 (not this schema) and 422 (a rule after decoding, service.errors)."""
    statuses = set(op.errors)
    if op.auth is not None:
        # 429: failed authentications are limited per source address, and a client's reads per client.
        statuses |= {400, 401, 429, 503} | ({403} if op.auth == "admin" else set())
    if _path_params(op):
        statuses |= {400, 404, 422}
    if op.request is not None:
        statuses |= {400, 408, 413, 415, 422}
    if op.query is not None:
        statuses |= {400, 422}
    return statuses


def _op_id(op: Op) -> str:
    return op.method + "".join(p.strip("{}").title() for p in op.path.replace("-", "_").split("/"))


def _path_params(op: Op) -> list[str]:
    return [p[1:-1] for p in op.path.split("/") if p.startswith("{")]


def _ref(kind: type[Any]) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _error_response(status: int) -> dict[str, Any]:
    return {"description": _STATUS_TEXT[status], "content": {"application/json": {"schema": _ref(views.ErrorBody)}}}


def build_spec(settings: ApiSettings) -> dict[str, Any]:
    """The document for an app with these settings: request bodies are the types ``decode`` checks,
    with the settings' limits in them (``validation.request_types``)."""
    bound = {kind.__name__: kind for kind in validation.request_types(settings).all()}
    requests = {bound.get(op.request.__name__, op.request) for op in OPERATIONS if op.request is not None}
    kinds = {op.response for op in OPERATIONS if op.response is not None} | requests | {views.ErrorBody}
    _, components = msgspec.json.schema_components(sorted(kinds, key=lambda k: k.__name__), ref_template=_REF)
    # Each item is decoded on its own: a bad one fails alone, in the 200 answer's results, so the
    # request itself accepts any items (each should be a ScheduleCreate).
    components["BatchCreate"]["properties"]["schedules"]["description"] = (
        "ScheduleCreate objects; each is validated on its own and a bad one is answered in its result"
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        public = op.path == "/metrics" and settings.metrics_auth == "none"
        paths.setdefault(op.path, {})[op.method] = _operation(dataclasses.replace(op, auth=None) if public else op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tickd",
            "version": "1",
            "description": "Multi-tenant scheduler: tickd calls you back over HTTP or Kafka at the time you ask. "
            f"Payloads up to {settings.max_payload_bytes} bytes; batches up to {settings.max_batch}.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "admin": {"type": "http", "scheme": "bearer", "description": "TICKD_ADMIN_TOKEN"},
                "client": {"type": "http", "scheme": "bearer", "description": "<client_id>.<secret>"},
            },
        },
    }


def encode(spec: dict[str, Any]) -> bytes:
    return msgspec.json.encode(spec)


_STYLE = """body{font:15px/1.5 system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ddd;margin-top:2em}.op{margin:1.2em 0;padding:.6em 1em;border-left:4px solid #4a7}
.m{font:bold 13px monospace;text-transform:uppercase;margin-right:.6em}code,pre{background:#f4f4f4}
pre{padding:.6em;overflow:auto;font-size:12px}.auth{color:#a50;font-size:13px}"""


def _html_op(path: str, method: str, op: dict[str, Any]) -> str:
    parts = [
        f'<div class="op"><span class="m">{method}</span><code>{html.escape(path)}</code>',
        f"<p>{html.escape(op['summary'])}</p>",
    ]
    if op.get("description"):
        parts.append(f"<p>{html.escape(op['description'])}</p>")
    if op["security"]:
        parts.append(f'<p class="auth">Auth: bearer {html.escape(next(iter(op["security"][0])))} key</p>')
    for p in op.get("parameters", []):
        parts.append(
            f"<p><code>{html.escape(p['name'])}</code> ({p['in']}) {html.escape(p.get('description', ''))}</p>"
        )
    if "requestBody" in op:
        parts.append(f"<p>Body: {html.escape(op['requestBody']['content']['application/json']['schema']['$ref'])}</p>")
    codes = ", ".join(f"{s} {html.escape(r['description'])}" for s, r in op["responses"].items())
    parts.append(f"<p>Responses: {codes}</p></div>")
    return "".join(parts)


def render_html(spec: dict[str, Any]) -> str:
    """The whole document as one HTML page (inline CSS, no scripts, no network)."""
    body = [
        f"<h1>{html.escape(spec['info']['title'])} API</h1><p>{html.escape(spec['info']['description'])}</p>",
        '<p>Machine-readable: <a href="/openapi.json">/openapi.json</a></p><h2>Operations</h2>',
    ]
    for path, methods in spec["paths"].items():
        body += [_html_op(path, method, op) for method, op in methods.items()]
    body.append("<h2>Schemas</h2>")
    for name, schema in spec["components"]["schemas"].items():
        body.append(
            f'<h3 id="{html.escape(name)}">{html.escape(name)}</h3>'
            f"<pre>{html.escape(json.dumps(schema, indent=2))}</pre>"
        )
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>tickd API</title><style>{_STYLE}</style>"
        f"</head><body>{''.join(body)}</body></html>"
    )
