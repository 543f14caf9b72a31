"""A handler's declaration: what a module tells the kernel about each handler.

The declaration is normalised (sorted references, qualified names, canonical
matcher, float timeout) so that one handler declared two ways is one
declaration, and its SHA-256 is the handler's identity for trust.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from bus.core.errors import DeclarationError
from bus.core.stages import validate_stage
from bus.core.subjects import TOKEN_RE

log = logging.getLogger("hookbus.middleware")

#: Seconds a handler gets when it does not say.
DEFAULT_TIMEOUT: Final = 2.0
#: No handler may hold an action longer than this: larger timeouts are clamped (with a warning).
MAX_TIMEOUT: Final = 30.0


@dataclass(frozen=True, slots=True)
class Declaration:
    """One handler on one stage, normalised."""

    module: str
    name: str
    stage: str
    fail_closed: bool = False
    timeout: float = DEFAULT_TIMEOUT
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    match: tuple[str, ...] = ()
    code: str = ""

    @property
    def qualname(self) -> str:
        """``module.handler``: how references, the journal and the CLI name it."""
        return f"{self.module}.{self.name}"

    def identity(self) -> str:
        """SHA-256 of the normalised declaration: equal for the same handler however declared."""
        return hashlib.sha256(orjson.dumps(self.to_wire(), option=orjson.OPT_SORT_KEYS)).hexdigest()

    def to_wire(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "name": self.name,
            "stage": self.stage,
            "fail_closed": self.fail_closed,
            "timeout": self.timeout,
            "before": list(self.before),
            "after": list(self.after),
            "match": list(self.match),
            "code": self.code,
        }


def declare(
    module: str,
    name: str,
    stage: str,
    *,
    fail_closed: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    before: str | Iterable[str] = (),
    after: str | Iterable[str] = (),
    match: str | Iterable[str] | None = None,
    code: str = "",
) -> Declaration:
    """Build a normalised Declaration, raising DeclarationError for what is wrong."""
    where = f"{module}.{name}"
    for part, what in ((module, "module name"), (name, "handler name")):
        if not isinstance(part, str) or not TOKEN_RE.fullmatch(part):
            raise DeclarationError(where, f"the {what} must match [A-Za-z0-9_-]+")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise DeclarationError(where, f"timeout must be a positive number of seconds, not {timeout!r}")
    if timeout > MAX_TIMEOUT:
        log.warning(
            "handler %s: timeout %gs clamped to %gs: no handler may hold an action longer", where, timeout, MAX_TIMEOUT
        )
        timeout = MAX_TIMEOUT
    return Declaration(
        module=module,
        name=name,
        stage=validate_stage(stage),
        fail_closed=bool(fail_closed),
        timeout=float(timeout),
        before=_references(module, before, where),
        after=_references(module, after, where),
        match=_matcher(match, where),
        code=code,
    )


def _names(value: str | Iterable[str] | None, split: str | None, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in (value.split(split) if split else [value]) if part.strip()]
    parts = list(value)
    for part in parts:
        if not isinstance(part, str):
            raise DeclarationError(where, f"a name must be a string, not {part!r}")
    return [part.strip() for part in parts]


def _references(module: str, value: str | Iterable[str], where: str) -> tuple[str, ...]:
    """Qualify bare handler names with the declaring module; sort; drop duplicates."""
    out = set()
    for ref in _names(value, None, where):
        parts = ref.split(".")
        if len(parts) > 2 or not all(TOKEN_RE.fullmatch(part) for part in parts):
            raise DeclarationError(where, f"reference {ref!r} is not 'handler' or 'module.handler'")
        out.add(ref if len(parts) == 2 else f"{module}.{ref}")
    return tuple(sorted(out))


def _matcher(value: str | Iterable[str] | None, where: str) -> tuple[str, ...]:
    """``"write_file|apply_patch"`` or a list of names: a sorted tuple of distinct names."""
    names = sorted(set(_names(value, "|", where)))
    if value is not None and not names:
        raise DeclarationError(where, "match names no tool")
    return tuple(names)


def from_wire(obj: dict[str, Any]) -> Declaration:
    """Rebuild (and re-normalise) a declaration received from the registry.

    ``fail_closed`` must be a JSON boolean: a promise to cancel is never read
    out of a string such as ``"false"``.
    """
    fail_closed = obj.get("fail_closed", False)
    if not isinstance(fail_closed, bool):
        raise DeclarationError(
            f"{obj['module']}.{obj['name']}", f"fail_closed must be true or false, not {fail_closed!r}"
        )
    return declare(
        obj["module"],
        obj["name"],
        obj["stage"],
        fail_closed=fail_closed,
        timeout=obj.get("timeout", DEFAULT_TIMEOUT),
        before=obj.get("before", ()),
        after=obj.get("after", ()),
        match=obj.get("match") or None,
        code=obj.get("code", ""),
    )
