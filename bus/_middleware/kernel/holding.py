"""A call held for an operator: the ask journaled at once, the answer (or the deadline) read back as a decision.

``intercept_unheld`` sets :data:`ASKED` for the run it starts, so the hold tells it the ask's id and deadline
at once instead of waiting; without it the call waits for the answer.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

from bus._core.decisions import Ask, Cancel, Decision
from bus._core.middleware_schema import RequestCtx
from bus._journal.entries import JournalPublisher
from bus._middleware.kernel.asking import Asked, AskHolder, Held
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.reactions import Reactions

#: Set by ``intercept_unheld`` for the run it starts: told the ask's id and deadline once a handler asks.
#: And whether the ask is kept for an operator (False: the caller's own person answers it, nothing is held).
ASKED: contextvars.ContextVar[tuple[asyncio.Future[Asked], bool] | None] = contextvars.ContextVar(
    "hookbus_asked", default=None
)


async def hold_for_operator(
    asks: AskHolder, sink: JournalPublisher, ask: Ask, link: Link, payload: dict[str, Any], wire_ctx: RequestCtx
) -> Decision:
    """Hold the call for an operator; journal the ask at once and its end when it comes."""
    decl = link.decl
    started = time.perf_counter()
    waiting = ASKED.get()
    if waiting is not None and not waiting[1]:  # the caller's own person answers: nothing is held
        note = Reactions(sink, decl.stage, wire_ctx, True)
        note.sent(payload)  # the entry names the payload held
        note.note(link, "asked", f"{ask.reason} (passed to the agent's own user)", 0.0)
        note.flush()
        if not waiting[0].done():
            waiting[0].set_result(Asked("", time.time() + float(ask.timeout), ask.reason))
        return Cancel(f"{decl.qualname} asks: {ask.reason}")

    def asked(record: Any) -> None:
        left = record.deadline - time.time()
        cause = f"{record.reason} (ask {record.id}; {left:.0f}s left, then {record.on_timeout})"
        entry = Reactions(sink, decl.stage, wire_ctx, True)
        entry.sent(payload)  # the entry names the payload held
        entry.note(link, "asked", cause, 0.0)
        entry.flush()
        if waiting is not None and not waiting[0].done():
            waiting[0].set_result(Asked(record.id, record.deadline, record.reason))

    held: Held = await asks.hold(
        ask, decl.qualname, link.identity, decl.fail_closed, decl.stage, payload, wire_ctx, asked
    )
    entry = Reactions(sink, decl.stage, wire_ctx, True)
    entry.sent(payload)  # the entry names the payload held
    entry.note(link, held.verdict, held.cause, (time.perf_counter() - started) * 1000)
    entry.flush()
    return held.decision
