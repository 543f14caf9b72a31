"""OpenTelemetry GenAI semantic conventions for hookbus: ``apply_guardrail``, ``execute_tool``, ``invoke_agent``.

The GenAI conventions (``gen_ai.operation.name`` and the ``execute_tool`` and
``invoke_agent`` operations, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.agent.name``) are the published ones. Guardrails are not settled in
them yet: the names below follow the security proposal's ``apply_guardrail``
span (``gen_ai.security.*``) and add a ``gen_ai.guardrail.result`` event, the
choice docs/tracing.md records. Like :mod:`bus._runtime.tracing`, nothing here
imports OpenTelemetry: each call is one dictionary lookup where the process
does not trace.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Final

from bus._runtime import tracing as _tracing

OPERATION: Final = "gen_ai.operation.name"
APPLY_GUARDRAIL: Final = "apply_guardrail"
EXECUTE_TOOL: Final = "execute_tool"
INVOKE_AGENT: Final = "invoke_agent"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
AGENT_NAME: Final = "gen_ai.agent.name"
AGENT_ID: Final = "gen_ai.agent.id"
GUARDIAN_NAME: Final = "gen_ai.guardian.name"
POLICY_ID: Final = "gen_ai.security.policy.id"
POLICY_VERSION: Final = "gen_ai.security.policy.version"
TARGET_TYPE: Final = "gen_ai.security.target.type"
DECISION_TYPE: Final = "gen_ai.security.decision.type"
DECISION_REASON: Final = "gen_ai.security.decision.reason"
#: The event on each ``apply_guardrail`` span, and its attributes.
GUARDRAIL_RESULT: Final = "gen_ai.guardrail.result"
RESULT_TYPE: Final = "gen_ai.guardrail.result.type"
RESULT_VALUE: Final = "gen_ai.guardrail.result.value"
RESULT_REASON: Final = "gen_ai.guardrail.result.reason"

#: hookbus's verdicts as the proposal's decision types: ``allow``, ``deny``, ``modify``, ``warn``; a fault
#: reads as what its fail mode made of it (the result value keeps the verdict: ``timeout``, ``absent`` ...).
_DECISION_TYPES: Final = {"continue": "allow", "cancel": "deny", "patch": "modify", "ask": "warn"}
#: Stages as the proposal's target types; any other stage is its own name.
_TARGETS: Final = {
    "tool.call": "tool_call",
    "tool.result": "tool_result",
    "llm.request": "llm_input",
    "llm.response": "llm_output",
    "user.message": "message",
    "assistant.message": "llm_output",
    "memory.save": "memory_store",
    "memory.recall": "memory_retrieve",
}
#: Longest reason a span keeps (a span is not the journal).
_REASON_CAP: Final = 512


def decision_type(applied: str) -> str:
    """The decision type of what the chain applied (``continue``, ``cancel``, ``patch``, ``ask``)."""
    return _DECISION_TYPES.get(applied, "allow")


def guardrail(
    stage: str, handler: str, identity: str | None, verdict: str, applied: str, reason: str | None, ms: float | None
) -> None:
    """One handler's ``apply_guardrail`` span, ended now and begun ``ms`` before, under the current span.

    ``verdict`` is what the journal calls it (``cancel``, ``timeout``, ``would_cancel`` ...), ``applied`` what
    the chain took it as (``continue``, ``cancel``, ``patch``, ``ask``).
    """
    trace = _tracing._trace()
    if trace is None:
        return
    end = time.time_ns()
    start = end - int((ms or 0.0) * 1_000_000)
    kind = decision_type(applied)
    attributes: dict[str, str] = {
        OPERATION: APPLY_GUARDRAIL,
        GUARDIAN_NAME: handler,
        POLICY_ID: handler,
        TARGET_TYPE: _TARGETS.get(stage, stage),
        DECISION_TYPE: kind,
        _tracing.ATTR_STAGE: stage,
    }
    if identity:
        attributes[POLICY_VERSION] = identity
    event: dict[str, str] = {POLICY_ID: handler, RESULT_TYPE: kind, RESULT_VALUE: verdict}
    if identity:
        event[POLICY_VERSION] = identity
    if reason:
        attributes[DECISION_REASON] = event[RESULT_REASON] = reason[:_REASON_CAP]
    span = trace.get_tracer("hookbus").start_span(
        f"{APPLY_GUARDRAIL} {handler}", kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=start
    )
    span.add_event(GUARDRAIL_RESULT, attributes=event, timestamp=end)
    span.end(end_time=end)


def tool(name: str, call_id: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """An ``execute_tool`` span for a guarded tool's call (its ``tool.call`` and ``tool.result`` inside)."""
    if not _tracing.active():
        return _tracing.NO_SPAN
    attributes = {OPERATION: EXECUTE_TOOL, TOOL_NAME: name}
    if call_id:
        attributes[TOOL_CALL_ID] = call_id
    return _tracing.span(f"{EXECUTE_TOOL} {name}", attributes=attributes)


def start_tool(name: str, call_id: str | None = None) -> Any:
    """An ``execute_tool`` span begun now, not current and not ended: for a call answered in another task
    (``hookbus mcp``'s proxy). None where the process does not trace; :func:`within` makes it the current
    span of a block, :func:`end` ends it."""
    trace = _tracing._trace()
    if trace is None:
        return None
    attributes = {OPERATION: EXECUTE_TOOL, TOOL_NAME: name}
    if call_id:
        attributes[TOOL_CALL_ID] = call_id
    return trace.get_tracer("hookbus").start_span(
        f"{EXECUTE_TOOL} {name}", kind=trace.SpanKind.INTERNAL, attributes=attributes
    )


def within(span: Any) -> contextlib.AbstractContextManager[Any]:
    """A block in which ``span`` (from :func:`start_tool`, or None) is the current span; it is not ended after."""
    trace = _tracing._trace()
    if span is None or trace is None:
        return _tracing.NO_SPAN
    used: contextlib.AbstractContextManager[Any] = trace.use_span(span, end_on_exit=False)
    return used


def end(span: Any) -> None:
    """End a span from :func:`start_tool` (nothing for None, nor for one ended already)."""
    if span is not None and span.is_recording():
        span.end()


def agent_attributes(agent: str) -> dict[str, str]:
    """The ``invoke_agent`` attributes of a turn (its span is named ``invoke_agent <agent>``)."""
    return {OPERATION: INVOKE_AGENT, AGENT_NAME: agent, AGENT_ID: agent}
