"""The audit trail (``service.audit``): a tenant's records, and one schedule's."""

from __future__ import annotations

from aiohttp import web
from msgspec import UnsetType

from tickd.schema.model import AuditRecord
from tickd.service import audit, dead_letters, keys, params
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now
from tickd.service.validation import parse_time
from tickd.service.views import AuditList, audit_view

routes = Routes("audit", path_params=(params.SchedulePath,))


def _after(cursor: str | UnsetType) -> audit.Position | None:
    return None if isinstance(cursor, UnsetType) else audit.parse_cursor(cursor)


@routes.get(
    "/v1/audit",
    "The client's audit trail: every change made with its key or by the admin, newest first, paged",
    response=AuditList,
    query=params.AuditQuery,
    description="from/to: the range of change times (default the last 7 days, at most 31). Each record: "
    "at, actor (admin, or key:<12 hex of the API key's sha256>), action, target, changes (the request's "
    "fields; a payload as its size and sha256, callback secrets redacted), request_id, and for a schedule "
    "its schedule_id and the version the change left. Kept TICKD_AUDIT_RETENTION_S.",
)
async def client_audit(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    found, cursor = await client_page(request, request.app[keys.STORE].page_client_audit, client.client_id)
    return json_response(AuditList([audit_view(r) for r in found], cursor))


async def client_page(
    request: web.Request, read: audit.DayPage, client_id: str
) -> tuple[list[AuditRecord], str | None]:
    """The page of the client's records (or notices: ``read``) the query string asks for."""
    query = params.query(params.AuditQuery, request)
    start = None if isinstance(query.start, UnsetType) else parse_time(query.start, "from")
    end = None if isinstance(query.end, UnsetType) else parse_time(query.end, "to")
    start, end = dead_letters.time_range(start, end, now())  # the same range rules as dead letters
    return await audit.client_page(read, client_id, start, end, _after(query.cursor), query.limit)


@routes.get(
    "/v1/schedules/{schedule_id}/audit",
    "One schedule's audit trail, newest first, paged (also after it ended or expired)",
    response=AuditList,
    query=params.RunsQuery,
)
async def schedule_audit(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    schedule_id = params.path(params.SchedulePath, request).schedule_id
    query = params.query(params.RunsQuery, request)
    store = request.app[keys.STORE]
    found, cursor = await audit.schedule_page(store, client.client_id, schedule_id, _after(query.cursor), query.limit)
    return json_response(AuditList([audit_view(r) for r in found], cursor))
