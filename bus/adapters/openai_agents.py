"""The OpenAI Agents SDK on the bus: run and agent hooks, guardrails, guarded tools.

``HookbusRunHooks`` (for ``Runner.run(..., hooks=)``) and ``HookbusAgentHooks``
(for ``Agent(hooks=)``) emit the PRX lifecycle events of agents, model calls
and tools. ``input_guardrail(bus)`` and ``output_guardrail(bus)`` ask the
``user.message`` and ``assistant.message`` middleware: a cancel trips the
guardrail with the reason. ``guard_function_tool(tool, bus)`` puts a
``FunctionTool`` behind ``tool.call``/``tool.result`` as for LangChain.

A guardrail can only pass or trip: a patch of ``user.message`` or
``assistant.message`` is not applied here, it is reported in the guardrail's
``output_info`` (``{"patched": payload}``). Needs ``openai-agents``
(``pip install 'hookbus[openai-agents]'``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any, Final

import orjson
from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    GuardrailFunctionOutput,
    InputGuardrail,
    OutputGuardrail,
    RunContextWrapper,
    RunHooks,
)
from agents.items import ModelResponse

from bus.adapters.calls import AnyBus, aemit, aintercept
from bus.adapters.lifecycle import Emitted, Lifecycle
from bus.adapters.tool_guard import ToolGuard, output_text
from bus.core.decisions import Cancel, Decision, Patch
from bus.core.json_types import json_type
from bus.core.subjects import EVA_DOMAIN

__all__ = [
    "HookbusAgentHooks",
    "HookbusRunHooks",
    "guard_function_tool",
    "input_guardrail",
    "output_guardrail",
]

USER_MESSAGE: Final = "user.message"
ASSISTANT_MESSAGE: Final = "assistant.message"
#: The provider named in llm_request/llm_response events: the SDK does not say which it talks to.
PROVIDER: Final = "openai-agents"


def _ctx(session_id: str | None, agent: str | None) -> dict[str, str]:
    return {key: value for key, value in (("session", session_id), ("agent", agent)) if value is not None}


def _model_name(agent: Any) -> str:
    model = getattr(agent, "model", None)
    return model if isinstance(model, str) else str(getattr(model, "model", None) or "default")


def _arguments(context: Any) -> dict[str, Any]:
    """The tool call's arguments as the model sent them (the SDK passes a ToolContext), else empty."""
    raw = getattr(context, "tool_arguments", None)
    try:
        parsed = orjson.loads(raw) if isinstance(raw, str | bytes) else None
    except orjson.JSONDecodeError:
        return {"raw": raw}
    return parsed if isinstance(parsed, dict) else {}


class _Emitter:
    """What both hook kinds emit, keyed by (run context, agent) for model-call timing."""

    def __init__(self, bus: AnyBus, session_id: str | None) -> None:
        self.bus = bus
        self.session_id = session_id
        self.lifecycle = Lifecycle()
        self._counts: dict[Hashable, int] = {}

    async def emit(self, event: Emitted) -> None:
        await aemit(self.bus, event[0], event[1], self.session_id)

    async def agent_start(self, agent: Any) -> None:
        await self.emit(Lifecycle.agent_start(str(agent.name), self.session_id or ""))

    async def agent_end(self, context: Any, agent: Any) -> None:
        count = self._counts.pop((id(context), agent.name), 0)
        await self.emit(Lifecycle.agent_end(str(agent.name), True, count))

    async def llm_start(self, context: Any, agent: Any, system_prompt: str | None, items: list[Any]) -> None:
        count = len(items) + (1 if system_prompt else 0)
        self._counts[(id(context), agent.name)] = count
        await self.emit(self.lifecycle.llm_request((id(context), agent.name), PROVIDER, _model_name(agent), count))

    async def llm_end(self, context: Any, agent: Any) -> None:
        await self.emit(self.lifecycle.llm_response((id(context), agent.name), True))

    async def tool_start(self, context: Any, tool: Any) -> None:
        await self.emit(self.lifecycle.tool_start(str(tool.name), _arguments(context)))

    async def tool_end(self, tool: Any, result: object) -> None:
        await self.emit(self.lifecycle.tool_end(str(tool.name), True, output_text(result)))

    async def handoff(self, source: Any, target: Any) -> None:
        await self.emit((f"{EVA_DOMAIN}.custom.handoff", {"from": str(source.name), "to": str(target.name)}))


class _ModelAndToolHooks:
    """The hooks run-wide and per-agent hooks share (same signatures in both SDK classes), and the emitter."""

    def __init__(self, bus: AnyBus, *, session_id: str | None = None) -> None:
        self._out = _Emitter(bus, session_id)

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: str | None, input_items: Any
    ) -> None:
        await self._out.llm_start(context, agent, system_prompt, list(input_items))

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        await self._out.llm_end(context, agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self._out.tool_start(context, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        await self._out.tool_end(tool, result)


class HookbusRunHooks(_ModelAndToolHooks, RunHooks[Any]):
    """Run-wide hooks: every agent, model call, tool and handoff of a ``Runner.run`` as events."""

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        await self._out.agent_start(agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._out.agent_end(context, agent)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        await self._out.handoff(from_agent, to_agent)


class HookbusAgentHooks(_ModelAndToolHooks, AgentHooks[Any]):
    """One agent's hooks (``Agent(hooks=...)``): the same events, for that agent only."""

    async def on_start(self, context: Any, agent: Any) -> None:
        await self._out.agent_start(agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._out.agent_end(context, agent)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        await self._out.handoff(source, agent)


def _text_of(value: Any) -> str:
    """The text of an SDK input (a string, or input items with message contents) or a final output."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(item.get("content", "")) for item in value if isinstance(item, Mapping))
    if isinstance(value, Mapping):
        return str(value.get("text", "")) if value.get("type") in ("input_text", "output_text") else ""
    return output_text(value)


def _verdict(decision: Decision) -> GuardrailFunctionOutput:
    if isinstance(decision, Cancel):
        return GuardrailFunctionOutput({"reason": decision.reason, "handler": decision.handler}, True)
    if isinstance(decision, Patch):
        return GuardrailFunctionOutput({"patched": decision.payload}, False)
    return GuardrailFunctionOutput(None, False)


def input_guardrail(
    bus: AnyBus, *, session_id: str | None = None, name: str = "hookbus user.message"
) -> InputGuardrail[Any]:
    """A guardrail asking ``user.message`` middleware about the run's input; a cancel trips it.

    It runs before the model is called (not in parallel), so a refused message never reaches the model.
    """

    async def check(context: RunContextWrapper[Any], agent: Agent[Any], given: Any) -> GuardrailFunctionOutput:
        payload = {"agent": agent.name, "content": _text_of(given)}
        return _verdict(await aintercept(bus, USER_MESSAGE, payload, _ctx(session_id, agent.name)))

    return InputGuardrail(guardrail_function=check, name=name, run_in_parallel=False)


def output_guardrail(
    bus: AnyBus, *, session_id: str | None = None, name: str = "hookbus assistant.message"
) -> OutputGuardrail[Any]:
    """A guardrail asking ``assistant.message`` middleware about the agent's final output; a cancel trips it."""

    async def check(context: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> GuardrailFunctionOutput:
        payload = {"agent": agent.name, "content": _text_of(output)}
        return _verdict(await aintercept(bus, ASSISTANT_MESSAGE, payload, _ctx(session_id, agent.name)))

    return OutputGuardrail(guardrail_function=check, name=name)


def guard_function_tool(
    tool: FunctionTool, bus: AnyBus, *, session_id: str | None = None, agent: str | None = None
) -> FunctionTool:
    """``tool`` behind ``tool.call``/``tool.result`` middleware, same name and schema for the model.

    A cancel answers the model with the reason; a patch changes the arguments
    the tool gets. Arguments that are not a JSON object are refused before
    any handler or the tool sees them (the model is told so).
    """
    guard = ToolGuard(bus, tool.name, _ctx(session_id, agent))
    inner = tool.on_invoke_tool

    async def invoke(context: Any, input_json: str) -> Any:
        try:
            arguments = orjson.loads(input_json or "{}")
        except orjson.JSONDecodeError as exc:
            return f"invalid tool arguments for {tool.name}: not JSON ({exc})"
        if not isinstance(arguments, dict):
            return f"invalid tool arguments for {tool.name}: an object is needed, not {json_type(arguments)}"

        async def call(given: dict[str, Any]) -> Any:
            return await inner(context, orjson.dumps(given).decode())

        return await guard.arun(arguments, call)

    return dataclasses.replace(tool, on_invoke_tool=invoke)
