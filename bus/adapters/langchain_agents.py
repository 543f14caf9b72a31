"""LangChain v1 agents on the bus: an ``AgentMiddleware`` that asks hookbus at the agent's own hook points.

``create_agent(model, tools, middleware=[HookbusMiddleware(bus)])``:

=====================  ==============================  ============================================
agent hook             stage                           what a decision does
=====================  ==============================  ============================================
``wrap_tool_call``     tool.call, then tool.result     cancel: the reason is the tool's (error)
                                                       answer; patch: the input, or a ``result``
                                                       answered without running the tool; a hidden
                                                       or rewritten output drops the artifact
``wrap_model_call``    llm.request                     cancel: the turn fails
                                                       (``TurnFailed``); patch:
                                                       ``messages``, ``temperature``,
                                                       ``max_tokens``, or a ``result`` answered
                                                       without calling the model
``after_model``        assistant.message (final        cancel: the answer is emptied; patch
                       answers only)                   ``answer``: replaced; ``rework``: the answer
                                                       is dropped and the feedback sent back
=====================  ==============================  ============================================

Injected tool arguments (``InjectedToolCallId``, ``InjectedState``,
``InjectedStore``) are never in the payload handlers see and never taken from
a patch. The async hooks take a Bus or a SyncBus, the sync ones a SyncBus.
Needs ``langchain`` v1 (``pip install 'hookbus[langchain]'``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest, hook_config
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.messages.utils import convert_to_messages

from bus._core.decisions import Cancel, Decision, Patch
from bus._core.errors import DecisionError
from bus._runtime import genai_spans as _genai
from bus._turns.errors import TurnFailed
from bus.adapters._calls import AnyBus, aintercept, need_sync
from bus.adapters._tool_guard import TOOL_CALL, TOOL_RESULT, after, before, output_text

__all__ = ["HookbusMiddleware"]

#: Reworks per turn, as the reference runner allows (docs/stages.md); past them the last answer stands.
MAX_REWORK_ROUNDS = 2
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _hidden(request: ToolCallRequest) -> frozenset[str]:
    tool = request.tool
    keys: frozenset[str] = getattr(tool, "_injected_args_keys", frozenset()) if tool is not None else frozenset()
    return frozenset(keys)


def _messages(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [{"role": _ROLES.get(m.type, m.type), "content": output_text(m.content)} for m in messages]


class HookbusMiddleware(AgentMiddleware):
    """Middleware decisions for a LangChain v1 agent (see the module docstring)."""

    def __init__(self, bus: AnyBus, *, session_id: str | None = None, agent: str | None = None) -> None:
        super().__init__()
        self.bus = bus
        self.agent = agent or "langchain"
        self.ctx = {"agent": self.agent, **({"session": session_id} if session_id else {})}

    # -- tools -------------------------------------------------------------------------------------------
    def _tool_payload(self, request: ToolCallRequest) -> tuple[dict[str, Any], dict[str, Any]]:
        args, hidden = dict(request.tool_call["args"]), _hidden(request)
        injected = {key: args.pop(key) for key in list(args) if key in hidden}
        return args, injected

    def _refused(self, request: ToolCallRequest, text: str, cancelled: bool) -> ToolMessage:
        call = request.tool_call
        status = "error" if cancelled else "success"
        return ToolMessage(text, tool_call_id=call["id"], name=call["name"], status=status)

    def _judged(self, result: Any, decision: Decision) -> Any:
        if not isinstance(result, ToolMessage) or not isinstance(decision, Cancel | Patch):
            return result
        return result.model_copy(update={"content": after(decision, result.content), "artifact": None})

    def _result(self, request: ToolCallRequest, result: Any) -> dict[str, Any] | None:
        if not isinstance(result, ToolMessage):
            return None  # a Command (state update): the tool's own, not an output to judge
        call = request.tool_call
        is_error = result.status == "error"
        return {"name": call["name"], "output": output_text(result.content), "is_error": is_error, "id": call["id"]}

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        """The tool call behind ``tool.call`` and ``tool.result``, in an ``execute_tool`` span where it traces."""
        with _genai.tool(request.tool_call["name"], request.tool_call.get("id")):
            return await self._awrap_tool_call(request, handler)

    async def _awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        args, injected = self._tool_payload(request)
        call = request.tool_call
        payload = {"name": call["name"], "input": args, "id": call["id"]}
        verdict = before(await aintercept(self.bus, TOOL_CALL, payload, self.ctx), args)
        if verdict.answer is not None:
            return self._refused(request, verdict.answer, verdict.cancelled)
        result = await handler(request.override(tool_call={**call, "args": {**verdict.input, **injected}}))
        judged = self._result(request, result)
        if judged is None:
            return result
        return self._judged(result, await aintercept(self.bus, TOOL_RESULT, judged, self.ctx))

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        """:meth:`awrap_tool_call` for a sync agent."""
        with _genai.tool(request.tool_call["name"], request.tool_call.get("id")):
            return self._wrap_tool_call(request, handler)

    def _wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        sync = need_sync(self.bus, "HookbusMiddleware.wrap_tool_call")
        args, injected = self._tool_payload(request)
        call = request.tool_call
        payload = {"name": call["name"], "input": args, "id": call["id"]}
        verdict = before(sync.intercept(TOOL_CALL, payload, self.ctx), args)
        if verdict.answer is not None:
            return self._refused(request, verdict.answer, verdict.cancelled)
        result = handler(request.override(tool_call={**call, "args": {**verdict.input, **injected}}))
        judged = self._result(request, result)
        if judged is None:
            return result
        return self._judged(result, sync.intercept(TOOL_RESULT, judged, self.ctx))

    # -- model calls -------------------------------------------------------------------------------------
    def _model_payload(self, request: ModelRequest) -> dict[str, Any]:
        settings = request.model_settings or {}
        model = getattr(request.model, "model", None) or getattr(request.model, "model_name", None)
        tools = [
            getattr(tool, "name", None) or (tool.get("name") if isinstance(tool, dict) else None)
            for tool in request.tools
        ]
        return {
            "model": str(model or type(request.model).__name__),
            "messages": _messages(list(request.messages)),
            "tools": [{"name": name} for name in tools if name] or None,
            "max_tokens": settings.get("max_tokens"),
            "temperature": settings.get("temperature"),
        }

    def _model_decision(
        self,
        request: ModelRequest,
        payload: dict[str, Any],
        decision: Decision,
    ) -> ModelRequest | AIMessage:
        if isinstance(decision, Cancel):
            raise TurnFailed(f"llm.request cancelled: {decision.reason}")
        if not isinstance(decision, Patch):
            return request
        patched = decision.payload
        result = patched.get("result")
        if isinstance(result, str):
            return AIMessage(content=result)
        if isinstance(result, dict):
            calls = [
                {"id": c.get("id"), "name": c.get("name"), "args": c.get("arguments") or {}, "type": "tool_call"}
                for c in result.get("tool_calls") or []
                if isinstance(c, dict)
            ]
            return AIMessage(content=result.get("content") or "", tool_calls=calls)
        if result is not None:
            raise DecisionError("llm.request", "a patched 'result' must be a string or a message object")
        if patched.get("model", payload["model"]) != payload["model"]:
            raise DecisionError("llm.request", "a LangChain agent's model cannot be swapped by name")
        overrides: dict[str, Any] = {}
        messages = patched.get("messages", payload["messages"])
        if messages != payload["messages"]:
            if not isinstance(messages, list):
                raise DecisionError("llm.request", "a patched 'messages' must be an array")
            overrides["messages"] = self._rewritten(list(request.messages), messages)
        settings = dict(request.model_settings or {})
        for key in ("temperature", "max_tokens"):
            if patched.get(key, payload[key]) != payload[key]:
                settings[key] = patched[key]
        if settings != (request.model_settings or {}):
            overrides["model_settings"] = settings
        return request.override(**overrides) if overrides else request

    @staticmethod
    def _rewritten(old: list[BaseMessage], new: list[Any]) -> list[BaseMessage]:
        """The request's messages as a patch gave them: same count, contents replaced in place; else rebuilt."""
        if len(old) == len(new) and all(isinstance(m, dict) for m in new):
            return [
                m if m.content == d.get("content") else m.model_copy(update={"content": d.get("content", "")})
                for m, d in zip(old, new, strict=True)
            ]
        return list(convert_to_messages(new))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse | AIMessage:
        payload = self._model_payload(request)
        decided = self._model_decision(request, payload, await aintercept(self.bus, "llm.request", payload, self.ctx))
        return decided if isinstance(decided, AIMessage) else await handler(decided)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse | AIMessage:
        sync = need_sync(self.bus, "HookbusMiddleware.wrap_model_call")
        payload = self._model_payload(request)
        decided = self._model_decision(request, payload, sync.intercept("llm.request", payload, self.ctx))
        return decided if isinstance(decided, AIMessage) else handler(decided)

    # -- answers -----------------------------------------------------------------------------------------
    def _answer_payload(self, state: Mapping[str, Any]) -> tuple[AIMessage, dict[str, Any]] | None:
        messages = state.get("messages") or []
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage) or last.tool_calls:
            return None  # not a final answer
        rounds = sum(1 for m in messages if isinstance(m, HumanMessage) and m.additional_kwargs.get("hookbus_rework"))
        turn = str(self.ctx.get("session", ""))
        return last, {"agent": self.agent, "turn": turn, "content": output_text(last.content), "round": rounds}

    @staticmethod
    def _answered(last: AIMessage, decision: Decision, rounds: int) -> dict[str, Any] | None:
        if isinstance(decision, Cancel):
            return {"messages": [last.model_copy(update={"content": ""})]}
        if not isinstance(decision, Patch):
            return None
        rework, answer = decision.payload.get("rework"), decision.payload.get("answer")
        if isinstance(rework, str) and last.id is not None and rounds < MAX_REWORK_ROUNDS:
            feedback = HumanMessage(rework, additional_kwargs={"hookbus_rework": True})
            return {"messages": [RemoveMessage(id=last.id), feedback], "jump_to": "model"}
        if isinstance(answer, str):
            return {"messages": [last.model_copy(update={"content": answer})]}
        return None

    @hook_config(can_jump_to=["model"])
    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        found = self._answer_payload(state)
        if found is None:
            return None
        last, payload = found
        return self._answered(
            last, await aintercept(self.bus, "assistant.message", payload, self.ctx), payload["round"]
        )

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        found = self._answer_payload(state)
        if found is None:
            return None
        last, payload = found
        sync = need_sync(self.bus, "HookbusMiddleware.after_model")
        return self._answered(last, sync.intercept("assistant.message", payload, self.ctx), payload["round"])
