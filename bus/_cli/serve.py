"""``hookbus serve FILE[:NAME]``: serve the middleware module a Python file defines, and say when it is up.

FILE is imported as ``python FILE`` would run it (its folder first on the
import path); NAME picks the ``Module`` bound to that name when the file has
several. One line per handler says what it serves and whether it waits for
approval (``serving guard.no_rm on tool.call (fail-closed), waiting for
approval``), then ``approved guard.no_rm`` when an operator approves it. With
``--dev`` a change to FILE is loaded and served again (a changed handler is a
new identity: it waits for approval again). Ctrl-C or SIGTERM stops it
cleanly: the module leaves the registry, and its fail-closed handlers stay
in force until an operator detaches them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from bus._cli.common import add_nats_url, stop_on_signals
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._cli.parser import add_command
from bus._cli.workspace import bus_name
from bus._client import Bus
from bus._core.declaration import Declaration
from bus._core.errors import ConfigError, RegistryError
from bus._middleware.registry import TRUST_BUCKET, open_bucket
from bus._middleware.trust import approved_identity
from bus._module import Module
from bus._runtime.filewatch import FileVersion

#: How often ``--dev`` looks at the file.
DEV_POLL_S: Final = 0.5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "serve",
        "serve the middleware module of a Python file (ready line, approvals, --dev reload)",
        __doc__,
    )
    parser.add_argument("target", metavar="FILE[:NAME]", help="a Python file defining a bus.Module (NAME: which one)")
    parser.add_argument("--dev", action="store_true", help="serve the file again whenever it changes")
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    parser.set_defaults(func=run)


def split_target(target: str) -> tuple[Path, str | None]:
    """``guard.py:guard`` -> (guard.py, 'guard'); a colon not followed by an identifier is part of the path."""
    path, colon, name = target.rpartition(":")
    if colon and name.isidentifier() and path:
        return Path(path), name
    return Path(target), None


def load_module(path: Path, name: str | None) -> Module:
    """Import ``path`` afresh and return its Module (the one named ``name``, or the only one)."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    code = _import(path)
    if name is not None:
        found = getattr(code, name, None)
        if not isinstance(found, Module):
            raise ConfigError(f"{path}: {name!r} is not a bus.Module (it is {type(found).__name__})")
        return found
    modules = {id(value): value for value in vars(code).values() if isinstance(value, Module)}
    if len(modules) != 1:
        names = sorted(key for key, value in vars(code).items() if isinstance(value, Module))
        what = f"several: {', '.join(names)}; pick one with {path}:NAME" if modules else "none"
        raise ConfigError(f"{path} must define one bus.Module at top level (found {what})")
    return next(iter(modules.values()))


def _import(path: Path) -> ModuleType:
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as ``python FILE`` would: its siblings import
    spec = importlib.util.spec_from_file_location(f"hookbus_serve_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: not a Python file")
    code = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(code)
    except Exception as exc:  # the user's file: any error it raises is its own, reported in one line
        raise ConfigError(f"{path}: {type(exc).__name__}: {exc}") from None
    return code


def ready_line(decl: Declaration, approved: str | None) -> str:
    """What one served handler is waiting for, in the words ``hookbus chain`` uses."""
    mode = "fail-closed" if decl.fail_closed else "fail-open"
    if approved == decl.identity():
        state = "approved"
    elif approved is not None:
        state = "changed since its approval, waiting for approval"
    else:
        state = "waiting for approval"
    return f"serving {decl.qualname} on {decl.stage} ({mode}), {state}"


async def run(args: argparse.Namespace) -> int:
    path, name = split_target(args.target)
    first = load_module(path, name)
    stop = stop_on_signals()
    version = FileVersion(path)
    version.changed()
    reload = (lambda: load_module(path, name)) if args.dev else None
    module: Module | None = first
    async with command_bus(args, f"hookbus-serve-{first.name}") as bus:
        print(f"hookbus serve: {path} on {bus_name(bus.servers)}", flush=True)
        while module is not None:
            module = await _serve_until(bus, module, stop, version, reload)
            if module is not None:
                print(f"hookbus serve: {path} changed: serving it again", flush=True)
    print("hookbus serve: stopped", flush=True)
    return 0


async def _serve_until(
    bus: Bus, module: Module, stop: asyncio.Event, version: FileVersion, reload: Callable[[], Module] | None
) -> Module | None:
    """Serve ``module`` until a stop signal (None) or, with ``reload``, a good new version of the file (it).

    A change that does not load is reported and the last good version goes on serving.
    """
    ready = asyncio.Event()
    serving = asyncio.create_task(module.serve(bus=bus, ready=ready))
    tasks: set[asyncio.Task[Any]] = {serving}
    try:
        await _ready(ready, serving)
        tasks.add(asyncio.create_task(_report_trust(bus, module.declarations)))
        stopping = asyncio.create_task(stop.wait())
        tasks.add(stopping)
        while True:
            watched = {serving, stopping}
            if reload is not None:
                watched.add(asyncio.create_task(_changed(version)))
                tasks.update(watched)
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if serving in done:
                serving.result()  # its error, if it failed
                raise ConfigError(f"module {module.name} stopped serving")
            if stopping in done or reload is None:
                return None
            try:
                return reload()
            except ConfigError as exc:
                print(f"hookbus serve: {exc}; still serving the last good version", file=sys.stderr, flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _ready(ready: asyncio.Event, serving: asyncio.Task[None]) -> None:
    """Wait until the module serves; if serving ends first, raise its error."""
    waiting = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait({waiting, serving}, return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:
        waiting.cancel()
        serving.result()
        raise ConfigError("the module stopped before it was ready")


async def _changed(version: FileVersion) -> None:
    """Return once the file changed: polled, a file has no event to wait on."""
    while True:
        await asyncio.sleep(DEV_POLL_S)
        if version.changed():
            return


async def _report_trust(bus: Bus, declarations: list[Declaration]) -> None:
    """Print each handler's ready line, then ``approved NAME`` when the trust store approves it as served."""
    try:
        kv = await open_bucket(bus.port, TRUST_BUCKET)
        current = {decl.qualname: await kv.get(decl.qualname) for decl in declarations}
    except RegistryError as exc:
        print(f"hookbus serve: cannot read approvals ({exc})", file=sys.stderr, flush=True)
        return
    pending: dict[str, str] = {}
    for decl in declarations:
        entry = current[decl.qualname]
        approved = approved_identity(entry.value if entry else None)
        print(ready_line(decl, approved), flush=True)
        if approved != decl.identity():
            pending[decl.qualname] = decl.identity()
    if not pending:
        return
    watch = await kv.watch()
    try:
        async for item in watch:
            if item is None or item.key not in pending:
                continue
            if approved_identity(item.value) == pending[item.key]:
                print(f"approved {item.key}", flush=True)
                del pending[item.key]
                if not pending:
                    return
    finally:
        await watch.stop()
