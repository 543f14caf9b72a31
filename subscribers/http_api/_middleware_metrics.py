"""``GET /api/middleware/metrics``: per (handler, stage) calls, decisions, faults, p50/p95 and last error, bus-wide.

``GET /v1/hooks/metrics`` serves the same snapshot as agent_os names it, per
(hook, point): calls, panics, timeouts, total and mean time, last error.

The snapshot (:mod:`subscribers.fleet_metrics._middleware_snapshot`) starts
with the app on the console's own connection and counts what every kernel
reports from then on. Same bearer token as every API route.
"""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web

from subscribers.fleet_metrics._middleware_snapshot import MiddlewareSnapshot
from subscribers.http_api._console_api import Console


class Snapshots:
    """The app's snapshot, made when the app starts (on the console's connection) and stopped with it."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self.current: MiddlewareSnapshot | None = None

    async def start(self, app: web.Application) -> None:
        self.current = await MiddlewareSnapshot(self._console.bus.port).start()

    async def stop(self, app: web.Application) -> None:
        if self.current is not None:
            await self.current.stop()


SNAPSHOT: Final = web.AppKey("middleware_snapshot", Snapshots)


def add_routes(app: web.Application, console: Console) -> None:
    snapshots = app[SNAPSHOT] = Snapshots(console)
    app.on_startup.append(snapshots.start)
    app.on_cleanup.append(snapshots.stop)
    app.router.add_get("/api/middleware/metrics", metrics)
    app.router.add_get("/v1/hooks/metrics", hook_points)


def _current(request: web.Request) -> MiddlewareSnapshot:
    snapshot = request.app[SNAPSHOT].current
    if snapshot is None:
        raise web.HTTPServiceUnavailable(text="the middleware snapshot is not started")
    return snapshot


async def metrics(request: web.Request) -> web.Response:
    snapshot = _current(request)
    body = {"since": snapshot.since, "metrics": snapshot.snapshot()}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def hook_points(request: web.Request) -> web.Response:
    snapshot = _current(request)
    body = {"since": snapshot.since, "metrics": snapshot.hook_points()}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
