"""The dashboard at ``/ui``: static HTML, CSS and JavaScript shipped in ``service/ui``, read once at start.

The page holds no data and no secret: it signs in with an API key or the admin token (kept in the tab's
sessionStorage) and calls the JSON API with it, so it can do exactly what that key can do and no more.
Every answer carries a Content Security Policy that allows this origin only and no inline script.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from tickd.service.declare import Routes

# Path -> (file in service/ui, content type). One route per file: nothing else under /ui is served.
ASSETS: dict[str, tuple[str, str]] = {
    "/ui": ("index.html", "text/html"),
    "/ui/app.css": ("app.css", "text/css"),
    "/ui/api.js": ("api.js", "text/javascript"),
    "/ui/dom.js": ("dom.js", "text/javascript"),
    "/ui/tenant.js": ("tenant.js", "text/javascript"),
    "/ui/letters.js": ("letters.js", "text/javascript"),
    "/ui/notices.js": ("notices.js", "text/javascript"),
    "/ui/bulk.js": ("bulk.js", "text/javascript"),
    "/ui/calendars.js": ("calendars.js", "text/javascript"),
    "/ui/stats.js": ("stats.js", "text/javascript"),
    "/ui/admin.js": ("admin.js", "text/javascript"),
    "/ui/app.js": ("app.js", "text/javascript"),
}

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A new release must not run against a cached older script; the files are small.
    "Cache-Control": "no-cache",
}

_BODIES = web.AppKey("ui_bodies", dict[str, bytes])


def _load() -> dict[str, bytes]:
    folder = Path(__file__).resolve().parent.parent / "ui"  # service/ui, shipped as package data
    return {path: (folder / name).read_bytes() for path, (name, _) in ASSETS.items()}


async def asset(request: web.Request) -> web.Response:
    path = request.match_info.route.resource.canonical if request.match_info.route.resource else ""
    content_type = ASSETS[path][1]
    return web.Response(body=request.app[_BODIES][path], content_type=content_type, charset="utf-8", headers=HEADERS)


def _declared() -> Routes:
    """One GET per file, each served by ``asset``."""
    declared = Routes("dashboard", auth=None)
    for path, (name, media) in ASSETS.items():
        declared.get(path, f"Dashboard: {name}", media=media)(asset)
    return declared


routes = _declared()


def setup(app: web.Application) -> None:
    app[_BODIES] = _load()
