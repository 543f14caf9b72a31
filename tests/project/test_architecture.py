"""The shape of the code: imports run one way, never in a circle, and only the transport touches nats-py.

The graph is built from the source with :mod:`ast`, counting every import:
module level, inside functions and under ``TYPE_CHECKING`` alike, so a
circle cannot hide behind a guard. Layers, top to bottom, are declared in
``LAYERS``; a module may import its own layer or any layer below it.
"""

from __future__ import annotations

import ast
import concurrent.futures
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bus", "subscribers", "triggers")

#: Layers from the top down: (name, module prefixes). The first matching prefix, longest first, wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cli", ("bus._cli",)),
    ("workers", ("subscribers", "triggers")),
    # Adapters for agent frameworks (LangChain, the OpenAI Agents SDK), on the façade and SyncBus.
    ("adapters", ("bus.adapters",)),
    # The sandbox: processes started on a user's behalf, bounded (shell hooks, command hooks, hookbus isolate).
    ("sandbox", ("bus._sandbox",)),
    # The façade: Bus, Module (whose serve() opens a Bus), the service contract of ``hookbus up``, test helpers.
    # (bus._presence: each process's presence record, kept through the Bus; bus._operator: approve and detach,
    # journaled; bus._status_report: what hookbus status lists; bus._switching: enable/disable/grant/revoke, journaled;
    # bus._bulk: the Bus's second connection, for event subscriptions.)
    (
        "facade",
        (
            "bus",
            "bus._bulk",
            "bus._client",
            "bus._counters",
            "bus._metrics",
            "bus._module",
            "bus._operator",
            "bus._presence",
            "bus._records",
            "bus._service",
            "bus._status_report",
            "bus._switching",
            "bus.sync",
            "bus.testing",
        ),
    ),
    # The Bus's plumbing (bus.port): its connection, handed to everything under the façade.
    ("port", ("bus._port",)),
    # The receive path of event subscriptions, under the façade that makes them.
    ("subscriptions", ("bus._subscription",)),
    ("middleware sides", ("bus._middleware.kernel", "bus._middleware.handler")),
    ("middleware shared, journal, turns", ("bus._middleware", "bus._journal", "bus._turns")),
    ("transport", ("bus._transport",)),
    # What a running process needs beside the protocol: eager starts, task sets, files, spans, counters.
    ("runtime", ("bus._runtime",)),
    ("core", ("bus._core",)),
)
#: Modules outside bus/_transport that still import nats-py directly, each to move behind the transport.
#: The test fails when one is added and when one listed here no longer does (so the list only shrinks).
NATS_OUTSIDE_TRANSPORT: frozenset[str] = frozenset()
#: The longest a module may be, in lines: past it, split it by what its parts do.
MAX_MODULE_LINES = 500
#: Modules still over MAX_MODULE_LINES, each to split; the test fails when one is added and when one listed
#: here is back under (so the list only shrinks).
LONG_MODULES: frozenset[str] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of a file. CPython 3.11 can refuse it with a SystemError ("AST constructor recursion
    depth mismatch") in a process where earlier tests moved the recursion limit: a fresh thread has its
    own depth bookkeeping."""
    text = path.read_text()
    try:
        return ast.parse(text, str(path))
    except SystemError:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(ast.parse, text, str(path)).result()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every module ``name`` imports, anywhere in its file (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".") if is_package else name.split(".")[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            yield base
            for alias in node.names:  # ``from bus._core import depth`` imports the module bus._core.depth
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges = {target for target in _imports(name, path) if target in MODULES and target != name}
        # Importing a.b.c runs a/__init__ and a/b/__init__ first: count them only when they hold code.
        graph[name] = edges
    return graph


def _layer(module: str) -> int:
    best = (-1, len(LAYERS))
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = prefix in ("bus",)
            if (module == prefix if exact else module == prefix or module.startswith(prefix + ".")) and len(
                prefix
            ) > best[0]:
                best = (len(prefix), rank)
    assert best[0] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        _layer(name)


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_no_upward_import() -> None:
    upward = [
        f"{source} ({LAYERS[_layer(source)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"
        for source, targets in _graph().items()
        for target in sorted(targets)
        if _layer(target) < _layer(source)
    ]
    assert upward == []


def test_core_does_not_import_the_transport() -> None:
    graph = _graph()
    wrong = [
        f"{s} imports {t}"
        for s in graph
        if s.startswith("bus._core")
        for t in graph[s]
        if t.startswith("bus._transport")
    ]
    assert wrong == []


def test_only_the_transport_imports_nats() -> None:
    importing = {
        name
        for name, path in MODULES.items()
        if not name.startswith("bus._transport")
        and any(target == "nats" or target.startswith("nats.") for target in _imports(name, path))
    }
    assert sorted(importing - NATS_OUTSIDE_TRANSPORT) == [], "import nats-py only in bus/_transport"
    assert sorted(NATS_OUTSIDE_TRANSPORT - importing) == [], "no longer imports nats: remove from the list"


def _nats_names_taken_from_the_transport(name: str, path: Path) -> Iterator[str]:
    """Names ``name`` imports from bus/_transport that are nats-py's own objects (a type, a function, a module)."""
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bus._transport"):
            source = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(source, alias.name, None)
                owner = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
                if (owner or "").split(".")[0] == "nats":
                    yield f"{name} takes {alias.name} ({owner}) from {node.module}"


def test_no_module_over_the_line_limit() -> None:
    long = {name for name, path in MODULES.items() if len(path.read_text().splitlines()) > MAX_MODULE_LINES}
    assert sorted(long - LONG_MODULES) == [], f"over {MAX_MODULE_LINES} lines: split by what the parts do"
    assert sorted(LONG_MODULES - long) == [], "back under the limit: remove from LONG_MODULES"


def test_nats_types_stay_in_the_transport() -> None:
    """Naming nats-py's types through a transport module that re-exports them is importing nats-py too."""
    found = [
        taken
        for name, path in MODULES.items()
        if not name.startswith("bus._transport")
        for taken in _nats_names_taken_from_the_transport(name, path)
    ]
    assert found == [], "use the transport's own types and errors, not nats-py's"


def test_the_re_export_check_sees_a_nats_type(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("from bus._transport.kv import nats_errors\nfrom bus._transport.kv import Bucket\n")
    assert list(_nats_names_taken_from_the_transport("bus.probe", path)) == [
        "bus.probe takes nats_errors (nats.errors) from bus._transport.kv"
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import a.b\n", ["a.b"]),
        ("def f():\n    from bus._core import errors\n", ["bus._core", "bus._core.errors"]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bus._client import Bus\n",
            ["typing", "bus._client"],
        ),
    ],
)
def test_the_scanner_sees_every_import(tmp_path: Path, source: str, expected: list[str]) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert list(_imports("bus.probe", path)) == expected


def test_the_checks_catch_a_circle_and_an_upward_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert _layer("bus._core.errors") > _layer("bus._client") > _layer("subscribers.sdk") > _layer("bus._cli.up")
    assert _layer("bus._middleware.kernel.view") < _layer("bus._middleware.trust")


def test_exceptions_form_one_tree_under_hookbus_error() -> None:
    """Every public exception derives from HookbusError and is declared in an ``errors`` module: the core's
    bases in bus/_core/errors.py, a feature's own errors in its package's errors.py."""
    from bus._core.errors import HookbusError

    wrong = []
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if not (isinstance(value, type) and issubclass(value, BaseException)) or value.__module__ != name:
                continue
            if not issubclass(value, HookbusError):
                wrong.append(f"{name}.{attr} does not derive from HookbusError")
            elif not name.endswith((".errors", "._errors")) and not attr.startswith("_"):
                wrong.append(f"{name}.{attr} is declared outside an errors module")
    assert wrong == []


def _imports_outside(graph: dict[str, set[str]], prefix: str, allowed: tuple[str, ...]) -> list[str]:
    """Imports of hookbus modules by the modules under ``prefix`` that land outside ``allowed``."""
    return [
        f"{source} imports {target}"
        for source, targets in graph.items()
        if source == prefix or source.startswith(prefix + ".")
        for target in sorted(targets)
        if not any(target == a or target.startswith(a + ".") for a in allowed)
    ]


def test_the_core_imports_only_the_core() -> None:
    """bus/_core holds the protocol: it needs nothing else of hookbus (``bus`` itself would run the façade)."""
    assert _imports_outside(_graph(), "bus._core", ("bus._core",)) == []


def test_the_runtime_imports_only_itself_and_the_core() -> None:
    assert _imports_outside(_graph(), "bus._runtime", ("bus._runtime", "bus._core")) == []


#: The most lines a module of the core or the runtime may have: past it, split it by what its parts do.
MAX_LINES = 500


def test_no_core_or_runtime_module_is_over_the_line_limit() -> None:
    long = {
        name: lines
        for name, path in MODULES.items()
        if name.startswith(("bus._core.", "bus._runtime."))
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_isolation_check_sees_an_import_from_above() -> None:
    graph = {"bus._core.a": {"bus._core.b", "bus._transport.kv"}, "bus._core.b": set(), "bus._coreish": {"bus._client"}}
    assert _imports_outside(graph, "bus._core", ("bus._core",)) == ["bus._core.a imports bus._transport.kv"]


def test_the_architecture_doc_names_only_paths_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"\b((?:bus|subscribers|triggers)/[\w/]*(?:\.py)?)", text))
    assert named, "docs/architecture.md names no paths"
    missing = sorted(path for path in named if not (ROOT / path.split(":")[0]).exists())
    assert missing == []


#: The parts whose modules must stay under MAX_MODULE_LINES: services, triggers, adapters, the sandbox, the CLI.
SIZED: tuple[str, ...] = ("subscribers", "triggers", "bus.adapters", "bus._sandbox", "bus._cli")
MAX_MODULE_LINES = 500


def _unit(module: str) -> str:
    """The package a module belongs to as a part of its own: a service (``subscribers.shell_hooks``), a trigger
    package, an adapter (``bus.adapters.claude_code``); anything else is its own unit."""
    parts = module.split(".")
    if parts[0] in ("subscribers", "triggers"):
        return ".".join(parts[:2])
    if parts[:2] == ["bus", "adapters"]:
        return ".".join(parts[:3])
    return module


def _unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for source, targets in graph.items():
        edges = units.setdefault(_unit(source), set())
        edges.update(_unit(target) for target in targets if _unit(target) != _unit(source))
    for targets in list(units.values()):
        for target in targets:
            units.setdefault(target, set())
    return units


def test_no_loop_between_services_or_adapters() -> None:
    """Service packages and adapters import each other one way only: a service that needs another's part
    imports it, never the other way round too (the composition is ``hookbus up``'s, not a service's)."""
    assert _cycles(_unit_graph(_graph())) == []


def test_the_package_check_catches_a_loop_between_services() -> None:
    graph = {"subscribers.a.x": {"subscribers.b.y"}, "subscribers.b.y": set(), "subscribers.b.z": {"subscribers.a.w"}}
    graph["subscribers.a.w"] = set()
    assert _cycles(_unit_graph(graph)) == [["subscribers.a", "subscribers.b"]]


def test_no_module_is_over_the_size_limit() -> None:
    long = {
        name: lines
        for name, path in MODULES.items()
        if any(name == part or name.startswith(part + ".") for part in SIZED)
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these modules (over {MAX_MODULE_LINES} lines)"


def _defines_a_service(path: Path) -> bool:
    return any(
        isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name == "service"
        for node in _parse(path).body
    )


def test_every_service_is_composed_by_up() -> None:
    """One composition root: every module with a ``service`` is imported by ``hookbus up``'s list of services."""
    up = ROOT / "bus" / "_cli" / "up.py"
    composed = set(_imports("bus._cli.up", up))
    services = {name for name, path in MODULES.items() if name != "bus._service" and _defines_a_service(path)}
    assert len(services) > 8
    assert sorted(services - composed) == []


def test_no_product_module_is_named_like_a_test() -> None:
    named = [name for name in MODULES if re.search(r"(^|\.)(test_\w*|\w*_test|conftest)$", name)]
    assert named == []


#: The modules each feature package may have, by convention, under the same name.
FEATURE_DECLARATIONS = frozenset({"__init__", "errors", "subjects", "schema", "config_schema"})


def test_no_two_service_modules_share_a_name() -> None:
    """Services, triggers, adapters and the sandbox name each module for what it does, once (the CLI's are
    named for their commands). A feature's own declarations keep the names every feature uses for them:
    ``errors`` (its exceptions), ``subjects`` (its names on the bus), ``schema`` (its wire messages) and
    ``config_schema`` (its files' types)."""
    by_name: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        if path.stem.lstrip("_") in FEATURE_DECLARATIONS:
            continue
        if name.startswith(("subscribers", "triggers", "bus.adapters", "bus._sandbox")) and path.stem != "__init__":
            by_name.setdefault(path.stem, []).append(name)
    assert {stem: names for stem, names in by_name.items() if len(names) > 1} == {}


def _bench_back_arrows(bench: Path) -> list[str]:
    """Imports from a benchmark into the tests other than their shared helpers in ``tests.support``: a bench
    runs a scenario a test module also runs only through a helper both import."""
    return [
        f"{path.name} imports {target}"
        for path in sorted(bench.rglob("*.py"))
        for target in _imports(f"bench.{path.stem}", path)
        if (target == "tests" or target.startswith("tests.")) and not target.startswith("tests.support")
    ]


def test_no_bench_module_imports_a_test_module() -> None:
    assert _bench_back_arrows(ROOT / "bench") == []


def test_the_bench_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    (tmp_path / "bench_probe.py").write_text(
        "from tests.support.waiting import wait_until\n"
        "def main():\n    from tests.transport.test_failover import ALLOWED\n"
    )
    assert _bench_back_arrows(tmp_path) == ["bench_probe.py imports tests.transport.test_failover"]
