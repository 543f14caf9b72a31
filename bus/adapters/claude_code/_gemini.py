"""Gemini CLI sessions on the bus: its command hooks take the mapping of Claude Code's, in Gemini's own events.

Gemini CLI runs a command hook with the hook input on stdin and reads one JSON
object from stdout (docs/integrations.md has the table):

===================  ================================  ==========================================
hook event           intercept (stage)                 what a decision writes back
===================  ================================  ==========================================
BeforeTool           tool.call {name, input}           deny + reason; ``hookSpecificOutput.tool_input``
AfterTool            tool.result {name, output ...}    deny + reason (the reason replaces the output)
BeforeAgent          user.message {agent, content}     deny + reason (the prompt is discarded)
BeforeModel          llm.request {model, messages ..}  ``hookSpecificOutput.llm_request`` (override) or
                                                       ``llm_response`` (a synthetic answer); deny
AfterModel           assistant.message {content ...}   ``hookSpecificOutput.llm_response``; deny
===================  ================================  ==========================================

``BeforeToolSelection``, ``SessionStart``, ``SessionEnd``, ``AfterAgent``,
``PreCompress`` and ``Notification`` become events. Gemini *merges* a
``tool_input`` into the model's arguments, so a guard's change that removes an
argument cannot be written as one: it is refused, naming the change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from bus.adapters.claude_code._mapping import (
    ClaudeCodeDialect,
    HookAnswer,
    Step,
    call_step,
    prompt_step,
    result_step,
    tool_call,
)

if TYPE_CHECKING:
    from bus._core.decisions import Decision
    from bus.adapters._schema import AgentHookInput

#: The agent name intercepts and events of a Gemini CLI session carry.
GEMINI: Final = "gemini-cli"
#: Events without a stage, and the event each becomes.
_EVENTS: Final = {
    "SessionStart": "prx.lifecycle.agent_start",
    "SessionEnd": "prx.lifecycle.agent_end",
    "AfterAgent": "prx.lifecycle.turn_complete",
    "PreCompress": "eva.custom.pre_compact",
    "BeforeToolSelection": "eva.custom.gemini.before_tool_selection",
    "Notification": "eva.custom.gemini.notification",
}
#: The hook events ``hookbus gemini-hook install`` configures.
INSTALLED_EVENTS: Final = ("BeforeTool", "AfterTool", "BeforeAgent", "BeforeModel", "AfterModel", *_EVENTS)
#: Events Gemini matches by tool name.
TOOL_EVENTS: Final = frozenset({"BeforeTool", "AfterTool"})
#: Gemini's message roles and the chat roles handlers see.
_ROLES: Final = {"model": "assistant", "user": "user", "system": "system"}
_BACK: Final = {value: key for key, value in _ROLES.items()}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def request_payload(llm_request: Any) -> dict[str, Any]:
    """An ``llm.request`` payload from Gemini's stable ``LLMRequest`` (non-text parts are not in it)."""
    request, config = _dict(llm_request), _dict(_dict(llm_request).get("config"))
    messages = [
        {"role": _ROLES.get(str(m.get("role")), str(m.get("role"))), "content": _text(m.get("content", ""))}
        for m in request.get("messages") or []
        if isinstance(m, dict)
    ]
    return {
        "model": str(request.get("model") or ""),
        "messages": messages,
        "tools": None,
        "max_tokens": config.get("maxOutputTokens"),
        "temperature": config.get("temperature"),
    }


def response_text(llm_response: Any) -> str:
    """The text of Gemini's stable ``LLMResponse`` (its first candidate's parts)."""
    candidates = _dict(llm_response).get("candidates") or []
    first = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
    parts = _dict(first.get("content")).get("parts") or []
    return "".join(part if isinstance(part, str) else _text(_dict(part).get("text", "")) for part in parts)


def synthetic_response(text: str) -> dict[str, Any]:
    """An ``LLMResponse`` answering ``text``."""
    return {"candidates": [{"content": {"role": "model", "parts": [text]}, "finishReason": "STOP"}]}


class GeminiDialect(ClaudeCodeDialect):
    """Gemini CLI's hook events and output (see the module docstring)."""

    name: str = "gemini"
    agent: str = GEMINI

    def plan(self, hook: AgentHookInput) -> Step:
        event, agent = hook.hook_event_name, self.agent
        where = {"cwd": hook.cwd} if hook.cwd is not None else {}
        if event in TOOL_EVENTS:
            call = tool_call(hook, where)
            if event == "BeforeTool":
                return call_step(call, hook, agent, where)
            response = _dict(hook.tool_response)
            content = response.get("llmContent", hook.tool_response)
            output, failed = _text(content if content is not None else ""), bool(response.get("error"))
            return result_step(call, hook, output, failed, agent, where)
        if event == "BeforeAgent":
            return prompt_step(hook, agent, where)
        if event == "BeforeModel":
            return Step(event, "llm.request", request_payload(hook.llm_request))
        if event == "AfterModel":
            content = response_text(hook.llm_response)
            turn = hook.session_id or ""
            return Step(event, "assistant.message", {"agent": agent, "turn": turn, "content": content, "round": 0})
        subject = _EVENTS.get(event)
        if subject is None:
            return Step(event)
        payload: dict[str, Any] = {"agent": agent, "session": hook.session_id, **where}
        details = {"source": hook.source, "reason": hook.reason, "trigger": hook.trigger}
        if event == "BeforeToolSelection":
            details["model"] = request_payload(hook.llm_request)["model"]
        payload.update((key, value) for key, value in details.items() if value)
        if event == "SessionEnd":
            payload["success"] = True
        return Step(event, events=((subject, payload),), always=True)

    def deny(self, event: str, reason: str) -> HookAnswer:
        return HookAnswer(output={"decision": "deny", "reason": reason.strip() or "hookbus: refused"})

    def updated_input(self, tool_input: dict[str, Any]) -> HookAnswer:
        return HookAnswer(output={"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": tool_input}})

    def context(self, event: str, text: str) -> HookAnswer:
        return HookAnswer(output={"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})

    def answer(self, step: Step, decision: Decision) -> HookAnswer:
        from bus._core.decisions import Cancel, Continue, Patch

        if step.stage is not None and not isinstance(decision, Cancel | Continue | Patch):
            kind = type(decision).__name__.lower()
            return self.deny(step.event, f"hookbus: a guard asked for '{kind}', which this hook cannot ask; refused")
        if isinstance(decision, Patch) and step.stage in ("llm.request", "assistant.message"):
            return self._model(step, decision.payload)
        if isinstance(decision, Patch) and step.stage == "tool.call":
            new_input = decision.payload.get("input")
            if isinstance(new_input, dict) and not set(step.payload["input"]) <= set(new_input):
                changed = orjson.dumps(new_input).decode()
                return self.deny(step.event, f"hookbus: a guard removed arguments of this call ({changed}); refused")
        if isinstance(decision, Patch) and step.stage == "tool.result":
            output = decision.payload.get("output")
            if isinstance(output, str) and output != step.payload["output"]:
                return HookAnswer(output={"decision": "deny", "reason": output})  # the reason replaces the output
            return HookAnswer()
        return super().answer(step, decision)

    def _response(self, event: str, text: str) -> HookAnswer:
        """The model's answer replaced by ``text`` (BeforeModel: the call is skipped)."""
        specific = {"hookEventName": event, "llm_response": synthetic_response(text)}
        return HookAnswer(output={"hookSpecificOutput": specific})

    def _model(self, step: Step, payload: dict[str, Any]) -> HookAnswer:
        event = step.event
        if step.stage == "assistant.message":
            if isinstance(payload.get("rework"), str):
                return self.deny(event, f"hookbus: a guard asked for another answer: {payload['rework']}")
            answer = payload.get("answer", payload.get("content"))
            if not isinstance(answer, str) or answer == step.payload["content"]:
                return HookAnswer()
            return self._response(event, answer)
        result = payload.get("result")
        if result is not None:
            text = result if isinstance(result, str) else _text(_dict(result).get("content") or "")
            return self._response(event, text)
        override: dict[str, Any] = {}
        before = step.payload
        if payload.get("model") not in (None, before["model"]):
            override["model"] = payload["model"]
        if payload.get("messages") not in (None, before["messages"]):
            override["messages"] = [
                {"role": _BACK.get(str(m.get("role")), str(m.get("role"))), "content": _text(m.get("content", ""))}
                for m in payload["messages"]
                if isinstance(m, dict)
            ]
        config = {}
        if payload.get("temperature", before["temperature"]) != before["temperature"]:
            config["temperature"] = payload["temperature"]
        if payload.get("max_tokens", before["max_tokens"]) != before["max_tokens"]:
            config["maxOutputTokens"] = payload["max_tokens"]
        if config:
            override["config"] = config
        if not override:
            return HookAnswer()
        return HookAnswer(output={"hookSpecificOutput": {"hookEventName": event, "llm_request": override}})
