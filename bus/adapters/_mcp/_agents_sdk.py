"""An OpenAI Agents SDK MCP server object (``MCPServerStdio``, ``MCPServerStreamableHttp`` ...) behind the guards.

The SDK calls ``server.call_tool(name, arguments, meta)`` for every MCP tool
call of an agent; :func:`guard_calls` replaces that method on the object with
one that asks ``tool.call`` first (as ``mcp__SERVER__TOOL``, the proxy's
naming, so the same guards hold both), and ``tool.result`` on the answer. A
cancel is an ``isError`` result with the reason (the model reads it); a patch
changes the arguments the server gets, or the output the model reads. Every
call and result is a lifecycle event, as through ``hookbus mcp``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.types import CallToolResult

from bus._core.decisions import Cancel, Patch
from bus._core.errors import DecisionError
from bus.adapters._calls import AnyBus, aemit, aintercept
from bus.adapters._lifecycle import Emitted, Lifecycle
from bus.adapters._mcp._messages import result_text, rewritten, text_result, tool_name
from bus.adapters._tool_guard import TOOL_CALL, TOOL_RESULT, after, before

CallTool = Callable[..., Awaitable[CallToolResult]]


class _GuardedCalls:
    """The replacement ``call_tool`` of one server object."""

    def __init__(self, inner: CallTool, bus: AnyBus, server: str, ctx: Mapping[str, Any], session: str | None):
        self.inner = inner
        self.bus = bus
        self.server = server
        self.ctx = dict(ctx)
        self.session = session
        self.lifecycle = Lifecycle()

    async def __call__(
        self, tool: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        given = dict(arguments or {})
        name = tool_name(self.server, tool)
        payload = {"name": name, "input": given, "server": self.server, "tool": tool}
        await self._emit(self.lifecycle.tool_start(name, given))
        try:
            verdict = before(await aintercept(self.bus, TOOL_CALL, payload, self.ctx), given)
        except DecisionError as exc:
            verdict = before(Cancel(str(exc)), given)
        if verdict.answer is not None:
            await self._emit(self.lifecycle.tool_end(name, not verdict.cancelled, verdict.answer))
            return CallToolResult.model_validate(text_result(verdict.answer, is_error=verdict.cancelled))
        called = await (self.inner(tool, verdict.input) if meta is None else self.inner(tool, verdict.input, meta))
        return await self._judged(name, tool, called)

    async def _judged(self, name: str, tool: str, called: CallToolResult) -> CallToolResult:
        result = called.model_dump(mode="json", by_alias=True, exclude_none=True)
        is_error, text = bool(result.get("isError")), result_text(result)
        payload = {"name": name, "output": text, "is_error": is_error, "server": self.server, "tool": tool}
        decision = await aintercept(self.bus, TOOL_RESULT, payload, self.ctx)
        if isinstance(decision, Cancel | Patch):
            before_text, hidden = text, isinstance(decision, Cancel)
            try:
                text = str(after(decision, text))
            except DecisionError as exc:  # a hostile patch: nothing of the output passes
                text, hidden = f"[output hidden: {exc}]", True
            called = CallToolResult.model_validate(rewritten(result, before_text, text, hidden=hidden))
        await self._emit(self.lifecycle.tool_end(name, not is_error, text))
        return called

    async def _emit(self, event: Emitted) -> None:
        await aemit(self.bus, event[0], event[1], self.session)


def guard_calls(
    server: Any, bus: AnyBus, *, name: str | None = None, session_id: str | None = None, agent: str | None = None
) -> Any:
    """``server``'s tool calls behind ``tool.call``/``tool.result`` (``name``: the server's name in tool names)."""
    inner = server.call_tool
    if isinstance(inner, _GuardedCalls):
        return server  # guarded once: a second wrap would ask every guard twice
    label = name or str(server.name)
    ctx = {"agent": agent or f"mcp:{label}", **({"session": session_id} if session_id else {})}
    server.call_tool = _GuardedCalls(inner, bus, label, ctx, session_id)
    return server
