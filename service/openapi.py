"""The OpenAPI 3.1 document, built from the operations the route modules declare (``routes.declare``)
and the request/response Structs they name, and its self-contained HTML page.

Nothing here names a path or a type: an operation's declaration says everything particular to it (other
success statuses, an optional body, a setting that lifts its auth); the rules below add what every
operation of its kind can answer.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

import msgspec

from tickd.service import validation, views
from tickd.service.declare import Auth, Operation
from tickd.service.settings import ApiSettings

_REF = "#/components/schemas/{name}"

_STATUS_TEXT = {
    400: "The request does not match this document's schema (the error names the field)",
    408: "The body did not arrive within the read timeout",
    401: "No or unknown key",
    403: "Forbidden for this key",
    404: "Unknown, or another client's",
    409: "Conflict (exists, already fired, fire imminent, raced)",
    412: "If-Match names another version than the schedule's (the answer's ETag is the current one)",
    413: "Body or payload too large",
    415: "Not application/json",
    422: "The request matches the schema but a rule it cannot carry refuses it (the error names the field): "
    "fields that exclude each other, from before to, a time too far from now, a Kafka topic not granted, a "
    "throttle policy that does not exist, a cron that never fires, a private destination, an amplification "
    "limit, a cursor not handed out; or an Idempotency-Key already used with another request",
    429: "Rate limited (see Retry-After)",
    503: "Store unavailable (see Retry-After), or admin disabled",
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


def _operation(op: Operation, auth: Auth) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": op.summary, "tags": [op.tag], "operationId": _op_id(op)}
    if op.description:
        out["description"] = op.description
    found: list[dict[str, Any]] = []
    for kind, place in ((op.query, "query"), (op.headers, "header")):
        if kind is not None:
            found += _parameters(kind, place)
    for kind in op.path_params:
        found += _parameters(kind, "path")
    if found:
        out["parameters"] = found
    if op.request is not None:
        schema = {"schema": _ref(op.request)}
        out["requestBody"] = {"required": not op.optional_body, "content": {"application/json": schema}}
    out["responses"] = _responses(op, auth)
    out["security"] = [{auth: []}] if auth else []
    return out


def _responses(op: Operation, auth: Auth) -> dict[str, Any]:
    """The success (``ok``), the errors, then the other successes (``also``), which carry what ok does."""
    ok: dict[str, Any] = {"description": "OK"}
    if op.response is not None or op.media != "application/json":
        ok["content"] = {op.media: {"schema": _ref(op.response) if op.response else {"type": "string"}}}
    out = {str(op.ok): ok, **{str(s): _error_response(op, s) for s in sorted(_errors(op, auth))}}
    for status, meaning in op.also.items():
        out[str(status)] = {"description": meaning} | ({"content": ok["content"]} if "content" in ok else {})
    return out


def statuses(op: Operation, settings: ApiSettings) -> dict[int, str]:
    """Every status the operation declares under ``settings``, with its description."""
    return {int(status): answer["description"] for status, answer in _responses(op, op.auth_under(settings)).items()}


def _errors(op: Operation, auth: Auth) -> set[int]:
    """Every status the operation can answer besides its successes: the ones it lists, and those that any
    operation of its kind can get (bad parameters, auth, body limits, the store). Every operation that
    takes input can answer 400 (not this schema) and 422 (a rule after decoding, service.errors)."""
    statuses = set(op.errors)
    if auth is not None:
        # 429: failed authentications are limited per source address, and a client's reads per client.
        statuses |= {400, 401, 429, 503} | ({403} if auth == "admin" else set())
    if op.path_params:
        statuses |= {400, 404, 422}
    if op.request is not None:
        statuses |= {400, 408, 413, 415, 422}
    if op.query is not None:
        statuses |= {400, 422}
    return statuses


def _op_id(op: Operation) -> str:
    return op.method + "".join(p.strip("{}").title() for p in op.path.replace("-", "_").split("/"))


def _ref(kind: type[Any]) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _error_response(op: Operation, status: int) -> dict[str, Any]:
    if status not in _STATUS_TEXT:
        raise ValueError(f"{op.method.upper()} {op.path} declares {status}, which _STATUS_TEXT does not describe")
    return {"description": _STATUS_TEXT[status], "content": {"application/json": {"schema": _ref(views.ErrorBody)}}}


def build_spec(settings: ApiSettings, operations: Sequence[Operation]) -> dict[str, Any]:
    """The document of ``operations`` in an app with these settings: request bodies are the types
    ``decode`` checks, with the settings' limits in them (``validation.request_types``)."""
    bound = {kind.__name__: kind for kind in validation.request_types(settings).all()}
    requests = {bound.get(op.request.__name__, op.request) for op in operations if op.request is not None}
    kinds = {op.response for op in operations if op.response is not None} | requests | {views.ErrorBody}
    _, components = msgspec.json.schema_components(sorted(kinds, key=lambda k: k.__name__), ref_template=_REF)
    # Each item is decoded on its own: a bad one fails alone, in the 200 answer's results, so the
    # request itself accepts any items (each should be a ScheduleCreate).
    components["BatchCreate"]["properties"]["schedules"]["description"] = (
        "ScheduleCreate objects; each is validated on its own and a bad one is answered in its result"
    )
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method] = _operation(op, op.auth_under(settings))
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
