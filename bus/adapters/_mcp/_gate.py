"""What the proxy asks for its decisions: the bus, or, when the bus cannot be reached, the remembered guards.

A :class:`bus._client.Bus` is a :class:`Gate` as it is. Without one the proxy
runs on an :class:`OfflineGate`: a stage a trusted fail-closed handler guarded
when the bus was last seen (or every stage, with ``--fail-closed``) is
cancelled with the cause, the others continue, and events are dropped, as
``hookbus claude-hook`` does for one hook call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from bus._core.decisions import Cancel, Continue, Decision

if TYPE_CHECKING:
    from bus._client import Bus

#: The stages the proxy intercepts on; their fail-closed guards are the ones remembered.
MCP_STAGES: Final = ("tool.call", "tool.result", "tool.list", "resource.read")


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

    def __init__(self, guards: Mapping[str, Iterable[str]], cause: str, *, fail_closed: bool = False) -> None:
        self.guards = {stage: sorted(names) for stage, names in guards.items() if names}
        self.cause = cause
        self.fail_closed = fail_closed

    async def intercept(self, stage: str, payload: dict[str, Any], ctx: Mapping[str, Any] | None = None) -> Decision:
        names = self.guards.get(stage)
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
