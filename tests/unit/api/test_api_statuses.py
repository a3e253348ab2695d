"""The session check of answered statuses (``tests/integration/api_statuses``), on an app of its own: an
answer its operation does not declare, and a declared status without a description, are problems."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.integration.api_statuses import Ledger, watch
from tickd.service import declare, keys
from tickd.service.routes import ops
from tickd.service.settings import ApiSettings

pytest_plugins = ["tests.integration.api_fixtures"]


async def _teapot(request: web.Request) -> web.Response:
    return web.Response(status=418 if "brew" in request.query else 200)


def _app(api_settings: ApiSettings, routes: declare.Routes) -> web.Application:
    app = web.Application()
    app[keys.SETTINGS] = api_settings
    app[ops.OPERATIONS] = tuple(routes.operations)
    declare.mount(app, routes.operations)
    return app


async def test_an_answer_the_operation_does_not_declare_is_a_problem(api_settings: ApiSettings) -> None:
    routes = declare.Routes("test", auth=None)
    routes.get("/tea", "Tea")(_teapot)
    app, ledger = _app(api_settings, routes), Ledger()
    watch(app, ledger)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/tea")).status == 200
        assert (await client.get("/tea", params={"brew": "1"})).status == 418
        assert (await client.get("/coffee")).status == 404  # no route: nothing to hold it against
    assert ledger.answered == {("GET", "/tea", 200): 1, ("GET", "/tea", 418): 1}
    [problem] = ledger.problems()
    assert problem.startswith("GET /tea answered 418, which it does not declare (first in tests/unit/api/")


async def test_a_declared_status_without_a_description_is_a_problem(api_settings: ApiSettings) -> None:
    routes = declare.Routes("test", auth=None)
    routes.get("/tea", "Tea", also={418: " "})(_teapot)
    app, ledger = _app(api_settings, routes), Ledger()
    watch(app, ledger)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/tea", params={"brew": "1"})).status == 418
    assert ledger.problems() == ["GET /tea declares 418 without a description"]
