"""Compiling a record's source into its handler, with a restricted set of builtins and imports.

The source must define ``async def handle(stage, payload, ctx)`` returning
``Continue()``, ``Cancel(reason)``, ``Patch(payload)`` or ``Ask(reason)`` (the
names are in scope, with ``sleep``). It sees a reduced ``__builtins__`` (no ``open``,
``exec``, ``eval``, ``compile``, ``input``, ``breakpoint``, ``globals``,
``vars``, ``getattr``, ``setattr``, ``delattr``) and may import only the
modules the runner allows, each seen as the public, non-module names it
holds (``shlex.os``, ``json.codecs`` are not there).

Before anything runs, the source is refused if it names an attribute that
leads out of the namespace: any starting with ``_`` (``__globals__``,
``__code__``, ``__builtins__``, ``__subclasses__``, ``__class__``, a module's
private names), a frame or code object's (``gi_frame``, ``cr_frame``,
``f_globals``, ``tb_frame``, ``co_code`` ...), or ``format``/``format_map``
(a format string reaches attributes by name: ``"{0.__globals__}"``), in an
expression, a ``match`` class pattern or an import; and any ``__dunder__``
name (``__builtins__``, ``__import__``).

Python inside one process still offers more ways around than any such
list closes: only approved records are compiled, and the runner runs them
with its own credentials, so approving a record grants it what the runner
holds (its NATS user and the other records it serves). For code nobody
should trust, run the runner under process isolation (docs/records.md).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import inspect
import re
import sys
import types
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bus._core.decisions import Ask, Cancel, Continue, HandlerDecision, Patch
from bus._core.errors import RecordError
from bus._core.run_context import CallCtx

#: Modules a record may import unless the runner's configuration says otherwise: pure computation.
DEFAULT_IMPORTS: Final = frozenset(
    {"re", "json", "math", "fnmatch", "shlex", "string", "datetime", "collections", "itertools", "functools"}
)
#: Builtins a record never gets: they open files, run other code or reach the caller's namespaces.
_WITHHELD: Final = frozenset(
    {
        "open", "exec", "eval", "compile", "input", "breakpoint", "globals", "vars", "help", "exit", "quit",
        "memoryview", "getattr", "setattr", "delattr", "type",
    }
)  # fmt: skip
#: Attribute names a record may not write: they lead to globals, frames, code, classes' innards or the
#: modules a module imported (a format string's fields are attribute lookups too).
_FORBIDDEN_ATTRIBUTE: Final = re.compile(
    r"^(_|gi_|cr_|ag_|f_|tb_|co_)|^(format|format_map|vformat|get_field|get_value|mro)$"
)
#: Names of allowed modules a record never sees: they get or set attributes named by a string (functools'
#: wrappers copy ``__globals__`` and ``__dict__`` between objects; a Formatter reads fields by name).
_MODULE_WITHHELD: Final = {"functools": frozenset({"update_wrapper", "wraps"}), "string": frozenset({"Formatter"})}

#: A compiled record: ``await handle(stage, payload, ctx)`` gives its decision.
RecordHandler = Callable[[str, dict[str, Any], "RecordCtx"], Coroutine[Any, Any, HandlerDecision]]


@dataclass(frozen=True, slots=True)
class RecordCtx(CallCtx):
    """What a record's ``ctx`` holds: the call's context, the fields of a module's StageCtx but ``bus``.

    A record cannot emit or intercept; it reads its declared bag ``inputs`` and
    sets its declared ``outputs`` (``ctx.outputs["key"] = value``) as a module's handler does.
    A record has no config.
    """

    def get(self, name: str, default: Any = None) -> Any:
        """``ctx.get("agent")``, as records written against a dict context expect."""
        return getattr(self, name) if name in _CTX_FIELDS else default


_CTX_FIELDS: Final = frozenset(RecordCtx.__dataclass_fields__)


def check_source(name: str, tree: ast.Module) -> None:
    """Refuse a record whose source names an attribute or a dunder name that leads out (RecordError)."""

    def refuse(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", "?")
        raise RecordError(name, f"does not load: line {line}: {what} is not allowed in a record")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _FORBIDDEN_ATTRIBUTE.search(node.attr):
            refuse(node, f"attribute {node.attr!r}")
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            refuse(node, f"setting or deleting attribute {node.attr!r} (objects are shared with other records)")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name.startswith("__"):
            refuse(node, f"defining {node.name!r}")
        elif isinstance(node, ast.ClassDef) and node.keywords:
            refuse(node, "a class keyword (metaclass)")
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                if _FORBIDDEN_ATTRIBUTE.search(attr):
                    refuse(node, f"attribute {attr!r}")
        elif isinstance(node, ast.Name) and node.id.startswith("__"):
            refuse(node, f"name {node.id!r}")
        elif isinstance(node, ast.alias) and any(part.startswith("_") for part in node.name.split(".")):
            refuse(node, f"import of {node.name!r}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("_"):
            refuse(node, f"import of {node.module!r}")


#: What a record sees of a module it may import: its public names but the modules among them.
_SEEN: dict[str, types.SimpleNamespace] = {}


def _public(module: types.ModuleType) -> types.SimpleNamespace:
    seen = _SEEN.get(module.__name__)
    if seen is None:
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        withheld = _MODULE_WITHHELD.get(module.__name__, frozenset())
        public = {
            n: getattr(module, n) for n in names if hasattr(module, n) and not n.startswith("_") and n not in withheld
        }
        seen = _SEEN[module.__name__] = types.SimpleNamespace(
            **{n: v for n, v in public.items() if not isinstance(v, types.ModuleType)}
        )
    return seen


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
        builtins.__import__(name, globals, locals, fromlist, level)
        return _public(sys.modules[name if fromlist else name.split(".")[0]])

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
        "Ask": Ask,
        "sleep": asyncio.sleep,
    }
    try:
        tree = ast.parse(source, f"<record {name}>")
    except SyntaxError as exc:
        raise RecordError(name, f"does not load: SyntaxError: {exc}") from None
    check_source(name, tree)
    try:
        code = compile(tree, f"<record {name}>", "exec")
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
