"""The OpenAI Agents SDK on the bus: run and agent hooks, guardrails, guarded tools.

``HookbusRunHooks`` (for ``Runner.run(..., hooks=)``) and ``HookbusAgentHooks``
(for ``Agent(hooks=)``) emit the PRX lifecycle events of agents, model calls
and tools. ``input_guardrail(bus)`` and ``output_guardrail(bus)`` ask the
``user.message`` and ``assistant.message`` middleware: a cancel trips the
guardrail with the reason. ``guard_function_tool(tool, bus)`` puts a
``FunctionTool`` behind ``tool.call``/``tool.result`` as for LangChain.

``tool_input_guardrail(bus)`` / ``tool_output_guardrail(bus)`` are the SDK's
own tool guardrails (``FunctionTool(tool_input_guardrails=[...])``, and every
tool of an MCP server: ``guard_mcp_server(server, bus)`` or the server's
``tool_input_guardrails=``): ``tool.call`` and ``tool.result`` decide
``allow``, ``reject_content`` (the model reads the reason, or a guard's
``result``, instead of the tool's answer) or, with ``on_cancel="raise"``,
``raise_exception``. A guardrail cannot change arguments: a patched ``input``
is a rejection naming the arguments to call the tool with.
``guard_mcp_calls(server, bus, name=)`` wraps the server object's own
``call_tool`` instead: a patch changes the arguments the server gets, and the
tools are named ``mcp__NAME__TOOL`` as through ``hookbus mcp``.

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
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.items import ModelResponse

from bus._core.decisions import Cancel, Decision, Patch
from bus._core.json_types import json_type
from bus._core.subjects import EVA_DOMAIN
from bus.adapters._calls import AnyBus, aemit, aintercept
from bus.adapters._lifecycle import Emitted, Lifecycle
from bus.adapters._tool_guard import TOOL_CALL, TOOL_RESULT, ToolGuard, after, before, output_text

__all__ = [
    "HookbusAgentHooks",
    "HookbusRunHooks",
    "guard_function_tool",
    "guard_mcp_calls",
    "guard_mcp_server",
    "input_guardrail",
    "output_guardrail",
    "tool_input_guardrail",
    "tool_output_guardrail",
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

    on_start = HookbusRunHooks.on_agent_start
    on_end = HookbusRunHooks.on_agent_end

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

        call_id = getattr(context, "tool_call_id", None)
        return await guard.arun(arguments, call, call_id if isinstance(call_id, str) else None)

    return dataclasses.replace(tool, on_invoke_tool=invoke)


def _guardrail_arguments(context: Any) -> dict[str, Any]:
    raw = getattr(context, "tool_arguments", None) or "{}"
    try:
        arguments = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"arguments": raw}
    return arguments if isinstance(arguments, dict) else {"arguments": arguments}


def _blocks_text(output: Any) -> str:
    """A tool output as text; an MCP tool's text content blocks are their text (what the model reads)."""
    if isinstance(output, str) and output.startswith("["):
        try:  # the SDK hands an MCP tool's content blocks over as their JSON
            output_blocks = orjson.loads(output)
        except orjson.JSONDecodeError:
            return output
        return _blocks_text(output_blocks) if isinstance(output_blocks, list) else output
    items = output if isinstance(output, list) else [output] if isinstance(output, dict) else []
    blocks = [b if isinstance(b, dict) else getattr(b, "__dict__", {}) for b in items]
    if blocks and all(block.get("type") == "text" for block in blocks):
        return "\n".join(str(block.get("text", "")) for block in blocks)
    return output_text(output)


def _check_on_cancel(on_cancel: str) -> None:
    if on_cancel not in ("reject", "raise"):
        raise ValueError(f"on_cancel must be 'reject' or 'raise', not {on_cancel!r}")


def _rejected(text: str, cancelled: bool, on_cancel: str) -> ToolGuardrailFunctionOutput:
    if cancelled and on_cancel == "raise":
        return ToolGuardrailFunctionOutput.raise_exception(output_info={"reason": text})
    return ToolGuardrailFunctionOutput.reject_content(text, output_info={"reason": text})


def tool_input_guardrail(
    bus: AnyBus, *, session_id: str | None = None, agent: str | None = None, on_cancel: str = "reject"
) -> ToolInputGuardrail[Any]:
    """A tool input guardrail asking ``tool.call`` (``on_cancel``: ``"reject"`` the content, or ``"raise"``)."""
    _check_on_cancel(on_cancel)

    async def check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        arguments = _guardrail_arguments(context)
        payload = {"name": context.tool_name, "input": arguments, "id": context.tool_call_id}
        ctx = _ctx(session_id, agent or data.agent.name)
        verdict = before(await aintercept(bus, TOOL_CALL, payload, ctx), arguments)
        if verdict.answer is not None:
            return _rejected(verdict.answer, verdict.cancelled, on_cancel)
        if verdict.input != arguments:
            changed = orjson.dumps(verdict.input).decode()
            return _rejected(f"refused by middleware: call {context.tool_name} with {changed}", True, "reject")
        return ToolGuardrailFunctionOutput.allow()

    return ToolInputGuardrail(guardrail_function=check, name="hookbus_tool_call")


def tool_output_guardrail(
    bus: AnyBus, *, session_id: str | None = None, agent: str | None = None, on_cancel: str = "reject"
) -> ToolOutputGuardrail[Any]:
    """A tool output guardrail asking ``tool.result``: a cancel hides the output, a patch replaces it."""
    _check_on_cancel(on_cancel)

    async def check(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        text = _blocks_text(data.output)
        payload = {"name": context.tool_name, "output": text, "is_error": False, "id": context.tool_call_id}
        decision = await aintercept(bus, TOOL_RESULT, payload, _ctx(session_id, agent or data.agent.name))
        if isinstance(decision, Cancel | Patch):
            return _rejected(str(after(decision, text)), isinstance(decision, Cancel), on_cancel)
        return ToolGuardrailFunctionOutput.allow()

    return ToolOutputGuardrail(guardrail_function=check, name="hookbus_tool_result")


def guard_mcp_server(server: Any, bus: AnyBus, *, session_id: str | None = None, agent: str | None = None) -> Any:
    """Every tool of an MCP server (``Agent(mcp_servers=[...])``) behind the tool guardrails above; returns it."""
    server.tool_input_guardrails = [
        *(getattr(server, "tool_input_guardrails", None) or []),
        tool_input_guardrail(bus, session_id=session_id, agent=agent),
    ]
    server.tool_output_guardrails = [
        *(getattr(server, "tool_output_guardrails", None) or []),
        tool_output_guardrail(bus, session_id=session_id, agent=agent),
    ]
    return server


def guard_mcp_calls(
    server: Any, bus: AnyBus, *, name: str | None = None, session_id: str | None = None, agent: str | None = None
) -> Any:
    """Every tool call of an MCP server object on ``tool.call``/``tool.result`` as ``mcp__NAME__TOOL``; returns it.

    A cancel answers the model with an error result carrying the reason; a
    patch changes the arguments the server is called with (or the output the
    model reads). ``name`` defaults to the server object's name.
    """
    from bus.adapters._mcp._agents_sdk import guard_calls

    return guard_calls(server, bus, name=name, session_id=session_id, agent=agent)
