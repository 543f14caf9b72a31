"""The console's page, script and style: package files served as they are, without the token.

They hold no data: the page asks for the token, keeps it for the tab and
sends it with every API call. Only the names listed here are served (no path
from the request reaches the file system), each with a content security
policy that lets the page load nothing but its own files and call nothing but
its own origin.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from aiohttp import web

#: The files under ``subscribers/http_api/console/`` and their content types.
ASSETS: Final = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "asks.js": "text/javascript",
    "console.css": "text/css",
}
#: No third-party call, no inline script or style, no framing.
POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def _read(name: str) -> bytes:
    return (resources.files("subscribers.http_api") / "console" / name).read_bytes()


async def asset(request: web.Request) -> web.Response:
    name = request.match_info.get("name") or "index.html"
    if name not in ASSETS:
        raise web.HTTPNotFound(text=f"no console file {name!r}")
    headers = {"Content-Security-Policy": POLICY, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
    return web.Response(body=_read(name), content_type=ASSETS[name], headers=headers)


async def to_console(request: web.Request) -> web.Response:
    raise web.HTTPFound("/console/")


def is_public(path: str) -> bool:
    """Whether ``path`` is one of the console's files (served without the token)."""
    return path in ("/", "/console", "/console/") or path.removeprefix("/console/") in ASSETS


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", to_console)
    app.router.add_get("/console", to_console)
    app.router.add_get("/console/", asset)
    app.router.add_get("/console/{name}", asset)
