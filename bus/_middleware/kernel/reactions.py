"""How a chain's handlers reacted: each reply or fault read through the kernel's declarations, and journaled.

:class:`Reactions` collects one call's reactions as shared-journal entries
(published off the call's path); the functions read a request's outcome
(a fault, a module's reply, a broken chain) into the decision it stands for,
per each handler's declared fail mode, and note each reaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bus._core.clock import timestamp_ms
from bus._core.decisions import CONTINUE, Ask, Cancel, Decision, HandlerDecision, Patch
from bus._core.middleware_schema import MiddlewareReply, ReactionMsg, RequestCtx
from bus._core.results import defers_cancel, ends_run
from bus._core.stages import phase
from bus._journal.entries import PROCESS, JournalPublisher, entry_json
from bus._middleware.asks.records import payload_sha256
from bus._middleware.faults import REPORTED, Outcome, fault_decision
from bus._middleware.kernel.chain import StageChain
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus._runtime import genai_spans as _genai
from bus._runtime import tracing as _tracing

#: Characters of a module-reported cause the journal keeps (a module cannot flood it).
CAUSE_LIMIT: Final = 1000


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


#: One reaction as the call's path keeps it: who, identity, verdict, cause, ms, epoch ms, the link (None: the
#: kernel's own), the payload the handler was sent, the payload a patch left (or None), the fail mode applied.
_Kept = list[Any]


class Reactions:
    """Collects one call's reactions as shared-journal entries (kind ``middleware``), in chain order.

    The call's path keeps each reaction as a list and its time, with references to the payload the handler
    was sent and the one a patch left; the entries (with the payload's SHA-256 and the patch summary) are
    made and encoded when the journal publisher sends them, off the call's path (see
    :meth:`bus._journal.entries.JournalPublisher.add_encoded_later`).
    """

    __slots__ = ("_ctx", "_mark", "_neutral", "_phase", "_reactions", "_sent", "_sink", "_stage", "seen")

    def __init__(self, sink: JournalPublisher, stage: str, wire_ctx: RequestCtx, neutral: bool) -> None:
        self._sink = sink
        self._neutral = neutral
        self._stage = stage
        self._phase = phase(stage)
        self._ctx = wire_ctx
        self._reactions: list[_Kept] = []
        #: The payload a handler in shadow is called on (its entries name it by hash); set before the call.
        self.seen: Mapping[str, Any] = {}
        self._sent: Mapping[str, Any] | None = None
        self._mark = 0

    def sent(self, payload: Mapping[str, Any]) -> None:
        """The payload the next handlers are sent (a request's, a rule's): their entries name its hash."""
        self._sent = payload
        self._mark = len(self._reactions)

    def result(self, decision: HandlerDecision) -> None:
        """A request's decision: its patch is what the run's patching handlers changed."""
        if isinstance(decision, Patch):
            for kept in self._reactions[self._mark :]:
                if kept[2] == "patch":
                    kept[8] = decision.payload

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
        self._add(link, outcome.value, decision.kind, reason, cause, duration_ms, count)

    def note(self, link: Link, verdict: str, cause: str, duration_ms: float) -> None:
        """An entry of the kernel's own (an ask held, and how it ended): journaled as it is, not counted."""
        self._keep(link, verdict, cause, duration_ms)

    def decided(
        self,
        link: Link,
        verdict: str,
        applied: str,
        cause: str,
        duration_ms: float,
        after: Mapping[str, Any] | None = None,
    ) -> None:
        """A rule's decision, evaluated by the kernel: counted as ``applied``, journaled as ``verdict`` with
        ``cause`` as given (the rule's condition and result; a shadow rule's payload hash); ``after``: its patch."""
        who = link.decl.qualname
        MIDDLEWARE.observe(who, self._stage, _OK, applied, duration_ms / 1000)
        _genai.guardrail(self._stage, who, link.identity, verdict, applied, cause, duration_ms)
        self._keep(link, verdict, cause, duration_ms, after)

    def ok(self, link: Link, who: str, kind: str, duration_ms: float) -> None:
        """A handler's continue or patch, as its module reported it (the common case: kept cheap)."""
        if kind == "patch" and link.shadow:
            self.shadowed(link, _OK, kind, None, None, duration_ms)
            return
        MIDDLEWARE.observe(who, self._stage, _OK, kind, duration_ms / 1000)
        _genai.guardrail(self._stage, who, link.identity, kind, kind, None, duration_ms)
        if kind == "patch" or self._neutral:
            self._keep(link, kind, None, duration_ms)

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
        text = f"payload {payload_sha256(self.seen)}{why}"
        _genai.guardrail(self._stage, who, link.identity, verdict, "continue", text, duration_ms)
        self._keep(link, verdict, text, duration_ms)

    def quiet(self, names: tuple[str, ...], links: Sequence[Link], start: int, each_ms: float) -> None:
        """A run of rules, ``links[start:]`` as many as ``names``, evaluated together, every one a continue taking
        ``each_ms``: counted as one run (the links are read only to trace or journal each)."""
        MIDDLEWARE.observe_quiet(self._stage, names, each_ms / 1000)
        if _tracing.active():
            for who, link in zip(names, links[start : start + len(names)], strict=True):
                _genai.guardrail(self._stage, who, link.identity, "continue", "continue", None, each_ms)
        if self._neutral:
            for link in links[start : start + len(names)]:
                self._keep(link, "continue", None, each_ms)

    def continued(self, done: Sequence[tuple[Link, str, float]], shared: bool = False) -> None:
        """Rules' continues, each ``(link, who, duration_ms)`` in chain order: as one :meth:`ok` each.

        ``shared``: they were evaluated together, each taking the same share of the time (counted as one run)."""
        if shared:
            MIDDLEWARE.observe_quiet(self._stage, tuple(who for _, who, _ in done), done[0][2] / 1000)
        else:
            MIDDLEWARE.observe_continues(self._stage, [(who, ms / 1000) for _, who, ms in done])
        if _tracing.active():
            for link, who, ms in done:
                _genai.guardrail(self._stage, who, link.identity, "continue", "continue", None, ms)
        if self._neutral:
            for link, _, ms in done:
                self._keep(link, "continue", None, ms)

    def _keep(
        self,
        link: Link | None,
        verdict: str,
        cause: str | None,
        ms: float | None,
        after: Mapping[str, Any] | None = None,
        fail_mode: str | None = None,
    ) -> None:
        who, identity = (link.decl.qualname, link.identity) if link is not None else ("*", None)
        when = time.time_ns() // 1_000_000
        self._reactions.append([who, identity, verdict, cause, ms, when, link, self._sent, after, fail_mode])

    def _add(
        self,
        link: Link | None,
        outcome: str,
        kind: str,
        reason: str | None,
        cause: Any,
        ms: Any,
        count: int = 1,
    ) -> None:
        fail_mode = None
        if outcome == _OK:
            verdict, why = kind, reason
        elif outcome == Outcome.UNTRUSTED:
            verdict, why = "denied", cause
        elif outcome in (Outcome.BROKEN, Outcome.CHANGED) or reason == cause:  # a hold: the cause is the reason
            verdict, why = outcome, cause
            fail_mode = "closed" if kind == "cancel" else "open"
        else:  # a fault: the outcome, and what it read as
            verdict = outcome
            fail_mode = "closed" if kind == "cancel" else "open"
            why = f"{cause}; read as {kind} ({'fail-closed' if kind == 'cancel' else 'fail-open'})"
        duration = float(ms) if isinstance(ms, int | float) else None
        who = link.decl.qualname if link else "*"
        MIDDLEWARE.observe(who, self._stage, outcome, kind, None if duration is None else duration / 1000, count)
        reason_text = why if isinstance(why, str) else None
        _genai.guardrail(self._stage, who, link.identity if link else None, verdict, kind, reason_text, duration)
        if (verdict == "continue" and not self._neutral) or verdict == "ask":
            return  # a neutral continue changes nothing: counted, not journaled; an ask is journaled by its hold
        self._keep(link, verdict, reason_text, duration, None, fail_mode)

    def _entries(self) -> list[bytes]:
        """The journal entries of the reactions kept, encoded (called when they are published)."""
        ctx, stage, phase_ = self._ctx, self._stage, self._phase
        #: The caller's process when it named one (a relay names the agent it asks for), else this one's.
        process = ctx.process if isinstance(ctx.process, str) else PROCESS
        session, agent, depth, trace_id = ctx.session, ctx.agent, ctx.depth, ctx.id or None
        hashes: dict[int, str] = {}  # one hash per payload seen, however many handlers saw it
        entries = []
        for who, identity, verdict, cause, ms, epoch_ms, link, seen, after, fail_mode in self._reactions:
            rule = link.rule.source[:CAUSE_LIMIT] if link is not None and link.rule is not None else None
            entries.append(
                entry_json(
                    "middleware",
                    stage,
                    phase_,
                    who,
                    verdict,
                    cause,
                    ms,
                    session,
                    agent,
                    depth,
                    trace_id,
                    identity,
                    process,
                    timestamp_ms(epoch_ms),
                    module_version(link),
                    rule,
                    _hash_once(seen, hashes),
                    patch_summary(seen, after),
                    fail_mode,
                    PROCESS,
                )
            )
        return entries

    def flush(self) -> None:
        if self._reactions:
            self._sink.add_encoded_later("middleware", self._entries)


def module_version(link: Link | None) -> str | None:
    """The version of the module a handler's request went to: the last token of its request subject."""
    if link is None or not link.subject:
        return None  # a rule (its identity is its version), a held guard, the kernel's own entry
    return link.subject.rpartition(".")[2] or None


def _hash_once(payload: Mapping[str, Any] | None, hashes: dict[int, str]) -> str | None:
    if payload is None:
        return None
    found = hashes.get(id(payload))
    if found is None:
        found = hashes[id(payload)] = payload_sha256(payload)
    return found


def patch_summary(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """What a patch changed, by top-level field: ``~name`` changed, ``+name`` added, ``-name`` removed."""
    if before is None or after is None:
        return None
    try:
        marks = [f"~{k}" for k in before if k in after and after[k] != before[k]]
        marks += [f"+{k}" for k in after if k not in before]
        marks += [f"-{k}" for k in before if k not in after]
    except Exception:  # values that cannot be compared: the entry is journaled all the same
        return "(not compared)"
    text = ",".join(marks) or "(nothing)"
    return text if len(text) <= CAUSE_LIMIT else text[:CAUSE_LIMIT] + "…"
