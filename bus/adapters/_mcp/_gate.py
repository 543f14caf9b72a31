"""What the proxy asks for its decisions: the bus, or, when the bus cannot be reached, the remembered guards.

A :class:`bus._client.Bus` is a :class:`Gate` as it is. Without one the proxy
runs on an :class:`OfflineGate`: a stage a trusted fail-closed handler guarded
when the bus was last seen (or every stage, with ``--fail-closed``) is
cancelled with the cause, the others continue, and events are dropped, as
``hookbus claude-hook`` does for one hook call.

Per tool: a guard declared with ``match=`` names (``mcp__fs__write_file``)
refuses only the calls whose name it matches; the others pass unless another
guard holds them. What each guard matched is remembered beside the guards
(``matches``); when it does not speak for exactly the guards remembered for a
stage (another program rewrote them since), every guard holds the whole stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from bus._core.decisions import Cancel, Continue, Decision
from bus._core.stages import match_field

if TYPE_CHECKING:
    from bus._client import Bus

#: The stages the proxy intercepts on; their fail-closed guards are the ones remembered.
MCP_STAGES: Final = ("tool.call", "tool.result", "tool.list", "resource.read")
#: The state entry's key for what each remembered guard matches (a stage's guard: its names, or None for all).
MATCHES: Final = "matches"

Matches = dict[str, dict[str, list[str] | None]]


class Gate(Protocol):
    """The two calls the proxy makes on the bus."""

    async def intercept(self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None) -> Decision:
        """The chain's decision on ``payload`` at ``stage``."""
        ...

    async def emit(self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None) -> bool:
        """Publish one event; False if it was dropped."""
        ...


class OfflineGate:
    """No bus: the remembered fail-closed guards refuse their stages, everything else continues."""

    def __init__(
        self,
        guards: Mapping[str, Iterable[str]],
        cause: str,
        *,
        fail_closed: bool = False,
        matches: Matches | None = None,
    ) -> None:
        self.guards = {stage: sorted(names) for stage, names in guards.items() if names}
        self.cause = cause
        self.fail_closed = fail_closed
        self.matches = matches or {}

    def holding(self, stage: str, payload: Mapping[str, Any]) -> list[str]:
        """The remembered guards that would take this call: those matching its name, or all without a record."""
        names = self.guards.get(stage, [])
        matched = self.matches.get(stage)
        if not names or not isinstance(matched, dict) or set(matched) != set(names):
            return names
        value = payload.get(match_field(stage))
        return [n for n in names if matched[n] is None or value in (matched[n] or ())]

    async def intercept(self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None) -> Decision:
        names = self.holding(stage, payload)
        if names or self.fail_closed:
            who = ", ".join(names) if names else f"{stage} (--fail-closed)"
            return Cancel(f"{who} is fail-closed and the bus cannot be reached: {self.cause}")
        return Continue()

    async def emit(self, subject: str, payload: Mapping[str, Any] | None = None, session_id: str | None = None) -> bool:
        return False


def fail_closed_guards(bus: Bus, stages: Iterable[str] = MCP_STAGES) -> dict[str, list[str]]:
    """Per stage, the trusted fail-closed handlers in force on ``bus``'s view (held ones included)."""
    from bus.adapters.claude_code._mapping import fail_closed_guards as guards_of

    return guards_of(bus, tuple(stages))


def fail_closed_matches(bus: Bus, stages: Iterable[str] = MCP_STAGES) -> Matches:
    """Per stage, each fail-closed guard's ``match=`` names (None: it takes every call), as :func:`fail_closed_guards`.

    A guard named twice on a stage (a live link and a held one) takes the union; one that takes all stays all.
    """
    view = bus.middleware.view
    found: Matches = {}
    for stage in stages:
        chain = view.chains.get(stage) if view is not None else None
        if chain is None:
            continue
        each: dict[str, list[str] | None] = {}
        for link in [*(link for link in chain.links if link.decl.fail_closed), *chain.holds]:
            name, prior = link.decl.qualname, each.get(link.decl.qualname, [])
            each[name] = None if link.match is None or prior is None else sorted({*prior, *link.match})
        if chain.guard:
            each[chain.guard] = None
        if each:
            found[stage] = each
    return found
