"""Held stages: a guard held by the operator cancels the calls it wants at once, journaled once per window.

The first call of a window gets an entry of its own; the rest are counted and
journaled together when the window ends (a held stage of a busy agent must not
cost a journal message per call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final

from bus._core.decisions import Cancel, Decision
from bus._core.middleware_schema import RequestCtx
from bus._core.stages import match_field
from bus._journal.entries import JournalPublisher
from bus._middleware.kernel.chain import StageChain
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.reactions import Reactions

#: A held stage journals its first cancel at once, then one entry per this many seconds counting the rest.
HELD_WINDOW: Final = 1.0


class HeldStages:
    """The open windows of held guards of one kernel."""

    def __init__(
        self,
        journal: JournalPublisher,
        neutral: bool,
        wire_ctx: Callable[[Mapping[str, Any]], RequestCtx],
    ) -> None:
        self._journal = journal
        self._neutral = neutral
        self._wire_ctx = wire_ctx
        self._open: dict[str, list[Any]] = {}  # hold reason -> [link, calls since its last entry, timer, the cancel]

    def call(self, chain: StageChain, current: Mapping[str, Any], ctx: Mapping[str, Any]) -> Decision | None:
        """The cancel of a held guard that wants this call (no request), journaled; None if none wants it."""
        stage = chain.stage
        for link in chain.holds:
            if link.scoped and not link.in_scope(ctx):
                continue
            if link.match is None or current.get(match_field(stage)) in link.match:
                tally = self._open.get(link.hold)  # type: ignore[arg-type]  # a hold link has its reason
                if tally is not None:
                    tally[1] += 1
                    decision: Decision = tally[3]
                    return decision
                return self._first(link, ctx)
        return None

    def _first(self, link: Link, ctx: Mapping[str, Any]) -> Decision:
        assert link.hold is not None
        decision = Cancel(link.hold, link.decl.qualname)
        timer = asyncio.get_running_loop().call_later(HELD_WINDOW, self._window_ends, link.hold)
        self._open[link.hold] = [link, 0, timer, decision]
        journal = Reactions(self._journal, link.decl.stage, self._wire_ctx(ctx), self._neutral)
        journal.add(link, link.outcome, decision, 0.0, link.hold)
        journal.flush()
        return decision

    def _window_ends(self, reason: str) -> None:
        link, count, timer, _ = self._open.pop(reason)
        timer.cancel()
        if not count:
            return
        journal = Reactions(self._journal, link.decl.stage, RequestCtx(), self._neutral)
        cause = f"{reason}; {count} more call{'s' if count != 1 else ''} cancelled alike within {HELD_WINDOW:g}s"
        journal.add(link, link.outcome, Cancel(cause, link.decl.qualname), 0.0, cause, count)
        journal.flush()

    def close(self) -> None:
        """Journal the calls counted in the windows still open."""
        for reason in list(self._open):
            self._window_ends(reason)
