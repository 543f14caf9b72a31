"""Compiling a record's source into its handler, with a restricted set of builtins and imports.

The source must define ``async def handle(stage, payload, ctx)`` returning
``Continue()``, ``Cancel(reason)`` or ``Patch(payload)`` (the names are in
scope, with ``sleep``). It sees a reduced ``__builtins__`` (no ``open``,
``exec``, ``eval``, ``compile``, ``input``, ``breakpoint``, ``globals``,
``vars``) and may import only the modules the runner allows.

This is a guard against mistakes, not a security boundary: Python inside one
process can reach around any such restriction (through object attributes,
frames, ``gc``). Only approved records are compiled; for code nobody should
trust, run the runner under process isolation (docs/records.md).
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bus.core.decisions import Cancel, Continue, Decision, Patch
from bus.core.errors import RecordError

#: Modules a record may import unless the runner's configuration says otherwise: pure computation.
DEFAULT_IMPORTS: Final = frozenset(
    {"re", "json", "math", "fnmatch", "shlex", "string", "datetime", "collections", "itertools", "functools"}
)
#: Builtins a record never gets: they open files, run other code or reach the caller's namespaces.
_WITHHELD: Final = frozenset(
    {"open", "exec", "eval", "compile", "input", "breakpoint", "globals", "vars", "help", "exit", "quit", "memoryview"}
)

#: A compiled record: ``await handle(stage, payload, ctx)`` gives its decision.
RecordHandler = Callable[[str, dict[str, Any], "RecordCtx"], Coroutine[Any, Any, Decision]]


@dataclass(frozen=True, slots=True)
class RecordCtx:
    """What a record's ``ctx`` holds: the call's context, the fields of a module's StageCtx but ``bus``.

    A record cannot emit or intercept; it reads its declared bag ``inputs`` and
    sets its declared ``outputs`` (``ctx.outputs["key"] = value``) as a module's handler does.
    """

    stage: str
    handler: str
    session: str | None
    agent: str | None
    depth: int
    deadline: float
    request_id: str
    user: str | None = None
    template: str | None = None
    process: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """``ctx.get("agent")``, as records written against a dict context expect."""
        return getattr(self, name) if name in _CTX_FIELDS else default


_CTX_FIELDS: Final = frozenset(RecordCtx.__dataclass_fields__)


def _importer(allowed: frozenset[str], record: str) -> Callable[..., Any]:
    def guarded_import(
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: Sequence[str] = (),
        level: int = 0,
    ) -> Any:
        if level != 0 or name.split(".")[0] not in allowed:
            raise ImportError(f"record {record} may not import {name!r} (allowed: {', '.join(sorted(allowed))})")
        return builtins.__import__(name, globals, locals, fromlist, level)

    return guarded_import


def restricted_builtins(allowed: frozenset[str], record: str) -> dict[str, Any]:
    """The ``__builtins__`` a record runs with."""
    safe = {name: value for name, value in vars(builtins).items() if name not in _WITHHELD}
    safe["__import__"] = _importer(allowed, record)
    return safe


def compile_record(name: str, source: str, allowed: Iterable[str] = DEFAULT_IMPORTS) -> RecordHandler:
    """Execute the record's module body once and return its ``handle``; RecordError saying why not."""
    chosen = frozenset(allowed)
    namespace: dict[str, Any] = {
        "__builtins__": restricted_builtins(chosen, name),
        "__name__": f"hookbus_record_{name}",
        "Continue": Continue,
        "Cancel": Cancel,
        "Patch": Patch,
        "sleep": asyncio.sleep,
    }
    try:
        code = compile(source, f"<record {name}>", "exec")
        exec(code, namespace)  # noqa: S102 - the point: an approved record's body, in its restricted namespace
    except Exception as exc:
        raise RecordError(name, f"does not load: {type(exc).__name__}: {exc}") from None
    handle = namespace.get("handle")
    if not inspect.iscoroutinefunction(handle):
        raise RecordError(name, "must define async def handle(stage, payload, ctx)")
    if len(inspect.signature(handle).parameters) != 3:
        raise RecordError(name, "handle must take exactly (stage, payload, ctx)")
    handler: RecordHandler = handle
    return handler
