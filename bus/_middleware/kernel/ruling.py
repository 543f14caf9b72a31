"""Running a rule in the chain: its condition evaluated in the kernel, no request; journaled as a handler's.

One :class:`RuleCall` per intercept makes the CEL activation (``payload``,
``ctx``, ``bag``: only those the chain's rules read) once per version of the
payload, so a chain of many rules pays for it once; ``ctx`` is made only when
a rule reads it. A rule whose condition holds decides its ``then``; one whose
condition cannot be evaluated (a missing key, a non-bool) is a failed handler:
continue, or cancel if it is fail-closed. A shadow rule's decision is
journaled as ``would_cancel`` / ``would_patch`` with the payload's hash and
never applied. A ``then: ask`` rule's decision is an Ask the kernel holds
for an operator, as a handler's, named by the rule's qualified name.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bus._core.decisions import CONTINUE, Ask, Cancel, HandlerDecision, Patch
from bus._core.middleware_schema import RequestCtx
from bus._core.run_context import claims_of, put_claims
from bus._core.stages import match_field
from bus._middleware.asks.records import payload_sha256
from bus._middleware.faults import Outcome, fault_decision
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.reactions import Reactions
from bus._middleware.rules.compile import NAMES, Rule, activation, holds, patched, render
from bus._middleware.rules.runs import evaluate, run_of

_EMPTY: Final[Mapping[str, Any]] = {}


def rule_ctx(stage: str, wire_ctx: RequestCtx | Mapping[str, Any]) -> dict[str, Any]:
    """What a rule's ``ctx`` holds: agent, user, session, template (empty text when the call has none), stage,
    and the agent's run (bus._core.run_context): ``parent`` ("" without one), ``depth`` in the process tree,
    ``event_depth``, ``tools`` ([] when not given), and with a budget only (``has(ctx.budget_remaining)``)
    ``budget_total``, ``budget_spent``, ``budget_remaining`` and ``budget_unit``."""
    if not isinstance(wire_ctx, RequestCtx):  # a Mapping (the ABC's isinstance is the slower test)
        agent, user = wire_ctx.get("agent"), wire_ctx.get("user")
        session, template = wire_ctx.get("session"), wire_ctx.get("template")
        wire = RequestCtx()
        put_claims(wire_ctx, wire)
        depth = wire_ctx.get("depth")
        wire.depth = depth if type(depth) is int else 0
    else:  # the call's RequestCtx: read directly, it is on every call's path
        agent, user, session, template = wire_ctx.agent, wire_ctx.user, wire_ctx.session, wire_ctx.template
        wire = wire_ctx
    run = claims_of(wire)
    remaining = run.budget_remaining()
    out: dict[str, Any] = {
        "stage": stage,
        "agent": agent if isinstance(agent, str) else "",
        "user": user if isinstance(user, str) else "",
        "session": session if isinstance(session, str) else "",
        "template": template if isinstance(template, str) else "",
        "parent": run.parent or "",
        "depth": run.depth,
        "event_depth": wire.depth,
        "tools": list(run.tools or ()),
    }
    if remaining is not None:
        out.update(budget_total=run.budget_total, budget_spent=run.budget_spent, budget_remaining=remaining)
        out["budget_unit"] = run.budget_unit or ""
    return out


class RuleCall:
    """The rules' side of one intercept."""

    __slots__ = ("_act", "_bag", "_ctx", "_payload", "_reads", "_stage", "_wire")

    def __init__(
        self,
        stage: str,
        wire_ctx: RequestCtx | Mapping[str, Any],
        bag: Mapping[str, Any] | None,
        reads: frozenset[str] = NAMES,
    ) -> None:
        self._stage, self._wire, self._bag, self._reads = stage, wire_ctx, bag, reads
        self._ctx: dict[str, Any] | None = None
        self._payload: Mapping[str, Any] | None = None
        self._act: Any = None

    @property
    def ctx(self) -> dict[str, Any]:
        """The rules' ``ctx`` (:func:`rule_ctx`), made when a rule first reads it (many never do)."""
        if self._ctx is None:
            self._ctx = rule_ctx(self._stage, self._wire)
        return self._ctx

    def verdict(self, rule: Rule, payload: Mapping[str, Any], held: bool | None = None) -> tuple[HandlerDecision, bool]:
        """What the rule decides on ``payload`` (applied or not) and whether its condition held (``held``:
        already evaluated on this payload).

        Raises RuntimeError or TypeError when the condition cannot be evaluated.
        """
        act = self._activation(payload)
        if held is None:
            held = holds(rule, act) if rule.cedar is None else rule.cedar.denies(self.ctx, payload)
        if not held:
            return CONTINUE, False
        if rule.ask:
            return Ask(render(rule, act), on_timeout=None, handler=rule.qualname), True
        if rule.reason:
            return Cancel(render(rule, act), rule.qualname), True
        if rule.patch is not None:
            return Patch(patched(rule, payload)), True
        return CONTINUE, True

    def _activation(self, payload: Mapping[str, Any]) -> Any:
        if payload is not self._payload:
            reads = self._reads
            ctx = self.ctx if "ctx" in reads else _EMPTY
            self._act, self._payload = activation(payload, ctx, self._bag, reads), payload
        return self._act

    def sweep(
        self, links: Sequence[Link], start: int, payload: Mapping[str, Any], journal: Reactions
    ) -> tuple[int, HandlerDecision]:
        """Run the rules from ``links[start]`` on ``payload`` while they continue; return the index after the last
        one run and its decision (CONTINUE when every one continued, up to the end or a module's handler).

        The conditions of the whole run of rules are evaluated at once (bus._middleware.rules.runs): when all
        are false (the common case) the run continues as a whole, counted once; a run that cannot be evaluated
        together (a condition fails on this payload) is evaluated rule by rule, so each fault reads as before.
        A rule whose condition holds goes through :meth:`decide`, journaled as each always was.
        """
        act = self._activation(payload)
        clock = time.perf_counter
        stamp = clock()
        run = run_of(links, start)
        values = evaluate(run, act) if run is not None else None
        if values is True:  # every condition false: the run continues as a whole
            assert run is not None
            journal.quiet(run.names, links, start, (clock() - stamp) * 1000 / run.size)
            return start + run.size, CONTINUE
        end = start + run.size if run is not None else len(links)
        share = (clock() - stamp) * 1000 / run.size if run is not None and values is not None else 0.0
        done: list[tuple[Link, str, float]] = []
        index = start
        decision: HandlerDecision = CONTINUE
        while index < end:
            link = links[index]
            rule = link.rule
            if rule is None:
                break
            if values is not None:
                value = values[index - start]  # type: ignore[index]
            else:
                try:  # a Cedar rule (no CEL condition) is evaluated by decide
                    value = rule.condition.eval(act).value() if rule.cedar is None else None
                except Exception:  # decide evaluates it again and reads the failure
                    value = None
            index += 1
            if value is False:
                if values is None:
                    now = clock()
                    done.append((link, rule.qualname, (now - stamp) * 1000))
                    stamp = now
                else:
                    done.append((link, rule.qualname, share))
                continue
            if done:  # journaled in chain order
                journal.continued(done, values is not None)
                done = []
            decision = self.decide(link, payload, journal, stamp, value if value is True else None)
            if decision is not CONTINUE:
                break
            stamp = clock()
        if done:
            journal.continued(done, values is not None)
        return index, decision

    def decide(
        self,
        link: Link,
        payload: Mapping[str, Any],
        journal: Reactions,
        started: float | None = None,
        held: bool | None = None,
    ) -> HandlerDecision:
        """The rule's decision as the chain takes it, journaled (which rule, its identity, the result).

        ``started``: when its evaluation began; ``held``: its condition, when :meth:`sweep` evaluated it already.
        """
        rule = link.rule
        assert rule is not None
        if started is None:
            started = time.perf_counter()
        try:
            decision, held = self.verdict(rule, payload, held)
        except Exception as exc:  # whatever a payload makes of a rule reads as its fail mode, never raises
            ms = (time.perf_counter() - started) * 1000
            cause = f"if {rule.source!r} could not be evaluated: {str(exc)[:300]}"
            if link.shadow:
                journal.decided(link, "would_fail", "continue", cause, ms)
                return CONTINUE
            failed = fault_decision(link.decl.fail_closed, rule.qualname, Outcome.FAILED, cause)
            journal.add(link, Outcome.FAILED, failed, ms, cause)
            return failed
        ms = (time.perf_counter() - started) * 1000
        if decision is CONTINUE:
            journal.ok(link, rule.qualname, "continue", ms)
            return CONTINUE
        reason = f"; {decision.reason}" if isinstance(decision, (Cancel, Ask)) else ""
        result = f"if {rule.source!r} -> {str(held).lower()}{reason}"
        if link.shadow:
            journal.decided(
                link, f"would_{decision.kind}", "continue", f"payload {payload_sha256(payload)}; {result}", ms
            )
            return CONTINUE
        if isinstance(decision, Ask):  # the hold journals the ask and its answer
            return decision
        after = decision.payload if isinstance(decision, Patch) else None
        journal.decided(link, decision.kind, decision.kind, result, ms, after)
        return decision


def offline(
    rules: Sequence[Rule], stage: str, payload: dict[str, Any], ctx: Mapping[str, Any]
) -> tuple[str, str | None, dict[str, Any], list[str]]:
    """A rule file's chain on one call with no bus (``hookbus rules test``, ``hookbus replay --rules``).

    The rules of ``stage`` run by priority then name, as the kernel orders them; returns the decision
    (continue, cancel, patch), the cancel's reason, the final payload, and one line per rule.
    """
    chosen = [(rule, decl) for rule in rules for decl in rule.decls if decl.stage == stage]
    chosen.sort(key=lambda pair: (-pair[1].priority, pair[0].qualname))
    call = RuleCall(stage, ctx, None)
    field, final, why, steps = match_field(stage), "continue", None, []
    for rule, decl in chosen:
        if not rule.enabled or (decl.match and payload.get(field) not in decl.match) or not decl.when.matches(ctx):
            steps.append(f"{rule.qualname}: not taken (disabled, match or when)")
            continue
        try:
            decision, held = call.verdict(rule, payload)
        except (RuntimeError, TypeError) as exc:
            closed = decl.fail_closed and not rule.shadow
            steps.append(f"{rule.qualname}: failed ({exc}); reads as {'cancel' if closed else 'continue'}")
            if closed:
                return "cancel", f"{rule.qualname} is fail-closed and failed", payload, steps
            continue
        shadow = " (shadow: not applied)" if rule.shadow and decision.kind != "continue" else ""
        detail = f": {decision.reason}" if isinstance(decision, (Cancel, Ask)) else ""
        steps.append(f"{rule.qualname}: if -> {str(held).lower()}: {decision.kind}{detail}{shadow}")
        if rule.shadow:
            continue
        if isinstance(decision, Patch):
            payload, final = dict(decision.payload), "patch"
        elif isinstance(decision, Cancel):
            return "cancel", decision.reason, payload, steps
        elif isinstance(decision, Ask):  # held for an operator: the offline run stops at the ask
            return "ask", decision.reason, payload, steps
    return final, why, payload, steps
