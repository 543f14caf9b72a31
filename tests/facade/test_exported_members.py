"""The public surface of `bus`: one list, every name in it importable and documented, every error it raises in it.

``bus/__init__.py`` lists each public name once, as an import under
``TYPE_CHECKING``, and reads those lines at run time to load them lazily; the
tests below read the same block with :mod:`ast` and hold the two readings,
``__all__`` and the objects against each other. The exceptions a public
method of an exported class can raise are found from the source: its
``raise`` statements, those of the methods and functions of the façade it
calls, and the errors its docstring names.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import bus
from bus._core.errors import HookbusError

INIT = Path(bus.__file__)


def _declared(source: str) -> dict[str, str]:
    """Each name imported as ``X as X`` under ``if TYPE_CHECKING:``, with its module, read with ast."""
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module, ast.unparse(statement)
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it as itself to export it"
                    found[alias.name] = statement.module
    return found


def test_all_is_the_one_list_sorted_and_whole() -> None:
    declared = _declared(INIT.read_text())
    assert bus.__all__ == sorted(declared), "__all__ is the TYPE_CHECKING imports, sorted"
    assert len(set(bus.__all__)) == len(bus.__all__)
    assert declared == bus._WHERE  # the run-time reading of the block is ast's


def test_every_public_name_is_importable_from_a_fresh_interpreter() -> None:
    script = "import bus\nfor name in bus.__all__:\n    getattr(bus, name)\nprint(len(bus.__all__))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(bus.__all__))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        bus.Nope  # noqa: B018


def _doc_comment(name: str) -> str:
    """The ``#:`` comment above ``name = ...`` in hookbus's source (how an alias is documented)."""
    for path in sorted(INIT.parent.rglob("*.py")):
        match = re.search(rf"((?:^#:.*\n)+){re.escape(name)}\s*[:=]", path.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    return ""


def test_every_public_name_is_documented() -> None:
    undocumented = []
    for name in bus.__all__:
        value = getattr(bus, name)
        own = vars(value).get("__doc__") if isinstance(value, type) else getattr(value, "__doc__", None)
        documented = (own if inspect.isclass(value) or inspect.isfunction(value) else None) or _doc_comment(name)
        if not (documented or "").strip():
            undocumented.append(name)
    assert undocumented == [], "give each a docstring (or an alias a #: comment)"


def _errors_by_name() -> dict[str, type[BaseException]]:
    """Every hookbus exception class, by name."""
    found: dict[str, type[BaseException]] = {}
    todo: list[type[BaseException]] = [HookbusError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


#: Attributes through which a façade class reaches another class of the façade: ``self._port.x()`` is BusPort's.
_THROUGH = {"_port": "BusPort", "port": "BusPort", "bus": "Bus", "middleware": "Interceptor"}


class _Facade:
    """The functions and methods of some modules, by ``Class.method`` and ``function``, and what each raises."""

    def __init__(self, modules: list[ModuleType]) -> None:
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.errors = _errors_by_name()
        for module in modules:
            tree = ast.parse(inspect.getsource(module))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions[node.name] = node
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            self.functions[f"{node.name}.{item.name}"] = item

    def raised(self, key: str) -> set[str]:
        """The hookbus exceptions ``key`` may raise: its own raises, its docstring's, those of what it calls."""
        seen: set[str] = set()
        found: set[str] = set()
        todo = [key]
        while todo:
            current = todo.pop()
            if current in seen or current not in self.functions:
                continue
            seen.add(current)
            node = self.functions[current]
            found.update(word for word in re.findall(r"\b\w+\b", ast.get_docstring(node) or "") if word in self.errors)
            owner = current.partition(".")[0] if "." in current else None
            for inner in ast.walk(node):
                if isinstance(inner, ast.Raise) and inner.exc is not None:
                    target = inner.exc.func if isinstance(inner.exc, ast.Call) else inner.exc
                    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                    if name in self.errors:
                        found.add(name)
                elif isinstance(inner, ast.Call | ast.Attribute):
                    todo.extend(self._callee(inner.func if isinstance(inner, ast.Call) else inner, owner))
        return found

    @staticmethod
    def _callee(func: ast.expr, owner: str | None) -> Iterator[str]:
        if isinstance(func, ast.Name):
            yield func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            if owner is not None:
                yield f"{owner}.{func.attr}"  # a method, or a property read
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Attribute)
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "self"
            and func.value.attr in _THROUGH
        ):
            yield f"{_THROUGH[func.value.attr]}.{func.attr}"


#: The modules whose code a public method runs before it reaches the transport (or a handler's code).
FACADE = (
    "bus._client",
    "bus._port",
    "bus.sync",
    "bus._module",
    "bus._subscription",
    "bus._core.envelope",
    "bus._middleware.kernel.intercept",
)


def _public_methods() -> Iterator[tuple[type, str]]:
    for name in bus.__all__:
        value = getattr(bus, name)
        if isinstance(value, type) and not issubclass(value, BaseException):
            for attr, member in vars(value).items():
                if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    yield value, attr


def test_every_error_a_public_method_raises_is_exported() -> None:
    facade = _Facade([importlib.import_module(name) for name in FACADE])
    exported = {getattr(bus, name) for name in bus.__all__}
    missing = sorted(
        f"{cls.__name__}.{method} raises {error}"
        for cls, method in _public_methods()
        for error in facade.raised(f"{cls.__name__}.{method}")
        if facade.errors[error] not in exported
    )
    assert missing == [], "export them from bus/__init__.py"
    # the walk reaches through the port: emit raises BusClosedError itself, start through self._port.connection()
    assert {"BusClosedError", "ConfigError"} <= facade.raised("Bus.start")
    assert "NoResponders" in facade.raised("BusPort.request_raw")


def test_the_walk_sees_raises_in_what_a_method_calls(tmp_path: Path) -> None:
    path = tmp_path / "probe_facade.py"
    path.write_text(
        textwrap.dedent(
            '''
            from bus._core.errors import NotSent, RequestTimeout

            def helper():
                raise NotSent("closed", "probe")

            class Bus:
                def verb(self):
                    """May raise RequestTimeout."""
                    return self._port.go()

            class BusPort:
                def go(self):
                    helper()
            '''
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        probe = importlib.import_module("probe_facade")
        assert _Facade([probe]).raised("Bus.verb") == {"NotSent", "RequestTimeout"}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("probe_facade", None)


def test_the_package_ships_its_type_marker() -> None:
    assert (INIT.parent / "py.typed").is_file()
    text = (INIT.parent.parent / "pyproject.toml").read_text()
    assert re.search(r'^\[tool\.setuptools\.package-data\]\n(?:.*\n)*?bus = \[[^\]]*"py\.typed"', text, re.MULTILINE)
