"""One handler in a stage's chain: what the kernel needs to call it, and whether a call's context reaches it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bus._core.declaration import Declaration
from bus._middleware.faults import Outcome
from bus._middleware.rules.compile import Rule
from bus._middleware.trust import TrustState


@dataclass(frozen=True, slots=True)
class Link:
    """One handler in a stage's chain, with what the kernel needs to call it."""

    decl: Declaration
    subject: str
    batch: bool
    trust: TrustState
    match: frozenset[str] | None  # canonical names the handler wants; None: every call
    identity: str  # the declaration's hash (trust, journal)
    #: For a held guard (no live approved instance): why each call it wants is cancelled, and the outcome.
    hold: str | None = None
    outcome: Outcome = Outcome.OK
    #: The agents it is granted to (None: every agent, global).
    agents: frozenset[str] | None = None
    #: Whether it takes only some calls by context (a ``when`` or grants): checked per call, before any request.
    scoped: bool = False
    #: For a rule (bus._middleware.rules): the compiled rule the kernel evaluates itself, with no request.
    rule: Rule | None = None
    #: In shadow (``mode: shadow``, ``hookbus shadow NAME``): it decides, journaled as ``would_*``; nothing applied.
    shadow: bool = False

    def in_scope(self, ctx: Mapping[str, Any]) -> bool:
        """Whether a call with this context reaches the handler (its grants and its ``when``)."""
        if self.agents is not None:
            agent = ctx.get("agent")
            if not isinstance(agent, str) or agent not in self.agents:
                return False
        return self.decl.when.matches(ctx)
