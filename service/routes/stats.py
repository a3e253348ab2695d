"""``GET /v1/stats``: the tenant's own delivery statistics over the last 5 minutes, hour and day
(``schema.stats``: counts of attempts delivered, retried and failed, and first-attempt lateness)."""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from tickd.schema import stats
from tickd.service import keys
from tickd.service.errors import json_response
from tickd.service.routes.common import now
from tickd.service.views import StatsView, StatsWindow


async def get_stats(request: web.Request) -> web.Response:
    client = await request.app[keys.AUTH].client(request)
    at = now()
    since = (at - timedelta(seconds=max(stats.WINDOWS_S))).replace(second=0, microsecond=0)
    rows = await request.app[keys.STORE].read_stats(client.client_id, since, at)
    windows = [_view(stats.summarize(rows, at, window_s)) for window_s in stats.WINDOWS_S]
    return json_response(StatsView(client.client_id, at, windows))


def _view(w: stats.WindowStats) -> StatsWindow:
    return StatsWindow(
        w.window_s, w.fired, w.delivered, w.retried, w.failed, w.lateness_p50_s, w.lateness_p99_s, w.lateness_max_s
    )


def setup(app: web.Application) -> None:
    app.router.add_get("/v1/stats", get_stats, allow_head=False)
