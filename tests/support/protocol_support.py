"""The Python reference of the middleware wire's identity rules, for the protocol vectors and tests.

Imported through the public façade where it exports them, else from the module
that defines them (the package layout is being reorganised; both are tried).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


def _find(public: str, name: str, modules: Iterable[str]) -> Callable[..., Any]:
    """``bus.<public>`` if the façade exports it, else ``<module>.<name>`` from the first module that has it."""
    import bus

    if hasattr(bus, public):
        return getattr(bus, public)  # type: ignore[no-any-return]
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"hookbus exports no {public}")


def declaration_from_wire(wire: dict[str, Any]) -> Any:
    """The normalised Declaration a kernel reads from a wire declaration (raises for an invalid one)."""
    from_wire = _find("declaration_from_wire", "from_wire", ("bus._core.declaration", "bus.declaration"))
    return from_wire(wire)


def identity(wire: dict[str, Any]) -> str:
    """The identity hash a kernel computes for a wire declaration."""
    return str(declaration_from_wire(wire).identity())


def canonical(wire: dict[str, Any]) -> str:
    """The exact text that is hashed (sorted keys, no whitespace, raw UTF-8)."""
    import orjson

    return orjson.dumps(declaration_from_wire(wire).to_wire(), option=orjson.OPT_SORT_KEYS).decode()


def version(wires: Iterable[dict[str, Any]]) -> str:
    """The version token of an instance declaring these handlers (its request subject's last token)."""
    version_of = _find("version_of", "version_of", ("bus._middleware.registry", "bus.registry"))
    return str(version_of([declaration_from_wire(wire) for wire in wires]))
