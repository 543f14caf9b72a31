"""``GET /api/bag`` and agent_os's ``GET /v1/hooks/bag``: each bag key the live handlers declare, with its
producers and consumers, and the standard keys (same token)."""

from __future__ import annotations

import orjson
from aiohttp import web

from bus._core.bag_keys import STANDARD_KEYS
from bus._middleware.kernel.bag import ports
from subscribers.http_api._console_api import CONSOLE


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/bag", bag)
    app.router.add_get("/v1/hooks/bag", bag)


async def bag(request: web.Request) -> web.Response:
    view = request.app[CONSOLE].view
    body = {"keys": ports(decl for decl, _ in view.declarations().values()), "standard": list(STANDARD_KEYS)}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
