"""The claude-hooks.json handlers and Claude Code plugins: middleware modules served while the bus is up.

claude-hooks.json is the module ``claude-hooks``; each plugin folder copied
into ``<workspace>/claude-plugins/<name>/`` is the module
``claude-plugin-<name>``, its ``hooks/hooks.json`` read the same way with
``${CLAUDE_PLUGIN_ROOT}`` that folder (in its commands and its hooks'
environment). Plugins are looked for again at each poll: one added is served,
one removed is stopped.

Each Claude Code event of the file becomes one handler on its stage
(``PreToolUse`` -> ``tool.call`` ...), whose identity carries a digest of its
commands: a changed command is a changed handler, run only once an operator
approves it (``hookbus approve claude-hooks.PreToolUse``), like any module's.
A call is turned back into the input Claude Code would have given the hook
(``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``,
``tool_use_id``, ``tool_response``, ``error``, ``prompt``), the matching commands run
(:mod:`bus.adapters.claude_code._command_run`), and their answer is the decision.
The file is polled: a new good version is served, then the old one stopped; a
broken one is logged and the last good one kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson

from bus._client import Bus
from bus._core.decisions import Continue, HandlerDecision
from bus._core.subjects import TOKEN_RE
from bus._middleware.handler.module import StageCtx
from bus._module import Module
from bus._runtime.filewatch import WatchedFile
from bus._service import ServiceContext
from bus.adapters.claude_code._command_file import FILE, MARGIN_S, STAGES, ClaudeHooks, Places, load
from bus.adapters.claude_code._command_run import decide, environment, run_command

log = logging.getLogger("hookbus.claude_hooks")

#: The module name the handlers are served under (``claude-hooks.PreToolUse`` ...).
MODULE: Final = "claude-hooks"
#: The folder of the workspace Claude Code plugins are copied into, and the prefix of their modules' names.
PLUGINS: Final = "claude-plugins"
PLUGIN_MODULE: Final = "claude-plugin-"
#: A plugin's hooks file, inside its folder.
PLUGIN_HOOKS: Final = Path("hooks") / "hooks.json"
#: The events read on tool.result, and whether each wants a failed call's result.
_ON_FAILURE: Final = {"PostToolUse": False, "PostToolUseFailure": True}


def hook_input(event: str, payload: dict[str, Any], ctx: StageCtx, project: Path) -> dict[str, Any]:
    """The input Claude Code gives a hook of ``event``, from a stage's payload and context."""
    cwd = payload.get("cwd")
    out: dict[str, Any] = {
        "session_id": ctx.session or "",
        "transcript_path": "",
        "cwd": cwd if isinstance(cwd, str) else str(project),
        "permission_mode": "default",
        "hook_event_name": event,
    }
    if event == "UserPromptSubmit":
        out["prompt"] = str(payload.get("content", ""))
        return out
    out["tool_name"] = str(payload.get("name", ""))
    out["tool_input"] = payload.get("input") if isinstance(payload.get("input"), dict) else {}
    out["tool_use_id"] = str(payload.get("id") or ctx.request_id)
    if event == "PostToolUse":
        out["tool_response"] = payload.get("output", "")
    elif event == "PostToolUseFailure":
        out["error"] = str(payload.get("output", ""))
        out["is_interrupt"] = False
    elif event == "PermissionRequest":
        out["permission_suggestions"] = []
    return out


def _wanted(event: str, groups: Any, payload: dict[str, Any]) -> list[Any]:
    """The commands of ``event`` a call runs: by tool name (a prompt's: all), a result by success or failure."""
    if event in _ON_FAILURE and bool(payload.get("is_error")) is not _ON_FAILURE[event]:
        return []
    tool = str(payload.get("name", ""))
    return [c for g in groups if event == "UserPromptSubmit" or g.wants(tool) for c in g.commands]


def build(hooks: ClaudeHooks, project: Path, nats_url: str | None, name: str = MODULE) -> Module:
    """The module serving ``hooks``: one handler per Claude Code event of the file."""
    module = Module(name)
    places = hooks.places or Places(project, Path.home())
    for event, groups in hooks.events.items():
        if not groups:
            continue
        slowest = max((c.timeout for g in groups for c in g.commands), default=1.0)

        async def handler(
            stage: str, payload: dict[str, Any], ctx: StageCtx, event: str = event, groups: Any = groups
        ) -> HandlerDecision:
            commands = _wanted(event, groups, payload)
            if not commands:
                return Continue()
            stdin = orjson.dumps(hook_input(event, payload, ctx, project))
            env = environment(places, ctx.depth, nats_url)
            runs = await asyncio.gather(*(run_command(c, stdin, project, env) for c in commands))
            return decide(stage, payload, list(runs), event, commands)

        declare = module.stage(
            STAGES[event], name=event, timeout=slowest + MARGIN_S, code=hooks.digest(event),
            fail_closed=hooks.fail_closed(event),
        )  # fmt: skip
        declare(handler)
    return module


class ClaudeHooksServer:
    """Serves the workspace's claude-hooks.json on ``bus``, re-served when the file changes."""

    def __init__(
        self,
        bus: Bus,
        workspace: Path,
        nats_url: str | None,
        interval: float = 0.5,
        *,
        path: Path | None = None,
        module: str = MODULE,
        plugin_root: Path | None = None,
    ) -> None:
        self._bus = bus
        self._project = workspace.resolve()
        self._nats_url = nats_url
        self._module = module
        self._serving: asyncio.Task[None] | None = None
        self.path = path or workspace / FILE
        self.file: WatchedFile[ClaudeHooks] = WatchedFile(
            self.path, lambda path: load(path, self._project, plugin_root), self._apply, ClaudeHooks({}), interval
        )
        self._stop = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.file.check()
        self._poller = asyncio.get_running_loop().create_task(self.file.run(self._stop))

    async def _apply(self, hooks: ClaudeHooks) -> None:
        """Serve ``hooks``; the new version is announced before the old one stops.

        So a handler the edit left unchanged is never absent from the chain (a
        blocking hook would let calls through meanwhile), and a changed one
        runs in its approved version until the new one is served.
        """
        if hooks.unstaged:
            log.warning("%s: %s have no hookbus stage and are not run", self.path, ", ".join(hooks.unstaged))
        if hooks.unknown:
            log.warning("%s: %s are not Claude Code events hookbus knows; not run", self.path, ", ".join(hooks.unknown))
        module = build(hooks, self._project, self._nats_url, self._module)
        if not module.declarations:
            await self._halt()
            return
        ready = asyncio.Event()
        serving = asyncio.get_running_loop().create_task(module.serve(bus=self._bus, ready=ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({serving, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if serving.done() and not serving.cancelled() and serving.exception() is not None:
            log.error("%s: cannot serve its handlers: %s", self.path, serving.exception())
            return  # the version served before, if any, goes on
        old, self._serving = self._serving, serving
        await _cancel(old)
        names = ", ".join(decl.qualname for decl in module.declarations)
        log.info("%s: serving %s", self.path, names)

    async def _halt(self) -> None:
        task, self._serving = self._serving, None
        await _cancel(task)

    async def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await self._halt()


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class ClaudePluginsServer:
    """Serves each plugin folder of ``<workspace>/claude-plugins/`` as the module ``claude-plugin-<name>``."""

    def __init__(self, bus: Bus, workspace: Path, nats_url: str | None, interval: float = 0.5) -> None:
        self._bus = bus
        self._workspace = workspace
        self._nats_url = nats_url
        self._interval = interval
        self.folder = workspace / PLUGINS
        self.servers: dict[str, ClaudeHooksServer] = {}
        self._stop = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    def _found(self) -> dict[str, Path]:
        try:
            entries = sorted(self.folder.iterdir())
        except OSError:
            return {}
        found = {}
        for entry in entries:
            if not (entry / PLUGIN_HOOKS).is_file():
                continue
            if TOKEN_RE.fullmatch(entry.name) is None:
                log.warning("%s: a plugin's folder name is a module name's part: letters, digits, '_', '-'", entry)
                continue
            found[entry.name] = entry
        return found

    async def check(self) -> None:
        """Serve the plugins added since the last check, stop the ones removed."""
        found = self._found()
        for name in [n for n in self.servers if n not in found]:
            await self.servers.pop(name).stop()
            log.info("%s: plugin %s removed; its handlers are stopped", self.folder, name)
        for name, folder in found.items():
            if name in self.servers:
                continue
            root = folder.resolve()
            server = ClaudeHooksServer(
                self._bus, self._workspace, self._nats_url, self._interval,
                path=folder / PLUGIN_HOOKS, module=f"{PLUGIN_MODULE}{name}", plugin_root=root,
            )  # fmt: skip
            await server.start()
            self.servers[name] = server

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval)
            if not self._stop.is_set():
                await self.check()

    async def start(self) -> None:
        await self.check()
        self._poller = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for server in self.servers.values():
            await server.stop()
        self.servers.clear()


@asynccontextmanager
async def service(ctx: ServiceContext) -> AsyncIterator[None]:
    """claude-hooks.json's and the Claude Code plugins' handlers as a service of ``hookbus up``."""
    server = ClaudeHooksServer(ctx.bus, ctx.workspace, ctx.nats_url)
    plugins = ClaudePluginsServer(ctx.bus, ctx.workspace, ctx.nats_url)
    await server.start()
    await plugins.start()
    ctx.lines.append(f"  claude   {server.path} (module {MODULE}, one handler per hook event)")
    ctx.lines.append(f"  claude   {plugins.folder}/<name>/ (module {PLUGIN_MODULE}<name>, Claude Code plugins)")
    try:
        yield
    finally:
        await plugins.stop()
        await server.stop()
