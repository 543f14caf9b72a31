"""The reference turn runner: what ``hookbus agent`` runs for each turn request.

A turn: ``agent_start``; then rounds of [``llm.request`` middleware, ``llm_request``,
the model call, ``llm_response``; for each tool call the model asks for:
``tool_call_start``, ``tool.call`` middleware, the tool, ``tool_call``] until the
model answers in text; then ``turn_complete``, ``agent_end`` and
``eva.turn.completed`` with the answer. A failure emits ``error``, ``agent_end``
(success false) and ``eva.turn.failed``. Everything runs at the request's
depth, so what a triggered turn emits carries the recursion counter on.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from bus.client import Bus
from bus.core.decisions import Cancel, Patch
from bus.core.errors import LLMError, TurnFailed
from bus.core.stages import Stage
from bus.turns.server import TurnRequest
from triggers.agent.llm import ChatClient, ChatToolCall, Completion
from triggers.agent.tools import TOOLS, Tool

log = logging.getLogger("hookbus.agent")

MAX_ROUNDS: Final = 6
#: Tool output longer than this is cut before it is put in an event (the model gets it whole).
_EVENT_OUTPUT_CHARS: Final = 4000


class TurnRunner:
    """Runs turns for one agent against one chat-completions endpoint."""

    def __init__(
        self,
        bus: Bus,
        agent: str,
        client: ChatClient,
        *,
        tools: dict[str, Tool] | None = None,
        system: str | None = None,
    ) -> None:
        self.bus = bus
        self.agent = agent
        self.client = client
        self.tools = TOOLS if tools is None else tools
        self.system = system

    def _ctx(self, request: TurnRequest) -> dict[str, Any]:
        return {"session": request.session_id, "agent": self.agent}

    async def _emit(self, name: str, payload: dict[str, Any], request: TurnRequest) -> None:
        await self.bus.emit(f"prx.lifecycle.{name}", payload, session_id=request.session_id)

    async def handle(self, request: TurnRequest) -> str:
        """Run one turn; returns the answer, raises TurnFailed."""
        await self._emit("agent_start", {"agent": self.agent, "session": request.session_id or request.id}, request)
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.prompt}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        try:
            answer = await self._rounds(request, messages)
        except (TurnFailed, LLMError) as exc:
            component = "llm" if isinstance(exc, LLMError) else "agent"
            await self._emit("error", {"component": component, "message": str(exc)}, request)
            await self._emit("agent_end", {"success": False, "messages_count": len(messages)}, request)
            await self.bus.emit(
                "eva.turn.failed",
                {"agent": self.agent, "trigger": request.trigger, "turn": request.id, "error": str(exc)},
                session_id=request.session_id,
            )
            raise TurnFailed(str(exc)) from exc
        await self._emit("turn_complete", {}, request)
        await self._emit("agent_end", {"success": True, "messages_count": len(messages)}, request)
        await self.bus.emit(
            "eva.turn.completed",
            {"agent": self.agent, "trigger": request.trigger, "turn": request.id, "answer": answer},
            session_id=request.session_id,
        )
        return answer

    async def _rounds(self, request: TurnRequest, messages: list[dict[str, Any]]) -> str:
        for _ in range(MAX_ROUNDS):
            completion = await self._ask(request, messages)
            if not completion.tool_calls:
                answer = completion.content or ""
                messages.append({"role": "assistant", "content": answer})
                return answer
            messages.append(completion.raw["choices"][0]["message"])
            for call in completion.tool_calls:
                output = await self._tool(request, call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise TurnFailed(f"no answer after {MAX_ROUNDS} rounds of tool calls")

    async def _ask(self, request: TurnRequest, messages: list[dict[str, Any]]) -> Completion:
        call: dict[str, Any] = {"model": self.client.model, "messages": messages, "temperature": None}
        decision = await self.bus.intercept(Stage.LLM_REQUEST, call, ctx=self._ctx(request))
        if isinstance(decision, Cancel):
            raise TurnFailed(f"llm.request cancelled: {decision.reason}")
        if isinstance(decision, Patch):
            call = {**call, **decision.payload}
        model = str(call.get("model") or self.client.model)
        messages[:] = call.get("messages") or messages
        provider = self.client.provider
        await self._emit(
            "llm_request", {"provider": provider, "model": model, "messages_count": len(messages)}, request
        )

        async def on_retry(attempt: int, exc: BaseException, wait: float) -> None:
            message = f"{exc}; retry {attempt} of {self.client.attempts - 1} in {wait:.1f}s"
            await self._emit("error", {"component": "llm", "message": message}, request)

        tools = [tool.schema() for tool in self.tools.values()] or None
        try:
            completion = await self.client.complete(
                messages, tools=tools, model=model, temperature=call.get("temperature"), on_retry=on_retry
            )
        except LLMError:
            await self._emit(
                "llm_response", {"provider": provider, "model": model, "duration_ms": 0, "success": False}, request
            )
            raise
        await self._emit(
            "llm_response",
            {"provider": provider, "model": model, "duration_ms": round(completion.duration_ms, 1), "success": True},
            request,
        )
        return completion

    async def _tool(self, request: TurnRequest, call: ChatToolCall) -> str:
        arguments = call.arguments
        await self._emit("tool_call_start", {"tool": call.name, "arguments": arguments}, request)
        decision = await self.bus.intercept(
            Stage.TOOL_CALL, {"name": call.name, "input": arguments}, ctx=self._ctx(request)
        )
        if isinstance(decision, Cancel):
            output, success = f"cancelled by middleware: {decision.reason}", False
        else:
            if isinstance(decision, Patch) and isinstance(decision.payload.get("input"), dict):
                arguments = decision.payload["input"]
            output, success = self._run_tool(call.name, arguments)
        await self._emit(
            "tool_call", {"tool": call.name, "success": success, "output": output[:_EVENT_OUTPUT_CHARS]}, request
        )
        return output

    def _run_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        tool = self.tools.get(name)
        if tool is None:
            return f"no such tool: {name}", False
        try:
            return tool.run(arguments), True
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}", False
