"""Claude Code sessions on the bus: a hook input becomes an intercept and events, the decision its hook output.

One mapping (docs/integrations.md) serves every path: ``hookbus claude-hook``
(through the relay of ``hookbus up``, or its own connection), the HTTP
endpoint ``POST /hooks/claude-code`` and ``hookbus codex-hook`` (whose
:class:`~bus.adapters.claude_code._codex.CodexDialect` writes decisions in Codex's form).

==================  ==============================  ==================================
hook event          intercept (stage, payload)      events (emitted unless cancelled)
==================  ==============================  ==================================
PreToolUse          tool.call {name, input, id}     prx.lifecycle.tool_call_start
PermissionRequest   tool.call {name, input, id}     (none)
PostToolUse         tool.result {name, output ...}  prx.lifecycle.tool_call (always)
PostToolUseFailure  tool.result {..., is_error}     prx.lifecycle.tool_call (always)
UserPromptSubmit    user.message {agent, content}   (none)
SessionStart        (none)                          prx.lifecycle.agent_start
SessionEnd          (none)                          prx.lifecycle.agent_end
Stop                (none)                          prx.lifecycle.turn_complete
PreCompact          (none)                          eva.custom.pre_compact
any other event     (none)                          eva.custom.claude.<event_name>
==================  ==============================  ==================================

The decision is written back in the event's own output form: a refusal as
``permissionDecision: "deny"`` (PreToolUse), ``decision.behavior: "deny"``
(PermissionRequest) or ``decision: "block"``; a changed input as
``updatedInput``; a changed result as ``updatedToolOutput``; what a guard only
added (a prompt's appended text, a result's remark, a call's ``context``) as
``additionalContext``, the prompt or call going through with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from bus._core.json_types import json_object, json_type
from bus._core.schema import convert
from bus.adapters._errors import AgentHookError
from bus.adapters._schema import AgentHookInput

if TYPE_CHECKING:
    from bus._client import Bus
    from bus._core.decisions import Decision

#: The agent name intercepts and events of a Claude Code session carry.
CLAUDE_CODE: Final = "claude-code"
#: The stages a hook input may be intercepted on (their fail-closed guards are remembered by the hook command).
HOOK_STAGES: Final = ("tool.call", "tool.result", "user.message")
#: The context's ``process`` of an intercept the relay runs for an agent: this prefix and the agent's NATS user.
RELAYED_FOR: Final = "relay:"
#: Where each event without a stage goes.
_LIFECYCLE: Final = {
    "SessionStart": "prx.lifecycle.agent_start",
    "SessionEnd": "prx.lifecycle.agent_end",
    "Stop": "prx.lifecycle.turn_complete",
    "PreCompact": "eva.custom.pre_compact",
}
#: The hook events the hook command is installed for (install's configuration).
INSTALLED_EVENTS: Final = ("PreToolUse", "PostToolUse", "UserPromptSubmit", *_LIFECYCLE)
#: Events whose hooks Claude Code matches by tool name.
TOOL_EVENTS: Final = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"})
#: The family of the events of Claude Code hooks without a stage or a lifecycle event of their own.
CUSTOM_PREFIX: Final = "eva.custom.claude."
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_TOKEN = re.compile(r"[^a-z0-9_]+")


def custom_subject(event: str) -> str | None:
    """``eva.custom.claude.<event_name>`` for ``event`` (``PostCompact`` -> ``post_compact``); None: no name left."""
    name = _NOT_TOKEN.sub("_", _WORD.sub("_", event).lower()).strip("_")
    return f"{CUSTOM_PREFIX}{name}" if name else None


@dataclass(frozen=True)
class HookAnswer:
    """What the hook command does: exit with ``exit_code``, print ``output`` as JSON (if any) and ``stderr``."""

    exit_code: int = 0
    output: dict[str, Any] | None = None
    stderr: str = ""


@dataclass(frozen=True)
class Step:
    """What one hook input asks of the bus: an intercept (``stage`` None: none) and events."""

    event: str
    stage: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    #: (subject, payload) emitted when the call goes ahead; ``always``: emitted whatever the decision.
    events: tuple[tuple[str, dict[str, Any]], ...] = ()
    always: bool = False


def parse(data: bytes | Any) -> AgentHookInput:
    """A hook input (JSON bytes or a parsed object), checked field by field; AgentHookError names what is wrong."""
    if isinstance(data, bytes | bytearray | str):
        data = json_object(bytes(data) if isinstance(data, bytearray) else data, "the hook input", AgentHookError)
    if not isinstance(data, dict):
        raise AgentHookError(f"the hook input must be a JSON object, not {json_type(data)}")
    return convert(data, AgentHookInput, "the hook input", AgentHookError)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _failed(response: Any) -> bool:
    """Whether a tool response says the tool failed (``success: false``, ``is_error``, an ``error``)."""
    if not isinstance(response, dict):
        return False
    return response.get("success") is False or response.get("is_error") is True or bool(response.get("error"))


def tool_call(hook: AgentHookInput, where: dict[str, Any]) -> dict[str, Any]:
    """The call a tool event intercepts (``{name, input, id}`` and ``where``); AgentHookError without a tool name."""
    if hook.tool_name is None:
        raise AgentHookError(f"the hook input: {hook.hook_event_name} needs 'tool_name'")
    return {"name": hook.tool_name, "input": hook.tool_input or {}, "id": hook.tool_use_id, **where}


def call_step(call: dict[str, Any], hook: AgentHookInput, agent: str, where: dict[str, Any]) -> Step:
    """A call about to run: its ``tool.call`` intercept, then ``prx.lifecycle.tool_call_start``."""
    start = {"tool": call["name"], "arguments": call["input"], "agent": agent, **where}
    return Step(hook.hook_event_name, "tool.call", call, (("prx.lifecycle.tool_call_start", start),))


def result_step(
    call: dict[str, Any], hook: AgentHookInput, output: str, failed: bool, agent: str, where: dict[str, Any]
) -> Step:
    """A call that ran: its ``tool.result`` intercept, then ``prx.lifecycle.tool_call`` (always emitted)."""
    done = {"tool": call["name"], "success": not failed, "output": output, "agent": agent, **where}
    result = {**call, "output": output, "is_error": failed}
    return Step(hook.hook_event_name, "tool.result", result, (("prx.lifecycle.tool_call", done),), always=True)


def prompt_step(hook: AgentHookInput, agent: str, where: dict[str, Any]) -> Step:
    """A prompt the user submits: its ``user.message`` intercept; AgentHookError without the prompt."""
    if hook.prompt is None:
        raise AgentHookError(f"the hook input: {hook.hook_event_name} needs 'prompt'")
    return Step(hook.hook_event_name, "user.message", {"agent": agent, "content": hook.prompt, **where})


def plan(hook: AgentHookInput, agent: str) -> Step:
    """The intercept and events of ``hook`` (see the table above); an event hookbus does not map is a no-op."""
    event, where = hook.hook_event_name, {"cwd": hook.cwd} if hook.cwd is not None else {}
    if event in TOOL_EVENTS:
        call = tool_call(hook, where)
        if event == "PreToolUse":
            return call_step(call, hook, agent, where)
        if event == "PermissionRequest":
            return Step(event, "tool.call", call)
        if event == "PostToolUseFailure":
            output, failed = _text(hook.error if hook.error is not None else hook.tool_response), True
        else:
            output, failed = _text(hook.tool_response), _failed(hook.tool_response)
        return result_step(call, hook, output, failed, agent, where)
    if event == "UserPromptSubmit":
        return prompt_step(hook, agent, where)
    subject = _LIFECYCLE.get(event) or custom_subject(event)
    if subject is None:
        return Step(event)
    details = {"source": hook.source, "reason": hook.reason, "trigger": hook.trigger, "model": hook.model}
    if subject.startswith(CUSTOM_PREFIX):
        details |= {"event": event, "error": hook.error, "tool": hook.tool_name}
    payload: dict[str, Any] = {"agent": agent, "session": hook.session_id, **where}
    payload.update((key, value) for key, value in details.items() if value)
    if event == "SessionEnd":
        payload["success"] = True
    return Step(event, events=((subject, payload),), always=True)


class ClaudeCodeDialect:
    """How decisions are written back in Claude Code's hook output (its JSON output form, exit code 0)."""

    name: str = CLAUDE_CODE
    agent: str = CLAUDE_CODE

    def plan(self, hook: AgentHookInput) -> Step:
        """What ``hook`` asks of the bus in this agent's events (the table above; a dialect adds its own)."""
        return plan(hook, self.agent)

    def asks_at_terminal(self, event: str) -> bool:
        """Whether the agent has its own ``ask`` for ``event`` (Claude Code: PreToolUse)."""
        return event == "PreToolUse" and type(self) is ClaudeCodeDialect

    def ask(self, event: str, reason: str) -> HookAnswer:
        """Let the person at the agent decide (Claude Code's own permission prompt), showing ``reason``."""
        specific = {"hookEventName": event, "permissionDecision": "ask", "permissionDecisionReason": reason}
        return HookAnswer(output={"hookSpecificOutput": specific})

    def deny(self, event: str, reason: str) -> HookAnswer:
        """Refuse the call or prompt of ``event`` with ``reason`` (shown to the model, or to the user for a prompt)."""
        if event == "PreToolUse":
            specific = {"hookEventName": event, "permissionDecision": "deny", "permissionDecisionReason": reason}
            return HookAnswer(output={"hookSpecificOutput": specific})
        if event == "PermissionRequest":
            denied: dict[str, Any] = {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}
            return HookAnswer(output={"hookSpecificOutput": denied})
        return HookAnswer(output={"decision": "block", "reason": reason})

    def updated_input(self, tool_input: dict[str, Any]) -> HookAnswer:
        """Run the tool with ``tool_input`` instead (the permission flow is left as it is)."""
        return HookAnswer(output={"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": tool_input}})

    def allowed_with(self, tool_input: dict[str, Any]) -> HookAnswer:
        """A PermissionRequest allowed, the tool run with ``tool_input``."""
        specific = {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow", "updatedInput": tool_input}}
        return HookAnswer(output={"hookSpecificOutput": specific})

    def context(self, event: str, text: str) -> HookAnswer:
        """Add ``text`` to what the model sees after ``event``."""
        return HookAnswer(output={"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})

    def answer(self, step: Step, decision: Decision) -> HookAnswer:
        """The hook output for ``decision`` on ``step``'s stage."""
        from bus._core.decisions import Cancel, Continue, Patch  # not on the hook command's fast path

        if isinstance(decision, Continue) or step.stage is None:
            return HookAnswer()
        who = f" ({decision.handler})" if isinstance(decision, Cancel) and decision.handler else ""
        if isinstance(decision, Cancel):
            return self.deny(step.event, f"hookbus{who}: {decision.reason}")
        assert isinstance(decision, Patch)
        return self._patched(step, decision.payload)

    def _with_context(self, answer: HookAnswer, event: str, text: str | None) -> HookAnswer:
        if not text:
            return answer
        if answer.output is None:
            return self.context(event, text)
        specific = answer.output.get("hookSpecificOutput")
        if not isinstance(specific, dict) or event == "PermissionRequest":
            return answer  # a PermissionRequest's answer has no context
        return HookAnswer(answer.exit_code, {**answer.output, "hookSpecificOutput": {**specific,
                          "additionalContext": text}}, answer.stderr)  # fmt: skip

    def _patched(self, step: Step, payload: dict[str, Any]) -> HookAnswer:
        if step.stage == "tool.call":
            result = payload.get("result")
            if isinstance(result, str):  # the guard answered in the tool's place
                return self.deny(step.event, f"hookbus answered without running the tool: {result}")
            new_input = payload.get("input")
            if not isinstance(new_input, dict):
                return self.deny(step.event, "hookbus: a guard's patch has no object 'input'; the call is refused")
            context = payload.get("context") if isinstance(payload.get("context"), str) else None
            changed = HookAnswer()
            if new_input != step.payload["input"]:
                permission = step.event == "PermissionRequest"
                changed = self.allowed_with(new_input) if permission else self.updated_input(new_input)
            return self._with_context(changed, step.event, context)
        if step.stage == "tool.result":
            output = payload.get("output")
            remark = payload.get("remark") if isinstance(payload.get("remark"), str) else None
            answer = HookAnswer()
            if isinstance(output, str) and output != step.payload["output"]:
                specific: dict[str, Any] = {"hookEventName": step.event, "updatedToolOutput": output}
                if str(step.payload.get("name", "")).startswith("mcp__"):
                    specific["updatedMCPToolOutput"] = output
                answer = HookAnswer(output={"hookSpecificOutput": specific})
            return self._with_context(answer, step.event, remark)
        content = payload.get("content")
        before = step.payload.get("content")
        if content == before:
            return HookAnswer()
        if isinstance(content, str) and isinstance(before, str) and content.startswith(before):
            # Only added to: context Claude Code adds to the prompt, which goes through.
            return self.context(step.event, content[len(before) :].strip("\n"))
        # A prompt cannot be rewritten in place: refuse it and show the amended text to send instead.
        return self.deny(step.event, f"hookbus: a guard changed this prompt; send it as: {_text(content)}")


def fail_closed_guards(bus: Bus, stages: tuple[str, ...] = HOOK_STAGES) -> dict[str, list[str]]:
    """Per stage (the hook stages by default), the trusted fail-closed handlers in force on ``bus``'s view.

    Held ones count too: a guard waiting for approval still refuses its stage.
    """
    view = bus.middleware.view
    found: dict[str, list[str]] = {}
    for stage in stages:
        chain = view.chains.get(stage) if view is not None else None
        if chain is None:
            continue
        names = {link.decl.qualname for link in chain.links if link.decl.fail_closed}
        names |= {link.decl.qualname for link in chain.holds}
        names |= {chain.guard} if chain.guard else set()
        if names:
            found[stage] = sorted(names)
    return found


async def answer(
    bus: Bus,
    hook: AgentHookInput,
    dialect: ClaudeCodeDialect | None = None,
    *,
    asker: str | None = None,
    asks: str = "fleet",
) -> HookAnswer:
    """Run ``hook``'s intercept on ``bus``, emit its events, and return the hook output for the decision.

    ``asker``: the NATS user a relay answers for; the intercept's context carries it as ``process``
    (handlers and the journal see which agent asked, not only the relay's own user). ``asks``: a handler's
    Ask is held for an operator (``fleet``), or, ``terminal``, answered as the agent's own ``ask`` where the
    dialect has one (Claude Code's PreToolUse), so the person at that agent decides.
    """
    from bus._core.decisions import Cancel, Continue

    dialect = dialect or ClaudeCodeDialect()
    step = dialect.plan(hook)
    decision: Decision = Continue()
    if step.stage is not None:
        ctx = {"session": hook.session_id, "agent": dialect.agent}
        if asker is not None:
            ctx["process"] = f"{RELAYED_FOR}{asker}"
        if asks == "terminal" and dialect.asks_at_terminal(step.event):
            from bus._middleware.kernel.asking import Asked

            result = await bus.middleware.intercept_unheld(step.stage, step.payload, ctx, keep=False)
            if isinstance(result, Asked):
                return dialect.ask(step.event, f"hookbus: {result.reason}")
            decision = result
        else:
            decision = await bus.intercept(step.stage, step.payload, ctx)
    if step.always or not isinstance(decision, Cancel):
        for subject, payload in step.events:
            await bus.emit(subject, payload, session_id=hook.session_id)
    return dialect.answer(step, decision)
