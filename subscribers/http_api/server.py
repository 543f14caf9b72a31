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

With a console (``hookbus up``), the same app serves the operator's console
(``/console/``: its files need no token, every API route does; see
``console_api``) and the asks' signed links (``/asks/link/``, signed
instead of the token; see ``ask_links``), and every write to hooks.json is journaled (kind
``shell_hook``, phase ``config``) with its actor: ``console`` when the request
says ``X-Hookbus-Actor: console``, else ``api``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson
from aiohttp import web

from bus._core.errors import ConfigError
from bus._journal.entries import JournalEntry, publish_entry
from bus.adapters.claude_code import _http_hook as http_hook
from subscribers.http_api import _bag_api as bag_api
from subscribers.http_api import _console_api as console_api
from subscribers.http_api import _console_files as console_files
from subscribers.http_api import _handlers_api as handlers_api
from subscribers.http_api import _middleware_metrics as middleware_metrics
from subscribers.http_api._console_api import CONSOLE, Console, open_console
from subscribers.http_api._token import HOOK_TOKENS_DIR, hook_agent, load_token, token_matches
from subscribers.shell_hooks._errors import HookConfigError, HookNotFound
from subscribers.shell_hooks._hook_metrics import snapshot as hook_snapshot
from subscribers.shell_hooks._hooks_file import HOOKS_FILE
from subscribers.shell_hooks._hooks_store import HooksStore
from subscribers.shell_hooks._prx_api import is_prx_body

if TYPE_CHECKING:
    from bus._client import Bus
    from bus._service import ServiceContext
from subscribers.http_api import _ask_links as ask_links
from subscribers.http_api import _ask_webhook as ask_webhook
from subscribers.http_api import _asks_api as asks_api

log = logging.getLogger("hookbus.api")

#: Largest request body accepted (a hook is a few hundred bytes).
MAX_BODY: Final = 256 * 1024

OnWrite = Callable[[], Awaitable[object]]
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STORE: Final = web.AppKey("store", HooksStore)
_TOKEN: Final = web.AppKey("token", str)
#: Routes that take an agent's hook-only token (and refuse the admin token), and where those tokens are.
HOOK_ROUTES: Final = web.AppKey("hook_routes", frozenset)
HOOK_TOKENS: Final = web.AppKey("hook_tokens", Path)
_ON_WRITE: Final = web.AppKey("on_write", object)
#: The header the console sends so that its writes are journaled as its own.
ACTOR_HEADER: Final = "X-Hookbus-Actor"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


@web.middleware
async def _guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Authenticate (but the console's own files), and turn hookbus errors into JSON error responses."""
    if request.method == "GET" and console_files.is_public(request.path) and CONSOLE in request.app:
        return await handler(request)
    if ask_links.is_link(request.path) and CONSOLE in request.app:  # its own signature stands for the token
        return await handler(request)
    if request.path in request.app.get(HOOK_ROUTES, frozenset()):  # an agent's hook token, never the admin's
        agent = hook_agent(request.app[HOOK_TOKENS], request.headers.get("Authorization"))
        if agent is None:
            response = _error(401, "missing or wrong hook token (hookbus claude-hook install --http --agent NAME)")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        request["hook_agent"] = agent
        return await handler(request)
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


async def _written(request: web.Request, hook_id: str, event: str, decision: str) -> None:
    """Reload the worker, and journal the write with its actor where a console's bus can."""
    on_write = request.app[_ON_WRITE]
    if callable(on_write):
        await on_write()
    console = request.app.get(CONSOLE)
    if console is not None:
        actor = "console" if request.headers.get(ACTOR_HEADER) == "console" else "api"
        entry = JournalEntry("shell_hook", event, "config", hook_id, decision, f"{decision} by {actor}")
        await publish_entry(console.bus.port, entry)


async def list_hooks(request: web.Request) -> web.Response:
    config = request.app[_STORE].read()
    answer: dict[str, Any] = {"hooks": [entry.to_api() for entry in config.entries]}
    if "enabled" in config.top:  # PRX's switch for the whole file, which its console shows
        answer["enabled"] = config.enabled
    return _json(answer)


async def create_hook(request: web.Request) -> web.Response:
    body = await _body(request)
    entry = await request.app[_STORE].create(body)
    await _written(request, entry.id, entry.event, "created")
    if is_prx_body(body):
        return _json({"status": "created", "event": entry.event, "id": entry.id}, 201)
    return _json(entry.to_api(), 201)


async def update_hook(request: web.Request) -> web.Response:
    body = await _body(request)
    hook_id = request.match_info["id"]
    entry = await request.app[_STORE].update(hook_id, body)
    await _written(request, entry.id, entry.event, "updated")
    if is_prx_body(body):
        return _json({"status": "updated", "id": hook_id})
    return _json(entry.to_api())


async def delete_hook(request: web.Request) -> web.Response:
    hook_id = request.match_info["id"]
    by_prx_id = await request.app[_STORE].delete(hook_id)
    await _written(request, hook_id, "-", "deleted")
    if by_prx_id:
        return _json({"status": "deleted", "id": hook_id})
    return web.Response(status=204)


async def toggle_hook(request: web.Request) -> web.Response:
    hook_id = request.match_info["id"]
    entry, by_prx_id = await request.app[_STORE].toggle(hook_id)
    await _written(request, entry.id, entry.event, "enabled" if entry.enabled else "disabled")
    if by_prx_id:
        return _json({"status": "toggled", "id": hook_id, "enabled": entry.enabled})
    return _json({"id": entry.id, "enabled": entry.enabled})


async def hook_metrics(request: web.Request) -> web.Response:
    """Per (hook, point): calls, failures, timeouts, refusals, total and mean duration, last error."""
    return _json({"metrics": hook_snapshot()})


def make_app(
    hooks_path: Path, token: str, on_write: OnWrite | None = None, console: Console | None = None
) -> web.Application:
    """The aiohttp application of the hooks API for one hooks.json (and of the console, given one)."""
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
    if console is not None:
        console_api.add_routes(app, console)
        console_files.add_routes(app)
        middleware_metrics.add_routes(app, console)
        bag_api.add_routes(app)
        handlers_api.add_routes(app)
        asks_api.add_routes(app)
        ask_links.add_routes(app)
    return app


def add_agent_hooks(app: web.Application, bus: Bus, tokens: Path) -> None:
    """Serve ``POST /hooks/claude-code`` on ``app`` with ``bus``; its guard takes only the hook tokens in ``tokens``."""
    app[HOOK_TOKENS] = tokens
    app[HOOK_ROUTES] = frozenset({http_hook.PATH})
    app.router.add_post(http_hook.PATH, http_hook.handler(bus))


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


@dataclass(frozen=True)
class ApiSettings:
    """Where ``hookbus up`` serves the hooks API, the agent hooks' endpoint and the console."""

    host: str = "127.0.0.1"
    port: int = 8477


@asynccontextmanager
async def service(ctx: ServiceContext, settings: ApiSettings, on_write: OnWrite | None = None) -> AsyncIterator[None]:
    """The hooks API, ``POST /hooks/claude-code`` and the operator's console as a service of ``hookbus up``.

    ``on_write`` (the shell worker's reload) is called after each write to hooks.json.
    """
    token, token_from = load_token(ctx.workspace)
    ask_links.load_key(ctx.workspace)  # the asks' signed links are checked against it
    async with open_console(ctx) as console:
        app = make_app(ctx.workspace / HOOKS_FILE, token, on_write=on_write, console=console)
        add_agent_hooks(app, ctx.bus, ctx.workspace / HOOK_TOKENS_DIR)
        async with serve(app, settings.host, settings.port) as url:
            ctx.lines.append(f"  api      {url}/api/hooks (bearer token: {token_from})")
            ctx.lines.append(f"  console  {url}/console/ (same token)")
            async with ask_webhook.posting(console.bus, ctx.workspace, url) as webhook:
                if webhook is not None:
                    ctx.lines.append(f"  asks     webhook to {webhook.host} ({webhook.format}, signed links)")
                yield
