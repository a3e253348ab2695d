"""``GET /v1/stats``: the tenant's own delivery statistics over the last 5 minutes, hour and day
(``schema.stats``: counts of attempts delivered, retried and failed, and first-attempt lateness).
``GET /v1/admin/stats``: the same for the whole cluster (every client together), or one client's."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web
from msgspec import UnsetType

from tickd.schema import stats
from tickd.service import keys, params
from tickd.service.declare import Routes
from tickd.service.errors import json_response
from tickd.service.routes.common import now
from tickd.service.views import StatsView, StatsWindow

routes = Routes("stats")


@routes.get(
    "/v1/stats",
    "Your delivery statistics over the last 5 minutes, hour and day",
    response=StatsView,
    description="Per window: attempts delivered, retried (failed, tried again) and failed for good; fired "
    "counts first attempts, whose lateness (sent minus due) is given as p50/p99 (the upper edge of the "
    "histogram bucket holding it, never above the max) and max, in seconds; null when nothing fired. "
    "Windows are whole minutes; pollers write their counts every TICKD_STATS_FLUSH_S (10 s).",
)
async def get_stats(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    return json_response(await _stats(request, client.client_id))


@routes.get(
    "/v1/admin/stats",
    "Delivery statistics of the whole cluster (every client together), or of one client",
    tag="admin",
    auth="admin",
    response=StatsView,
    query=params.AdminStatsQuery,
    description="As GET /v1/stats; without client_id, every client's attempts together (client_id null).",
)
async def get_admin_stats(request: web.Request) -> web.Response:
    await request.app[keys.AUTH].admin(request)
    query = params.query(params.AdminStatsQuery, request)
    one = None if isinstance(query.client_id, UnsetType) else query.client_id
    view = await _stats(request, stats.CLUSTER if one is None else one)
    view.client_id = one
    return json_response(view)


async def _stats(request: web.Request, client_id: str) -> StatsView:
    at = now()
    since = (at - timedelta(seconds=max(stats.WINDOWS_S))).replace(second=0, microsecond=0)
    rows = await request.app[keys.STORE].read_stats(client_id, since, at)
    return StatsView(client_id, at, [_view(stats.summarize(rows, at, window_s)) for window_s in stats.WINDOWS_S])


def _view(w: stats.WindowStats) -> StatsWindow:
    return StatsWindow(
        w.window_s, w.fired, w.delivered, w.retried, w.failed, w.lateness_p50_s, w.lateness_p99_s, w.lateness_max_s
    )
