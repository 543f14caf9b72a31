"""Back-testing a module on recorded calls: what would it have decided, and how does that differ from what happened.

A stage's calls are rebuilt from the recorded events that announce them
(``tool.call`` from ``prx.lifecycle.tool_call_start``, ...); what happened is
read from the journal: the middleware entries of the same session that
follow the event (an intercept belongs to the latest call announced before
it), one intercept (``trace_id``) per call, a cancel anywhere in
it making the call a cancel, else a patch a patch; a call nothing journaled
was a neutral continue. The module runs locally (``Module.answer``), never on
the bus.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from bus._core.envelope import Event
from bus._core.errors import ConfigError
from bus._core.middleware_schema import MiddlewareRequest, RequestCtx
from bus._core.stages import match_field
from bus._journal.entries import JournalEntry
from bus._middleware.kernel.ruling import offline
from bus._middleware.rules.compile import Rule
from bus._module import Module

#: Per stage: the recorded event that announces a call, and the stage payload rebuilt from its payload.
STAGE_EVENTS: Final[dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]]] = {
    "tool.call": (
        "prx.lifecycle.tool_call_start",
        lambda p: {"name": p.get("tool"), "input": p.get("arguments", p.get("input", {}))},
    ),
    "tool.result": (
        "prx.lifecycle.tool_call",
        lambda p: {"name": p.get("tool"), "output": p.get("output"), "success": p.get("success")},
    ),
    "llm.request": ("prx.lifecycle.llm_request", dict),
}
#: A journal entry this long after its call's event is not that call's.
MAX_LAG_S: Final = 60.0
DECISIONS: Final = ("continue", "cancel", "patch")


@dataclass
class Call:
    """One recorded call of the stage: the event it was rebuilt from, what happened, what the module says."""

    event: Event
    payload: dict[str, Any]
    recorded: str = "continue"
    recorded_why: str | None = None
    replayed: str = "continue"
    replayed_why: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "time": self.event.timestamp,
            "session": self.event.session_id,
            "event_id": self.event.id,
            "payload": self.payload,
            "recorded": self.recorded,
            "recorded_why": self.recorded_why,
            "replayed": self.replayed,
            "replayed_why": self.replayed_why,
        }


@dataclass
class Report:
    """Counts by decision, recorded and replayed, and the calls whose decisions differ."""

    stage: str
    calls: list[Call] = field(default_factory=list)

    @property
    def differing(self) -> list[Call]:
        return [call for call in self.calls if call.recorded != call.replayed]

    def counts(self, which: str) -> dict[str, int]:
        found = Counter(getattr(call, which) for call in self.calls)
        return {decision: found.get(decision, 0) for decision in DECISIONS}

    def as_json(self, first: int) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "calls": len(self.calls),
            "recorded": self.counts("recorded"),
            "replayed": self.counts("replayed"),
            "differing": len(self.differing),
            "first_differing": [call.as_json() for call in self.differing[:first]],
        }


def stage_source(stage: str) -> tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """The recorded event subject and payload mapping of ``stage``; ConfigError for a stage with none."""
    found = STAGE_EVENTS.get(stage)
    if found is None:
        raise ConfigError(
            f"--stage {stage!r}: no recorded event announces its calls (known: {', '.join(STAGE_EVENTS)})"
        )
    return found


def calls_of(stage: str, events: Iterable[Event], entries: Iterable[JournalEntry]) -> list[Call]:
    """The stage's calls rebuilt from ``events``, each with what the journal says happened."""
    subject, rebuild = stage_source(stage)
    calls = [Call(event, rebuild(event.payload)) for event in events if event.subject == subject]
    calls.sort(key=lambda call: call.event.timestamp)
    intercepts: dict[str, list[JournalEntry]] = defaultdict(list)
    for entry in entries:
        if entry.kind == "middleware" and entry.point == stage and entry.session and entry.trace_id:
            intercepts[entry.trace_id].append(entry)
    by_session: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if call.event.session_id:
            by_session[call.event.session_id].append(call)
    claimed: set[int] = set()
    for group in sorted(intercepts.values(), key=lambda group: min(e.time for e in group)):
        first = min(e.time for e in group)
        # The intercept belongs to the latest call announced before it in its session, not yet taken.
        before = [c for c in by_session.get(group[0].session or "", []) if c.event.timestamp <= first]
        for call in reversed(before):
            if id(call) in claimed:
                continue
            if _seconds_between(call.event.timestamp, first) <= MAX_LAG_S:
                claimed.add(id(call))
                call.recorded, call.recorded_why = _outcome(group)
            break
    return calls


def _seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def _outcome(group: list[JournalEntry]) -> tuple[str, str | None]:
    """What one journaled intercept came to: a cancel anywhere cancels, else a patch patches."""
    for entry in group:
        if entry.decision == "cancel" or (entry.cause and "read as cancel" in entry.cause):
            return "cancel", f"{entry.who}: {entry.cause}" if entry.cause else entry.who
    for entry in group:
        if entry.decision == "patch":
            return "patch", entry.who
    return "continue", None


def replay_rules(rules: Sequence[Rule], stage: str, calls: list[Call]) -> Report:
    """Run rule files' rules of ``stage`` on each call, as the kernel would (no bus; shadow rules not applied)."""
    if not any(decl.stage == stage for rule in rules for decl in rule.decls):
        raise ConfigError(f"no rule of stage {stage!r} in the rule files")
    for call in calls:
        ctx = {"session": call.event.session_id, "agent": call.event.source}
        decision, why, _, _ = offline(rules, stage, call.payload, ctx)
        call.replayed = decision
        call.replayed_why = why if decision == "cancel" else "patched payload" if decision == "patch" else None
    return Report(stage, calls)


async def replay(module: Module, stage: str, calls: list[Call]) -> Report:
    """Run ``module``'s handlers of ``stage`` on each call, locally (no bus: a handler's ctx.bus is None)."""
    declarations = [decl for decl in module.declarations if decl.stage == stage]
    if not declarations:
        raise ConfigError(f"module {module.name} has no handler of stage {stage!r}")
    field_name = match_field(stage)
    for call in calls:
        names = [d.name for d in declarations if not d.match or call.payload.get(field_name) in d.match]
        if not names:
            continue
        ctx = RequestCtx(session=call.event.session_id, depth=call.event.depth, id=call.event.id)
        reply = await module.answer(MiddlewareRequest(stage=stage, payload=call.payload, ctx=ctx, handlers=names))
        decision = reply.decision if isinstance(reply.decision, str) else "continue"
        call.replayed = decision
        if decision == "cancel" and isinstance(reply.reason, str):
            call.replayed_why = reply.reason
        elif decision == "patch" and isinstance(reply.payload, dict):
            call.replayed_why = "patched payload"
    return Report(stage, calls)
