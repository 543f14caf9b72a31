"""Trigger filters: conditions on envelope and payload fields; all must hold.

``{field: value}`` means equality; ``{field: {op: operand}}`` with op one of
``==  !=  >  >=  <  <=  in  not_in  matches  exists``. A comparison between
values of different kinds is simply false, never an error at run time.
``matches`` patterns are RE2 (see :mod:`triggers.engine._regex`): no event can make
one run for long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from bus._core.envelope import Event
from bus._core.errors import ConfigError
from bus.adapters._errors import PatternError
from triggers.engine._fields import MISSING, lookup, valid_path
from triggers.engine._regex import compile_pattern


def _ordered(check: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(value: Any, operand: Any) -> bool:
        numbers = (int, float)
        if isinstance(value, bool) or isinstance(operand, bool):
            return False
        same = (isinstance(value, numbers) and isinstance(operand, numbers)) or (
            isinstance(value, str) and isinstance(operand, str)
        )
        return same and check(value, operand)

    return compare


_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "==": lambda v, o: v is not MISSING and v == o,
    "!=": lambda v, o: v is MISSING or v != o,
    ">": _ordered(lambda v, o: v > o),
    ">=": _ordered(lambda v, o: v >= o),
    "<": _ordered(lambda v, o: v < o),
    "<=": _ordered(lambda v, o: v <= o),
    "in": lambda v, o: v is not MISSING and v in o,
    "not_in": lambda v, o: v is MISSING or v not in o,
    "matches": lambda v, o: isinstance(v, str) and o.search(v) is not None,
    "exists": lambda v, o: (v is not MISSING) == o,
}


@dataclass(frozen=True)
class Condition:
    path: str
    op: str
    operand: Any

    def holds(self, event: Event) -> bool:
        return _OPS[self.op](lookup(event, self.path), self.operand)

    def describe(self) -> str:
        operand = self.operand.pattern if self.op == "matches" else self.operand
        return f"{self.path} {self.op} {operand!r}"


def parse_conditions(spec: Any, where: str) -> tuple[Condition, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a mapping of field paths to conditions")
    out = []
    for path, rule in spec.items():
        if not isinstance(path, str) or not valid_path(path):
            raise ConfigError(f"{where}: {path!r} is not a field path (event, session_id, depth, payload.<name> ...)")
        if not isinstance(rule, dict):
            out.append(Condition(path, "==", rule))
            continue
        for op, operand in rule.items():
            out.append(_condition(path, op, operand, where))
    return tuple(out)


def _condition(path: str, op: Any, operand: Any, where: str) -> Condition:
    if op not in _OPS:
        raise ConfigError(f"{where}: {path}: unknown operator {op!r} (one of {', '.join(_OPS)})")
    if op in ("in", "not_in") and not isinstance(operand, list):
        raise ConfigError(f"{where}: {path}: {op!r} takes a list")
    if op == "exists" and not isinstance(operand, bool):
        raise ConfigError(f"{where}: {path}: 'exists' takes true or false")
    if op == "matches":
        if not isinstance(operand, str):
            raise ConfigError(f"{where}: {path}: 'matches' takes a regular expression string")
        try:
            operand = compile_pattern(operand)
        except PatternError as exc:
            raise ConfigError(
                f"{where}: {path}: bad regular expression {operand!r}: {exc} "
                "(patterns are RE2: no backreferences, no lookahead or lookbehind)"
            ) from None
    return Condition(path, op, operand)
