"""Every status the API answers in the tests, held against the statuses its operations declare.

``api_helpers.serve`` watches each app it serves (the API tests of ``tests/unit/api`` and
``tests/integration`` all go through it): every response to a request that matched a route is recorded
as (method, route, status), with the statuses that route declares under that app's settings
(``service.openapi.statuses``: what ``/openapi.json`` publishes). At the end of the session
``tests/conftest.py`` fails the run if a route answered a status it does not declare, or declares one
without a description. Statuses declared but never answered are only counted: some (a 408, a 503 of a
store that is down) need a hostile client or a broken store that only a few tests arrange.

Requests no route matched (404 route_not_found, 405) and answers aiohttp gives before routing (a
malformed request line) have no operation to hold them against, and are not recorded.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

from tickd.service import keys, openapi
from tickd.service.routes import ops

Endpoint = tuple[str, str]  # (METHOD, route path as published)


@dataclass
class Ledger:
    """What the watched apps answered and declared, over the whole session."""

    answered: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    declared: dict[Endpoint, dict[int, str]] = field(default_factory=dict)
    # The first test that saw each undeclared answer, to start looking there.
    undeclared: dict[tuple[str, str, int], str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """One line per undeclared answer and per declared status with no description."""
        found = [
            f"{method} {path} answered {status}, which it does not declare (first in {test})"
            for (method, path, status), test in sorted(self.undeclared.items())
        ]
        found += [
            f"{method} {path} declares {status} without a description"
            for (method, path), statuses in sorted(self.declared.items())
            for status, text in sorted(statuses.items())
            if not text.strip()
        ]
        return found

    def summary(self) -> str:
        declared = {(m, p, s) for (m, p), statuses in self.declared.items() for s in statuses}
        unseen = declared - set(self.answered)
        return (
            f"{len(self.answered)} (method, route, status) answered over {sum(self.answered.values())} requests; "
            f"{len(declared)} declared, {len(unseen)} of them not answered by these tests"
        )


LEDGER = Ledger()


def watch(app: web.Application, ledger: Ledger = LEDGER) -> None:
    """Record every answer of ``app`` in ``ledger``; call before the app starts (its signals freeze then)."""
    declared = {(op.method.upper(), op.path): openapi.statuses(op, app[keys.SETTINGS]) for op in app[ops.OPERATIONS]}
    for endpoint, statuses in declared.items():
        ledger.declared.setdefault(endpoint, {}).update(statuses)

    async def record(request: web.Request, response: web.StreamResponse) -> None:
        resource = request.match_info.route.resource
        if resource is None:  # no route matched: 404 or 405 from the router
            return
        endpoint = (request.method, resource.canonical)
        answer = (*endpoint, response.status)
        ledger.answered[answer] += 1
        if response.status not in declared.get(endpoint, {}):
            ledger.undeclared.setdefault(answer, os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0])

    app.on_response_prepare.append(record)
