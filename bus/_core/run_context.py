"""The agent run a call belongs to, as its agent claims it: the one place that carries it caller -> wire -> handler.

agent_os gives every hook its process's place in the process tree (``parent``,
``depth``), its tool allowlist (``tools``) and its budget (``budget_total``,
``budget_spent``, ``budget_remaining()``). An agent passes them in the ``ctx``
of ``Bus.intercept`` (``parent``, ``spawn_depth``, ``tools``, ``budget_total``,
``budget_spent``, ``budget_unit``); the kernel copies each one that has its
type onto the request (docs/protocol.md, Request) and leaves out the others; a
module, a record, a rule and a hook-turn read them from :class:`RunClaims`.

They are claims of the agent's process, never vouched by the bus: a guard that
must not be talked out of its decision does not rest on them (docs/security.md).
The handler-facing ``depth`` is the depth in the process tree; the recursion
depth of the event is ``event_depth`` (the wire's ``ctx.depth``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from bus._core.middleware_schema import RequestCtx

#: The ``ctx`` keys of ``Bus.intercept`` this module carries.
CLAIM_KEYS: Final = ("parent", "spawn_depth", "tools", "budget_total", "budget_spent", "budget_unit")
_MAX_SPAWN_DEPTH: Final = 1000
_MAX_TOOLS: Final = 1024
_MAX_AMOUNT: Final = 1e15
_UNITS: Final = frozenset({"usd", "tokens"})


def _amount(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < _MAX_AMOUNT else None


def put_claims(ctx: Mapping[str, Any], wire: RequestCtx) -> None:
    """Copy the caller's claims onto the request's ``wire`` ctx: each only when given with its type."""
    parent, depth, tools = ctx.get("parent"), ctx.get("spawn_depth"), ctx.get("tools")
    if isinstance(parent, str):
        wire.parent = parent
    if type(depth) is int and 0 <= depth <= _MAX_SPAWN_DEPTH:
        wire.spawn_depth = depth
    if isinstance(tools, list | tuple) and len(tools) <= _MAX_TOOLS and all(isinstance(t, str) for t in tools):
        wire.tools = list(tools)
    total, spent, unit = _amount(ctx.get("budget_total")), _amount(ctx.get("budget_spent")), ctx.get("budget_unit")
    if total is not None and spent is not None:  # one without the other says nothing
        wire.budget_total, wire.budget_spent = total, spent
        if unit in _UNITS:
            wire.budget_unit = str(unit)


def _given(value: Any) -> Any:
    return None if isinstance(value, msgspec.UnsetType) else value


class BudgetLeft:
    """``budget_remaining()`` for a context that holds ``budget_total`` and ``budget_spent``."""

    __slots__ = ()
    budget_total: float | None
    budget_spent: float | None

    def budget_remaining(self) -> float | None:
        """What is left of the agent's budget (never below 0), or None when it has none."""
        if self.budget_total is None or self.budget_spent is None:
            return None
        return max(self.budget_total - self.budget_spent, 0.0)


@dataclass(frozen=True, slots=True)
class RunClaims(BudgetLeft):
    """What the agent says of its run: parent run, depth in the process tree, tool allowlist, budget."""

    parent: str | None = None
    depth: int = 0
    tools: tuple[str, ...] | None = None
    budget_total: float | None = None
    budget_spent: float | None = None
    budget_unit: str | None = None

    def fields(self) -> dict[str, Any]:
        """As plain fields, ``budget_remaining`` a value (what a rule and a hook-turn's model are shown)."""
        return {
            "parent": self.parent,
            "depth": self.depth,
            "tools": None if self.tools is None else list(self.tools),
            "budget_total": self.budget_total,
            "budget_spent": self.budget_spent,
            "budget_remaining": self.budget_remaining(),
            "budget_unit": self.budget_unit,
        }


NO_CLAIMS: Final = RunClaims()


def claims_of(wire: RequestCtx) -> RunClaims:
    """The claims a request carries (each absent one: its default)."""
    unset = msgspec.UNSET
    if wire.parent is unset and wire.spawn_depth is unset and wire.tools is unset and wire.budget_total is unset:
        return NO_CLAIMS
    tools = _given(wire.tools)
    return RunClaims(
        parent=_given(wire.parent),
        depth=_given(wire.spawn_depth) or 0,
        tools=None if tools is None else tuple(tools),
        budget_total=_given(wire.budget_total),
        budget_spent=_given(wire.budget_spent),
        budget_unit=_given(wire.budget_unit),
    )
