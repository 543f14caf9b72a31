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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Self

import msgspec

from bus._core.middleware_schema import RequestCtx

if TYPE_CHECKING:
    from bus._core.declaration import Declaration

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


@dataclass(frozen=True, slots=True)
class CallCtx(BudgetLeft):
    """The call's context as a handler sees it: a module's StageCtx (which adds ``bus``) and a record's RecordCtx.

    ``depth`` is the run's depth in its agent's process tree (0: a run nobody spawned; agent_os's
    ``depth``); the recursion depth of the event is ``event_depth``. ``parent``, ``depth``, ``tools``
    and the budget are the agent's claims (:class:`RunClaims`).
    """

    stage: str
    handler: str
    session: str | None
    agent: str | None
    depth: int
    deadline: float  # Unix time (seconds) after which the kernel stops waiting
    request_id: str
    #: Whose message (the agent's user), which agent template, which process: when the caller gave them.
    user: str | None = None
    template: str | None = None
    process: str | None = None
    #: The bag values it declared as inputs (a missing optional one is its default).
    inputs: Mapping[str, Any] = field(default_factory=dict)
    #: What it puts in the bag for the handlers after it: only its declared outputs are kept.
    outputs: dict[str, Any] = field(default_factory=dict)
    #: The handler's own config (``@handlers.stage(config=...)``; a hook-turn's ``config:``), never sent.
    config: Mapping[str, Any] = field(default_factory=dict)
    #: The recursion depth of the call (the wire's ``ctx.depth``): what ``depth`` held up to 0.4.
    event_depth: int = 0
    #: The parent run (``agent/turn``) when the agent's run was spawned by another, else None.
    parent: str | None = None
    #: The agent process's tool allowlist, when the agent gave it.
    tools: tuple[str, ...] | None = None
    #: The agent's budget (the layer nearest its limit): total and spent in ``budget_unit``; None without one.
    budget_total: float | None = None
    budget_spent: float | None = None
    budget_unit: str | None = None

    @classmethod
    def of_request(cls, decl: Declaration, wire: RequestCtx, **given: Any) -> Self:
        """The context of the handler ``decl`` names in the call ``wire`` carries; ``given``: the other fields."""
        run = claims_of(wire)
        return cls(
            stage=decl.stage,
            handler=decl.qualname,
            session=wire.session,
            agent=wire.agent,
            depth=run.depth,
            deadline=wire.deadline,
            request_id=wire.id,
            user=_given(wire.user),
            template=_given(wire.template),
            process=_given(wire.process),
            event_depth=wire.depth,
            parent=run.parent,
            tools=run.tools,
            budget_total=run.budget_total,
            budget_spent=run.budget_spent,
            budget_unit=run.budget_unit,
            **given,
        )
