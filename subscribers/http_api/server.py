"""The hooks HTTP API of the PRX document, served by ``hookbus up``; PRX's own shapes too.

::

    GET    /api/hooks                  {"hooks": [hook, ...]}
    POST   /api/hooks                  201 hook
    PUT    /api/hooks/{id}             200 hook
    DELETE /api/hooks/{id}             204
    PATCH  /api/hooks/{id}/toggle      200 {"id", "enabled"}

A hook is ``{id, event, action, enabled, created_at, updated_at}``, plus PRX's
flat ``command`` and ``timeout_ms``. PRX's shapes (what its web console sends)
are accepted beside these and answered as PRX answers: a flat body
``{event, command, args, timeout_ms}`` (``{"status": "created" | "updated"}``),
and ids ``event`` or ``event:n`` (``{"status": "deleted" | "toggled"}``). Every
endpoint needs ``Authorization: Bearer <token>`` (401 otherwise). Writes are
validated like hooks.json (400 with the reason), written atomically, and
handed to ``on_write`` (the worker's reload) so they take effect at once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from bus.core.errors import ConfigError, HookConfigError, HookNotFound
from subscribers.http_api.token import token_matches
from subscribers.shell_hooks import metrics
from subscribers.shell_hooks.hooks_store import HooksStore
from subscribers.shell_hooks.prx_api import is_prx_body

log = logging.getLogger("hookbus.api")

#: Largest request body accepted (a hook is a few hundred bytes).
MAX_BODY: Final = 256 * 1024

OnWrite = Callable[[], Awaitable[object]]
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STORE: Final = web.AppKey("store", HooksStore)
_TOKEN: Final = web.AppKey("token", str)
_ON_WRITE: Final = web.AppKey("on_write", object)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


@web.middleware
async def _guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Authenticate, and turn hookbus errors into JSON error responses."""
    if not token_matches(request.headers.get("Authorization"), request.app[_TOKEN]):
        response = _error(401, "missing or wrong bearer token")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    try:
        return await handler(request)
    except HookNotFound as exc:
        return _error(404, str(exc))
    except HookConfigError as exc:
        if exc.file is not None:  # the file on disk is broken, not the request
            return _error(409, f"hooks.json is invalid, fix it first: {exc}")
        return _error(400, str(exc))


async def _body(request: web.Request) -> Any:
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise HookConfigError(f"request body is not valid JSON ({exc})") from None


async def _written(request: web.Request) -> None:
    on_write = request.app[_ON_WRITE]
    if callable(on_write):
        await on_write()


async def list_hooks(request: web.Request) -> web.Response:
    config = request.app[_STORE].read()
    answer: dict[str, Any] = {"hooks": [entry.to_api() for entry in config.entries]}
    if "enabled" in config.top:  # PRX's switch for the whole file, which its console shows
        answer["enabled"] = config.enabled
    return _json(answer)


async def create_hook(request: web.Request) -> web.Response:
    body = await _body(request)
    entry = await request.app[_STORE].create(body)
    await _written(request)
    if is_prx_body(body):
        return _json({"status": "created", "event": entry.event, "id": entry.id}, 201)
    return _json(entry.to_api(), 201)


async def update_hook(request: web.Request) -> web.Response:
    body = await _body(request)
    hook_id = request.match_info["id"]
    entry = await request.app[_STORE].update(hook_id, body)
    await _written(request)
    if is_prx_body(body):
        return _json({"status": "updated", "id": hook_id})
    return _json(entry.to_api())


async def delete_hook(request: web.Request) -> web.Response:
    hook_id = request.match_info["id"]
    by_prx_id = await request.app[_STORE].delete(hook_id)
    await _written(request)
    if by_prx_id:
        return _json({"status": "deleted", "id": hook_id})
    return web.Response(status=204)


async def toggle_hook(request: web.Request) -> web.Response:
    hook_id = request.match_info["id"]
    entry, by_prx_id = await request.app[_STORE].toggle(hook_id)
    await _written(request)
    if by_prx_id:
        return _json({"status": "toggled", "id": hook_id, "enabled": entry.enabled})
    return _json({"id": entry.id, "enabled": entry.enabled})


async def hook_metrics(request: web.Request) -> web.Response:
    """Per (hook, point): calls, failures, timeouts, refusals, total and mean duration, last error."""
    return _json({"metrics": metrics.snapshot()})


def make_app(hooks_path: Path, token: str, on_write: OnWrite | None = None) -> web.Application:
    """The aiohttp application of the hooks API for one hooks.json."""
    app = web.Application(middlewares=[_guard], client_max_size=MAX_BODY)
    app[_STORE] = HooksStore(hooks_path)
    app[_TOKEN] = token
    app[_ON_WRITE] = on_write
    app.router.add_get("/api/hooks", list_hooks)
    app.router.add_get("/api/hooks/metrics", hook_metrics)
    app.router.add_post("/api/hooks", create_hook)
    app.router.add_put("/api/hooks/{id}", update_hook)
    app.router.add_delete("/api/hooks/{id}", delete_hook)
    app.router.add_patch("/api/hooks/{id}/toggle", toggle_hook)
    return app


@asynccontextmanager
async def serve(app: web.Application, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``app`` while the block runs; yields its base URL (port 0: a free port)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise ConfigError(f"cannot serve the hooks API on {host}:{port}: {exc.strerror or exc}") from None
        bound_host, bound_port = runner.addresses[0][:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()
