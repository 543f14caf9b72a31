"""How a chain's handlers reacted: each reply or fault read through the kernel's declarations, and journaled.

:class:`Reactions` collects one call's reactions as shared-journal entries
(published off the call's path); the functions read a request's outcome
(a fault, a module's reply, a broken chain) into the decision it stands for,
per each handler's declared fail mode, and note each reaction.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from bus._core.clock import timestamp_ms
from bus._core.decisions import CONTINUE, Ask, Cancel, Decision, HandlerDecision, Patch
from bus._core.middleware_schema import MiddlewareReply, ReactionMsg, RequestCtx
from bus._core.results import defers_cancel, ends_run
from bus._core.stages import phase
from bus._journal.entries import PROCESS, JournalEntry, JournalPublisher
from bus._middleware.faults import REPORTED, Outcome, fault_decision
from bus._middleware.kernel.chain import Link, StageChain
from bus._middleware.kernel.metrics import MIDDLEWARE

#: Characters of a module-reported cause the journal keeps (a module cannot flood it).
CAUSE_LIMIT: Final = 1000


def payload_hash(payload: Mapping[str, Any]) -> str:
    """SHA-256 of the payload's sorted JSON: what a shadow entry names the call by."""
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def broken_chain(chain: StageChain, journal: Reactions) -> Decision:
    """A broken chain: nothing called; cancelled if a trusted fail-closed handler is in it, else continue."""
    assert chain.broken is not None
    if chain.guard is None:
        journal.add(None, Outcome.BROKEN, CONTINUE, 0.0, chain.broken)
        return CONTINUE
    decision = Cancel(f"chain of {chain.stage} broken: {chain.broken}", chain.guard)
    journal.add(None, Outcome.BROKEN, decision, 0.0, decision.reason)
    return decision


def faulted(
    batch: Sequence[Link], outcome: Outcome, cause: str, started: float, journal: Reactions
) -> tuple[Decision, str]:
    """Every handler of a failed request reads per its own fail mode, in order; the first fail-closed one cancels."""
    elapsed = _elapsed(started)
    for link in batch:
        decision = fault_of(link, outcome, cause, elapsed, journal)
        if isinstance(decision, Cancel):
            return decision, link.decl.qualname
    return CONTINUE, batch[-1].decl.qualname


def fault_of(link: Link, outcome: Outcome, cause: str, ms: float, journal: Reactions) -> Decision:
    """One handler's fault read through the kernel's own declaration of it, journaled."""
    decl = link.decl
    decision = fault_decision(decl.fail_closed, decl.qualname, outcome, cause)
    journal.add(link, outcome, decision, ms, cause)
    return decision


def answered(
    batch: Sequence[Link], reply: MiddlewareReply, decision: HandlerDecision, started: float, journal: Reactions
) -> tuple[HandlerDecision, str]:
    """Read a module's reply through the kernel's declarations: its faults per their declared fail mode."""
    reactions = reply.reactions
    if isinstance(reactions, list) and reactions:
        return _accounted(batch, reactions, decision, started, journal)
    # No account per handler: the decision is the run's as a whole, named by the kernel.
    link = batch[0]
    for candidate in batch:
        if reply.handler == candidate.decl.qualname:
            link = candidate
    journal.add(link, Outcome.OK, decision, _elapsed(started), None)
    return decision, link.decl.qualname


def _accounted(
    batch: Sequence[Link], reactions: list[ReactionMsg], decision: HandlerDecision, started: float, journal: Reactions
) -> tuple[HandlerDecision, str]:
    """Walk the batch with the module's reactions: a fault reads per the kernel's declared fail mode.

    Where a later result beats a cancel (tool.call), a cancel does not end the walk: it stands unless the
    module's decision is a terminal patch.
    """
    count = len(reactions)
    defer = bool(batch) and defers_cancel(batch[0].decl.stage)
    pending: Cancel | None = None
    for index, link in enumerate(batch):
        decl = link.decl
        qualname = decl.qualname
        item = reactions[index] if index < count else None
        if item is None or (item.handler != qualname and item.handler != decl.name):
            fault = fault_of(
                link, Outcome.INVALID, "the module's reply does not account for it", _elapsed(started), journal
            )
            if isinstance(fault, Cancel):
                if not defer:
                    return fault, qualname
                pending = pending or Cancel(fault.reason, qualname)
            continue
        outcome, kind, ms = item.outcome, item.decision, item.duration_ms
        if ms is None:
            ms = _elapsed(started)
        if outcome == _OK:
            if kind == "continue" or kind == "patch":
                journal.ok(link, qualname, kind, ms)
                if index == count - 1 and isinstance(decision, Patch) and ends_run(decl.stage, decision.payload):
                    return decision, qualname  # the module's run ended at a terminal patch: the rest not asked
                continue
            if kind == "cancel":
                reason = decision.reason if isinstance(decision, Cancel) else item.reason
                cancel = Cancel(reason if isinstance(reason, str) else "cancelled", qualname)
                journal.add(link, Outcome.OK, cancel, ms, None)
                if not defer:
                    return cancel, qualname
                pending = pending or cancel
                continue
            if kind == "ask" and isinstance(decision, Ask):
                journal.add(link, Outcome.OK, decision, ms, None)
                return decision, qualname
        read = Outcome(outcome) if outcome in REPORTED and outcome != _OK else Outcome.INVALID
        cause = bounded(item.cause) or f"reported {bounded(repr(outcome))}, {bounded(repr(kind))}"
        fault = fault_of(link, read, cause, ms, journal)
        if isinstance(fault, Cancel):
            if not defer:
                return fault, qualname
            pending = pending or Cancel(fault.reason, qualname)
    if pending is not None and not (isinstance(decision, Patch) and ends_run(batch[-1].decl.stage, decision.payload)):
        return pending, pending.handler or batch[-1].decl.qualname
    return decision, batch[-1].decl.qualname


_OK: Final = Outcome.OK.value


def _elapsed(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def bounded(value: Any) -> str | None:
    """A module-supplied text, cut to CAUSE_LIMIT characters; None if it is not text."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= CAUSE_LIMIT else value[:CAUSE_LIMIT] + "…"


class Reactions:
    """Collects one call's reactions as shared-journal entries (kind ``middleware``), in chain order.

    The call's path keeps each reaction as a tuple and its time; the entries
    are made and encoded when the journal publisher sends them (off the call's
    path: see :meth:`bus._journal.entries.JournalPublisher.add_later`).
    """

    __slots__ = ("_ctx", "_neutral", "_phase", "_reactions", "_sink", "_stage", "seen")

    def __init__(self, sink: JournalPublisher, stage: str, wire_ctx: RequestCtx, neutral: bool) -> None:
        self._sink = sink
        self._neutral = neutral
        self._stage = stage
        self._phase = phase(stage)
        self._ctx = wire_ctx
        self._reactions: list[tuple[str, str | None, str, str | None, float | None, int]] = []
        #: The payload a handler in shadow is called on (its entries name it by hash); set before the call.
        self.seen: Mapping[str, Any] = {}

    def add(
        self,
        link: Link | None,
        outcome: Outcome,
        decision: HandlerDecision,
        duration_ms: float,
        cause: str | None,
        count: int = 1,
    ) -> None:
        reason = decision.reason if isinstance(decision, Cancel | Ask) else None
        if link is not None and link.shadow and decision.kind != "continue":
            self.shadowed(link, outcome.value, decision.kind, reason, cause, duration_ms)
            return
        self._add(
            link.decl.qualname if link else "*",
            link.identity if link else None,
            outcome.value,
            decision.kind,
            reason,
            cause,
            duration_ms,
            count,
        )

    def note(self, link: Link, verdict: str, cause: str, duration_ms: float) -> None:
        """An entry of the kernel's own (an ask held, and how it ended): journaled as it is, not counted."""
        when = time.time_ns() // 1_000_000
        self._reactions.append((link.decl.qualname, link.identity, verdict, cause, duration_ms, when))

    def decided(self, link: Link, verdict: str, applied: str, cause: str, duration_ms: float) -> None:
        """A rule's decision, evaluated by the kernel: counted as ``applied``, journaled as ``verdict`` with
        ``cause`` as given (the rule's condition and result; a shadow rule's payload hash)."""
        who = link.decl.qualname
        MIDDLEWARE.observe(who, self._stage, _OK, applied, duration_ms / 1000)
        self._reactions.append((who, link.identity, verdict, cause, duration_ms, time.time_ns() // 1_000_000))

    def ok(self, link: Link, who: str, kind: str, duration_ms: float) -> None:
        """A handler's continue or patch, as its module reported it (the common case: kept cheap)."""
        if kind == "patch" and link.shadow:
            self.shadowed(link, _OK, kind, None, None, duration_ms)
            return
        MIDDLEWARE.observe(who, self._stage, _OK, kind, duration_ms / 1000)
        if kind == "patch" or self._neutral:
            self._reactions.append((who, link.identity, kind, None, duration_ms, time.time_ns() // 1_000_000))

    def shadowed(
        self, link: Link, outcome: str, kind: str, reason: str | None, cause: str | None, duration_ms: float
    ) -> None:
        """A module's handler in shadow decided ``kind`` (or failed, reading as ``kind``): counted as a continue,
        journaled as ``would_<kind>`` (or its fault) with the hash of the payload it saw; the kernel applies none."""
        who = link.decl.qualname
        MIDDLEWARE.observe(who, self._stage, outcome, "continue", duration_ms / 1000)
        if outcome == _OK:
            verdict, why = f"would_{kind}", f"; {reason}" if reason else ""
        else:
            verdict, why = outcome, f"; {cause}; read as continue (in shadow: would {kind})"
        text = f"payload {payload_hash(self.seen)}{why}"
        self._reactions.append((who, link.identity, verdict, text, duration_ms, time.time_ns() // 1_000_000))

    def quiet(self, names: tuple[str, ...], links: Sequence[Link], each_ms: float) -> None:
        """A run of rules evaluated together, every one a continue taking ``each_ms``: counted as one run."""
        MIDDLEWARE.observe_quiet(self._stage, names, each_ms / 1000)
        if self._neutral:
            when = time.time_ns() // 1_000_000
            self._reactions.extend(
                (who, link.identity, "continue", None, each_ms, when) for who, link in zip(names, links, strict=True)
            )

    def continued(self, done: Sequence[tuple[Link, str, float]], shared: bool = False) -> None:
        """Rules' continues, each ``(link, who, duration_ms)`` in chain order: as one :meth:`ok` each.

        ``shared``: they were evaluated together, each taking the same share of the time (counted as one run)."""
        if shared:
            MIDDLEWARE.observe_quiet(self._stage, tuple(who for _, who, _ in done), done[0][2] / 1000)
        else:
            MIDDLEWARE.observe_continues(self._stage, [(who, ms / 1000) for _, who, ms in done])
        if self._neutral:
            when = time.time_ns() // 1_000_000
            self._reactions.extend((who, link.identity, "continue", None, ms, when) for link, who, ms in done)

    def _add(
        self,
        who: str,
        identity: str | None,
        outcome: str,
        kind: str,
        reason: str | None,
        cause: Any,
        ms: Any,
        count: int = 1,
    ) -> None:
        if outcome == _OK:
            verdict, why = kind, reason
        elif outcome == Outcome.UNTRUSTED:
            verdict, why = "denied", cause
        elif outcome in (Outcome.BROKEN, Outcome.CHANGED) or reason == cause:  # a hold: the cause is the reason
            verdict, why = outcome, cause
        else:  # a fault: the outcome, and what it read as
            verdict = outcome
            why = f"{cause}; read as {kind} ({'fail-closed' if kind == 'cancel' else 'fail-open'})"
        seconds = float(ms) / 1000 if isinstance(ms, int | float) else None
        MIDDLEWARE.observe(who, self._stage, outcome, kind, seconds, count)
        if (verdict == "continue" and not self._neutral) or verdict == "ask":
            return  # a neutral continue changes nothing: counted, not journaled; an ask is journaled by its hold
        duration = float(ms) if isinstance(ms, int | float) else None
        cause_text = why if isinstance(why, str) else None
        self._reactions.append((who, identity, verdict, cause_text, duration, time.time_ns() // 1_000_000))

    def _entries(self) -> list[JournalEntry]:
        """The journal entries of the reactions kept (called when they are published)."""
        ctx, stage, phase_ = self._ctx, self._stage, self._phase
        #: The caller's process when it named one (a relay names the agent it asks for), else this one's.
        process = ctx.process if isinstance(ctx.process, str) else PROCESS
        return [
            JournalEntry(
                kind="middleware",
                point=stage,
                phase=phase_,
                who=who,
                decision=verdict,
                cause=cause,
                duration_ms=ms,
                session=ctx.session,
                agent=ctx.agent,
                depth=ctx.depth,
                trace_id=ctx.id or None,
                identity=identity,
                process=process,
                time=timestamp_ms(epoch_ms),
            )
            for who, identity, verdict, cause, ms, epoch_ms in self._reactions
        ]

    def flush(self) -> None:
        if self._reactions:
            self._sink.add_later(self._entries)
