"""Each HTTP operation is declared once, on its handler: the declaration both mounts the handler on the
router (``mount``) and is what ``service.openapi`` publishes for it. Each module of ``service.routes``
makes one ``Routes`` and decorates its handlers::

    routes = Routes("throttle", path_params=(params.PolicyPath,))

    @routes.put("/v1/throttle-policies/{name}", "Create (201) or replace (200) a throttle policy",
                ok=201, also={200: "Replaced"}, response=views.PolicyView, request=validation.PolicyPut)
    async def put_policy(request: web.Request) -> web.Response: ...

``errors`` lists only what is particular to the operation; ``service.openapi`` adds the statuses every
operation of its kind can answer (auth: 400 401 429 503, and 403 for admin; a body: 400 408 413 415 422;
path parameters: 400 404 422; a query: 400 422). A declaration that names a path parameter no Struct of the
module types fails at import, not at the first request.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar, Unpack

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from tickd.service.errors import Malformed
from tickd.service.settings import ApiSettings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=Handler)
Auth = Literal["client", "admin"] | None
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, kw_only=True)
class Operation:
    """One method on one path: its handler and everything the OpenAPI document says about it."""

    method: str  # lower case, as OpenAPI writes it
    path: str  # as published: /v1/schedules/{schedule_id}
    route: str  # the router's pattern: ``path`` with the module's regex for some parameters
    handler: Handler
    summary: str
    tag: str
    ok: int = 200
    # Other success statuses the operation answers, each with what it means (200 "Replayed").
    also: Mapping[int, str] = field(default_factory=dict)
    response: type[Any] | None = None
    request: type[Any] | None = None
    optional_body: bool = False
    auth: Auth = "client"
    # Settings under which the operation asks no credentials (``/metrics`` with TICKD_METRICS_AUTH=none).
    public_when: Callable[[ApiSettings], bool] | None = None
    errors: tuple[int, ...] = ()
    # Structs of service.params, as the handler parses them: the path's parameters (in path order), the
    # query string, the headers.
    path_params: tuple[type[Any], ...] = ()
    query: type[Any] | None = None
    headers: type[Any] | None = None
    description: str = ""
    media: str = "application/json"

    def auth_under(self, settings: ApiSettings) -> Auth:
        """The credentials the operation asks for under ``settings``."""
        return None if self.public_when is not None and self.public_when(settings) else self.auth


class Fields(TypedDict, total=False):
    """What a declaration may give besides method, path and summary (see ``Operation``)."""

    tag: str
    ok: int
    also: Mapping[int, str]
    response: type[Any] | None
    request: type[Any] | None
    optional_body: bool
    auth: Auth
    public_when: Callable[[ApiSettings], bool] | None
    errors: tuple[int, ...]
    query: type[Any] | None
    headers: type[Any] | None
    description: str
    media: str


class Routes:
    """One module's operations, in the order they are declared. ``path_params``: the Structs typing the
    module's path parameters; ``patterns``: a parameter's regex for the router where the plain
    ``[^/]+`` would also match a fixed word beside it (``/v1/schedules/batch``)."""

    def __init__(
        self,
        tag: str,
        *,
        auth: Auth = "client",
        path_params: Iterable[type[Any]] = (),
        patterns: Mapping[str, str] | None = None,
    ) -> None:
        self.tag, self.auth = tag, auth
        self._types = {name: kind for kind in path_params for name in _field_names(kind)}
        self._patterns = dict(patterns or {})
        self.operations: list[Operation] = []

    def get(self, path: str, summary: str, **fields: Unpack[Fields]) -> Callable[[H], H]:
        return self._declare("get", path, summary, fields)

    def post(self, path: str, summary: str, **fields: Unpack[Fields]) -> Callable[[H], H]:
        return self._declare("post", path, summary, fields)

    def put(self, path: str, summary: str, **fields: Unpack[Fields]) -> Callable[[H], H]:
        return self._declare("put", path, summary, fields)

    def patch(self, path: str, summary: str, **fields: Unpack[Fields]) -> Callable[[H], H]:
        return self._declare("patch", path, summary, fields)

    def delete(self, path: str, summary: str, **fields: Unpack[Fields]) -> Callable[[H], H]:
        return self._declare("delete", path, summary, fields)

    def _declare(self, method: str, path: str, summary: str, fields: Fields) -> Callable[[H], H]:
        names = _PLACEHOLDER.findall(path)
        missing = [name for name in names if name not in self._types]
        if missing:
            raise TypeError(f"{method.upper()} {path}: no Struct of path_params types {', '.join(missing)}")
        route = _PLACEHOLDER.sub(self._pattern, path)
        kinds = tuple(dict.fromkeys(self._types[name] for name in names))
        fields = {"tag": self.tag, "auth": self.auth, **fields}

        def declare(handler: H) -> H:
            operation = Operation(
                method=method, path=path, route=route, handler=handler, summary=summary, path_params=kinds, **fields
            )
            self.operations.append(operation)
            return handler

        return declare

    def _pattern(self, match: re.Match[str]) -> str:
        name = match[1]
        return f"{{{name}:{self._patterns[name]}}}" if name in self._patterns else match[0]


def _field_names(kind: type[Any]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(kind)]


def mount(app: web.Application, operations: Iterable[Operation]) -> None:
    """Add each operation's handler to the router: the only place routes are added (GET answers no HEAD)."""
    for op in operations:
        app.router.add_route(op.method.upper(), op.route, op.handler)


def no_query_guard(operations: Iterable[Operation]) -> Middleware:
    """A middleware refusing any query parameter sent to an operation that declares none (400, naming it):
    ``GET /v1/stats?client_id=other`` answered the caller's own statistics as if asked for them. Operations
    with a query parse it into a Struct that refuses unknown names the same way (``params.query``). The
    public operations (health, readiness, the document, metrics) are left alone: probes and scrapers add
    query strings of their own, and nothing there is the caller's to choose."""
    without = frozenset(op.handler for op in operations if op.query is None and op.auth is not None)

    @web.middleware
    async def refuse_unknown_query(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.query and request.match_info.handler in without:
            name = next(iter(request.query))
            raise Malformed(
                f"unknown query parameter {name!r}: this operation takes none", code="unknown_field", field=name
            )
        return await handler(request)

    return refuse_unknown_query
