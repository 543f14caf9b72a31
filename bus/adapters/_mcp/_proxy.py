"""The proxy between one MCP client and one MCP server: every message passes, tool calls through the chain.

It works on the SDK's message streams (``SessionMessage`` in, out), so it is
the same for stdio and streamable HTTP on either side, and it forwards what it
does not judge unchanged: request ids are the client's own (the proxy sends
the server no request of its own), server-to-client requests and
notifications go straight through.

Bounds: at most ``max_in_flight`` client requests wait at once (more are
answered with an error at once); each waits at most ``timeout_s`` for the
server (then an MCP error, and the late answer is dropped); once the server's
stream ends every waiting and later request is answered with an error. The
client never hangs on the proxy.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup
from mcp.shared._stream_protocols import ReadStream, WriteStream  # the SDK's own stream types
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId

from bus._core.decisions import Cancel, Patch
from bus._core.errors import DecisionError
from bus._runtime import genai_spans as _genai
from bus.adapters._lifecycle import Lifecycle
from bus.adapters._mcp._gate import Gate
from bus.adapters._mcp._messages import (
    INVALID_PARAMS,
    OVERSIZED,
    REFUSED,
    UPSTREAM_ERROR,
    error,
    response,
    result_text,
    rewritten,
    text_result,
    tool_name,
)
from bus.adapters._tool_guard import TOOL_CALL, TOOL_RESULT, after, before, cancelled

log = logging.getLogger(__name__)

TOOL_LIST: Final = "tool.list"
RESOURCE_READ: Final = "resource.read"
#: Seconds a request may wait for the server before the client gets an error (a hung server).
DEFAULT_TIMEOUT_S: Final = 60.0
#: Client requests waiting at once; past it a request is answered with an error at once.
DEFAULT_MAX_IN_FLIGHT: Final = 64
#: Tools of one tools/list judged at once on ``tool.list`` (each one intercept when the stage is declared).
_LIST_CONCURRENCY: Final = 16
#: Tools of one tools/list judged at all; a longer list is cut (a server cannot make the proxy do unbounded work).
MAX_LISTED: Final = 1000

Reader = ReadStream[SessionMessage | Exception]
Writer = WriteStream[SessionMessage]


@dataclass(frozen=True, slots=True)
class Streams:
    """One side's message streams, as the SDK's transports yield them."""

    read: Reader
    write: Writer


@dataclass(slots=True)
class _Waiting:
    """A client request the server has not answered yet."""

    method: str
    deadline: float
    tool: str | None = None
    name: str | None = None
    #: A tools/call's ``execute_tool`` span (None where the process does not trace), ended once it is answered.
    span: Any = None


@dataclass(slots=True)
class ProxySettings:
    server: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    session_id: str | None = None
    ctx: dict[str, Any] = field(default_factory=dict)


class McpProxy:
    """Runs one client-server pairing until the client's stream ends."""

    def __init__(self, gate: Gate, settings: ProxySettings) -> None:
        self.gate = gate
        self.settings = settings
        self.lifecycle = Lifecycle()
        self._waiting: dict[RequestId, _Waiting] = {}
        self._judging = 0
        self._dead: str | None = None
        self._wake = anyio.Event()

    async def run(self, client: Streams, upstream: Streams | str) -> None:
        """Pass messages until the client's stream ends; ``upstream`` a str: the server could not be reached (why)."""
        self._client = client.write
        async with anyio.create_task_group() as tg:
            if isinstance(upstream, str):
                self._dead = f"hookbus mcp: {self.settings.server}: {upstream}"
                await self._emit(*self.lifecycle.error("mcp", self._dead))
            else:
                self._upstream = upstream.write
                tg.start_soon(self._from_upstream, upstream.read, tg)
            tg.start_soon(self._expire)
            try:
                await self._from_client(client.read, tg)
            finally:
                for waiting in self._waiting.values():  # the client is gone: its calls' spans end with it
                    _genai.end(waiting.span)
            tg.cancel_scope.cancel()

    # client -> server

    async def _from_client(self, read: Reader, tg: TaskGroup) -> None:
        async with read:
            async for item in read:
                if isinstance(item, Exception):
                    log.warning("hookbus mcp: the client sent a message that is not JSON-RPC: %s", item)
                    continue
                message = item.message
                if not isinstance(message, JSONRPCRequest):
                    await self._to_upstream(item)
                    continue
                if self._dead is not None:
                    await self._client.send(error(message.id, UPSTREAM_ERROR, self._dead))
                    continue
                if len(self._waiting) + self._judging >= self.settings.max_in_flight:
                    busy = f"hookbus mcp: {self.settings.max_in_flight} requests are already waiting"
                    await self._client.send(error(message.id, UPSTREAM_ERROR, busy))
                    continue
                if message.method == OVERSIZED:
                    size = (message.params or {}).get("bytes")
                    refused = f"hookbus mcp: a message of {size} bytes is over the proxy's limit"
                    await self._client.send(error(message.id, INVALID_PARAMS, refused))
                elif message.method == "tools/call":
                    self._judging += 1
                    tg.start_soon(self._call, item, message)
                elif message.method == "resources/read":
                    self._judging += 1
                    tg.start_soon(self._read, item, message)
                else:
                    await self._forward(item, _Waiting(message.method, self._deadline()))

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.timeout_s

    async def _to_upstream(self, item: SessionMessage) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._upstream.send(item)  # a server that is gone: its stream's end answers what waits

    async def _forward(self, item: SessionMessage, waiting: _Waiting) -> None:
        message = item.message
        assert isinstance(message, JSONRPCRequest)
        if self._dead is not None:
            await self._client.send(error(message.id, UPSTREAM_ERROR, self._dead))
            _genai.end(waiting.span)
            return
        self._waiting[message.id] = waiting
        if math.isfinite(waiting.deadline):
            self._wake.set()
        await self._to_upstream(item)

    async def _call(self, item: SessionMessage, message: JSONRPCRequest) -> None:
        try:
            await self._judge_call(item, message)
        finally:
            self._judging -= 1

    async def _judge_call(self, item: SessionMessage, message: JSONRPCRequest) -> None:
        params = message.params or {}
        tool, arguments = params.get("name"), params.get("arguments", {})
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            await self._client.send(error(message.id, INVALID_PARAMS, "tools/call needs a name and object arguments"))
            return
        name = tool_name(self.settings.server, tool)
        # The call's execute_tool span: parent of both intercepts, ended once the client has its answer.
        span = _genai.start_tool(name, None if message.id is None else str(message.id))
        try:
            forward = await self._judged_call(item, message, name, span)
        except BaseException:
            _genai.end(span)
            raise
        if forward is None:
            _genai.end(span)  # answered by the chain: the server never saw it
            return
        await self._forward(*forward)

    async def _judged_call(
        self, item: SessionMessage, message: JSONRPCRequest, name: str, span: Any
    ) -> tuple[SessionMessage, _Waiting] | None:
        """The call's ``tool.call`` verdict: its answer sent (None), or the call to forward and what waits."""
        params = message.params or {}
        tool, arguments = params["name"], params.get("arguments", {})
        payload = {"name": name, "input": arguments, "server": self.settings.server, "tool": tool}
        await self._emit(*self.lifecycle.tool_start(name, arguments))
        with _genai.within(span):
            try:
                verdict = before(await self.gate.intercept(TOOL_CALL, payload, self.settings.ctx), arguments)
            except DecisionError as exc:
                verdict = before(Cancel(str(exc)), arguments)
        if verdict.answer is not None:
            answer = response(message.id, text_result(verdict.answer, is_error=verdict.cancelled))
            await self._answer(answer, *self.lifecycle.tool_end(name, not verdict.cancelled, verdict.answer))
            return None
        forwarded = message.model_copy(update={"params": {**params, "arguments": verdict.input}})
        return SessionMessage(forwarded, item.metadata), _Waiting("tools/call", self._deadline(), tool, name, span)

    async def _read(self, item: SessionMessage, message: JSONRPCRequest) -> None:
        try:
            uri = (message.params or {}).get("uri")
            payload = {"name": uri, "uri": uri, "server": self.settings.server}
            decision = await self.gate.intercept(RESOURCE_READ, payload, self.settings.ctx)
            if isinstance(decision, Cancel):
                await self._client.send(error(message.id, REFUSED, cancelled(decision.reason)))
                return
            await self._forward(item, _Waiting("resources/read", self._deadline()))
        finally:
            self._judging -= 1

    # server -> client

    async def _from_upstream(self, read: Reader, tg: TaskGroup) -> None:
        cause = "the MCP server closed its connection"
        try:
            async with read:
                async for item in read:
                    if isinstance(item, Exception):
                        log.warning("hookbus mcp: the server sent a message that is not JSON-RPC: %s", item)
                        continue
                    await self._from_server(item, tg)
        except Exception as exc:  # the transport failed (a refused HTTP connection ...): the same as an end
            cause = f"the MCP server's connection failed: {type(exc).__name__}: {exc}"
        await self._died(f"hookbus mcp: {self.settings.server}: {cause}")

    async def _from_server(self, item: SessionMessage, tg: TaskGroup) -> None:
        message = item.message
        if not isinstance(message, JSONRPCResponse | JSONRPCError) or message.id is None:
            await self._client.send(item)
            return
        waiting = self._waiting.pop(message.id, None)
        if waiting is None:
            log.info("hookbus mcp: an answer to %r came after its deadline (dropped)", message.id)
            return
        if waiting.method == "tools/call":
            tg.start_soon(self._result, message, waiting)
        elif waiting.method == "tools/list" and isinstance(message, JSONRPCResponse):
            tg.start_soon(self._listed, message)
        else:
            await self._client.send(item)

    async def _result(self, message: JSONRPCResponse | JSONRPCError, waiting: _Waiting) -> None:
        try:
            with _genai.within(waiting.span):
                await self._judge_result(message, waiting)
        finally:
            _genai.end(waiting.span)  # the result is sent (or cannot be): the call's span ends

    async def _judge_result(self, message: JSONRPCResponse | JSONRPCError, waiting: _Waiting) -> None:
        assert waiting.name is not None
        if isinstance(message, JSONRPCError):
            await self._answer(
                SessionMessage(message), *self.lifecycle.tool_end(waiting.name, False, message.error.message)
            )
            return
        result = message.result
        is_error = bool(result.get("isError"))
        text = result_text(result)
        payload = {
            "name": waiting.name,
            "output": text,
            "is_error": is_error,
            "server": self.settings.server,
            "tool": waiting.tool,
        }
        decision = await self.gate.intercept(TOOL_RESULT, payload, self.settings.ctx)
        if isinstance(decision, Cancel | Patch):
            before_text, hidden = text, isinstance(decision, Cancel)
            try:
                text = after(decision, text)
            except DecisionError as exc:  # a hostile patch: nothing of the output passes
                text, hidden = f"[output hidden: {exc}]", True
            result = rewritten(result, before_text, text, hidden=hidden)
        await self._answer(response(message.id, result), *self.lifecycle.tool_end(waiting.name, not is_error, text))

    async def _listed(self, message: JSONRPCResponse) -> None:
        tools = message.result.get("tools")
        if not isinstance(tools, list):
            await self._client.send(SessionMessage(message))
            return
        tools = tools[:MAX_LISTED]
        keep = [True] * len(tools)
        limiter = anyio.Semaphore(_LIST_CONCURRENCY)

        async def judge(index: int, tool: Any) -> None:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return
            name = tool_name(self.settings.server, tool["name"])
            payload = {"name": name, "server": self.settings.server, "tool": tool["name"]}
            async with limiter:
                keep[index] = not isinstance(await self.gate.intercept(TOOL_LIST, payload, self.settings.ctx), Cancel)

        async with anyio.create_task_group() as tg:
            for index, tool in enumerate(tools):
                tg.start_soon(judge, index, tool)
        listed = [tool for tool, kept in zip(tools, keep, strict=True) if kept]
        await self._client.send(response(message.id, {**message.result, "tools": listed}))

    # bounds

    async def _expire(self) -> None:
        """Answer every request past its deadline with an error (the server hangs); its late answer is dropped."""
        while True:
            now = time.monotonic()
            for request_id, waiting in list(self._waiting.items()):
                if waiting.deadline <= now:
                    del self._waiting[request_id]
                    cause = f"hookbus mcp: {self.settings.server} did not answer {waiting.method} within "
                    await self._fail(request_id, waiting, f"{cause}{self.settings.timeout_s:g}s")
            upcoming = min((w.deadline for w in self._waiting.values()), default=math.inf)
            self._wake = anyio.Event()
            with anyio.move_on_after(min(upcoming - time.monotonic(), 3600.0)):
                await self._wake.wait()

    async def _died(self, cause: str) -> None:
        self._dead = cause
        await self._emit(*self.lifecycle.error("mcp", cause))
        waiting, self._waiting = self._waiting, {}
        for request_id, entry in waiting.items():
            await self._fail(request_id, entry, cause)

    async def _fail(self, request_id: RequestId, waiting: _Waiting, cause: str) -> None:
        if waiting.name is not None:
            await self._emit(*self.lifecycle.tool_end(waiting.name, False, cause))
        try:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._client.send(error(request_id, UPSTREAM_ERROR, cause))
        finally:
            _genai.end(waiting.span)

    async def _answer(self, answer: SessionMessage, subject: str, payload: Mapping[str, Any]) -> None:
        """Send the client ``answer``, then the call's end event: the event's publish does not delay the answer."""
        try:
            await self._client.send(answer)
        finally:
            await self._emit(subject, payload)

    async def _emit(self, subject: str, payload: Mapping[str, Any]) -> None:
        try:
            await self.gate.emit(subject, payload, self.settings.session_id)
        except Exception as exc:  # an event the bus refuses (too large ...) never stops a call
            log.warning("hookbus mcp: event %s not sent: %s", subject, exc)


async def run_with(
    proxy: McpProxy, client: Streams, upstream: Callable[[], AbstractAsyncContextManager[Streams]]
) -> None:
    """Run ``proxy`` for ``client`` on a fresh upstream connection; one that cannot open answers with errors."""
    try:
        opened = await _enter(upstream)
    except Exception as exc:  # a command that is not there, a refused URL: the client hears why
        await proxy.run(client, f"{type(exc).__name__}: {exc}")
        return
    streams, stack = opened
    async with stack:
        await proxy.run(client, streams)


async def _enter(
    upstream: Callable[[], AbstractAsyncContextManager[Streams]],
) -> tuple[Streams, contextlib.AsyncExitStack]:
    stack = contextlib.AsyncExitStack()
    try:
        streams = await stack.enter_async_context(upstream())
    except BaseException:
        await stack.aclose()
        raise
    return streams, stack
