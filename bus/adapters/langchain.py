"""LangChain on the bus: callback handlers that emit lifecycle events, and guarded tools.

``HookbusCallbackHandler`` (sync, on a :class:`bus.sync.SyncBus`) and
``AsyncHookbusCallbackHandler`` (on a Bus or a SyncBus) emit
``prx.lifecycle.llm_request``/``llm_response`` for model calls,
``tool_call_start``/``tool_call`` for tools and ``error`` for failures.
``guard_tool(tool, bus)`` puts any LangChain tool behind ``tool.call`` and
``tool.result`` middleware: a cancel returns the reason to the model as the
tool's answer, a patch changes the input (bus/adapters/_tool_guard.py).

Needs ``langchain-core`` (``pip install 'hookbus[langchain]'``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackHandler,
    AsyncCallbackManagerForToolRun,
    BaseCallbackHandler,
    CallbackManagerForToolRun,
)
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict

from bus._core.errors import HookbusError
from bus.adapters._calls import AnyBus, aemit, need_sync
from bus.adapters._lifecycle import Emitted, Lifecycle
from bus.adapters._tool_guard import ToolGuard, output_text

__all__ = ["AsyncHookbusCallbackHandler", "GuardedTool", "HookbusCallbackHandler", "guard_tool"]


def _model(serialized: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None) -> tuple[str, str]:
    """(provider, model) of an LLM run, from LangChain's ``ls_*`` metadata, else the serialized model."""
    meta = metadata or {}
    kwargs = (serialized or {}).get("kwargs") or {}
    ids = (serialized or {}).get("id") or ["unknown"]
    provider = meta.get("ls_provider") or str(ids[-1])
    model = meta.get("ls_model_name") or kwargs.get("model") or kwargs.get("model_name") or "unknown"
    return str(provider), str(model)


def _answered_model(response: LLMResult) -> str | None:
    output = response.llm_output or {}
    name = output.get("model_name") or output.get("model")
    return str(name) if name else None


def _tool_arguments(input_str: str, inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(inputs) if isinstance(inputs, Mapping) else {"input": input_str}


class _Events:
    """LangChain callbacks translated to lifecycle events (shared by the sync and async handlers)."""

    def __init__(self) -> None:
        self.lifecycle = Lifecycle()

    def llm_start(self, serialized: Any, count: int, run_id: UUID, metadata: Any) -> Emitted:
        provider, model = _model(serialized, metadata)
        return self.lifecycle.llm_request(run_id, provider, model, count)

    def llm_end(self, response: LLMResult, run_id: UUID) -> Emitted:
        return self.lifecycle.llm_response(run_id, True, _answered_model(response))

    def tool_start(self, serialized: Any, input_str: str, run_id: UUID, inputs: Any) -> Emitted:
        name = str((serialized or {}).get("name") or "unknown")
        return self.lifecycle.tool_start(name, _tool_arguments(input_str, inputs), run_id)

    def tool_end(self, output: Any, run_id: UUID) -> Emitted:
        content = getattr(output, "content", output)  # a ToolMessage carries the answer in content
        success = getattr(output, "status", "success") != "error"  # a handled tool error (or a cancel) is not
        return self.lifecycle.tool_end(None, success, output_text(content), run_id)

    def tool_error(self, error: BaseException, run_id: UUID) -> list[Emitted]:
        ended = self.lifecycle.tool_end(None, False, f"{type(error).__name__}: {error}", run_id)
        return [ended, Lifecycle.error(f"tool:{ended[1]['tool']}", error)]

    def llm_error(self, error: BaseException, run_id: UUID) -> list[Emitted]:
        return [self.lifecycle.llm_response(run_id, False), Lifecycle.error("llm", error)]


class HookbusCallbackHandler(BaseCallbackHandler):
    """Emits lifecycle events from a synchronous LangChain run, through a SyncBus."""

    raise_error = False  # LangChain logs a failing callback and goes on: observing never breaks the agent

    def __init__(self, bus: AnyBus, *, session_id: str | None = None) -> None:
        self.bus = need_sync(bus, "HookbusCallbackHandler")
        self.session_id = session_id
        self._events = _Events()

    def _emit(self, *events: Emitted) -> None:
        for subject, payload in events:
            self.bus.emit(subject, payload, self.session_id)

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, metadata: Any = None, **_: Any
    ) -> None:
        self._emit(self._events.llm_start(serialized, len(prompts), run_id, metadata))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: Any = None,
        **_: Any,
    ) -> None:
        self._emit(self._events.llm_start(serialized, sum(map(len, messages)), run_id, metadata))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **_: Any) -> None:
        self._emit(self._events.llm_end(response, run_id))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **_: Any) -> None:
        self._emit(*self._events.llm_error(error, run_id))

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, inputs: Any = None, **_: Any
    ) -> None:
        self._emit(self._events.tool_start(serialized, input_str, run_id, inputs))

    def on_tool_end(self, output: Any, *, run_id: UUID, **_: Any) -> None:
        self._emit(self._events.tool_end(output, run_id))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **_: Any) -> None:
        self._emit(*self._events.tool_error(error, run_id))

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **_: Any
    ) -> None:
        if parent_run_id is None:  # once per failed run, not once per chain it passed through
            self._emit(Lifecycle.error("chain", error))


class AsyncHookbusCallbackHandler(AsyncCallbackHandler):
    """Emits lifecycle events from an async LangChain run, on a Bus (or a SyncBus)."""

    raise_error = False

    def __init__(self, bus: AnyBus, *, session_id: str | None = None) -> None:
        self.bus = bus
        self.session_id = session_id
        self._events = _Events()

    async def _emit(self, *events: Emitted) -> None:
        for subject, payload in events:
            await aemit(self.bus, subject, payload, self.session_id)

    async def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, metadata: Any = None, **_: Any
    ) -> None:
        await self._emit(self._events.llm_start(serialized, len(prompts), run_id, metadata))

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: Any = None,
        **_: Any,
    ) -> None:
        await self._emit(self._events.llm_start(serialized, sum(map(len, messages)), run_id, metadata))

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **_: Any) -> None:
        await self._emit(self._events.llm_end(response, run_id))

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **_: Any) -> None:
        await self._emit(*self._events.llm_error(error, run_id))

    async def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: UUID, inputs: Any = None, **_: Any
    ) -> None:
        await self._emit(self._events.tool_start(serialized, input_str, run_id, inputs))

    async def on_tool_end(self, output: Any, *, run_id: UUID, **_: Any) -> None:
        await self._emit(self._events.tool_end(output, run_id))

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **_: Any) -> None:
        await self._emit(*self._events.tool_error(error, run_id))

    async def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **_: Any
    ) -> None:
        if parent_run_id is None:
            await self._emit(Lifecycle.error("chain", error))


def _input_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The tool's input as ``tool.call`` sees it: the arguments, or ``{"input": text}`` for a one-string tool."""
    if args and not kwargs:
        return {"input": args[0]}
    return kwargs


def _for_inner(given: dict[str, Any], args: tuple[Any, ...], injected: dict[str, Any]) -> str | dict[str, Any]:
    """The inner tool's input: the (judged) arguments, with the injected ones as LangChain gave them."""
    if args and set(given) == {"input"} and not injected:
        return str(given["input"])
    return {**given, **injected}


class _Cancelled(ToolException, HookbusError):
    """A call middleware cancelled: LangChain hands its text to the model as the tool's (error) answer."""


def _refuse(answer: str) -> Any:
    raise _Cancelled(answer)


class _ErrorPolicy:
    """The guarded tool's ``handle_tool_error``: a cancel answers the model; other errors as the inner tool says.

    LangChain asks ``if not handle_tool_error`` inside its ``except ToolException``
    block: truth is decided per error (the one being handled), so a tool that
    does not handle its errors still raises them through LangChain's own path
    (``on_tool_error`` reported), while a cancel always becomes the model's answer.
    """

    def __init__(self, own: Any) -> None:
        self.own = own

    def __bool__(self) -> bool:
        return isinstance(sys.exc_info()[1], _Cancelled) or bool(self.own)

    def __call__(self, error: ToolException) -> str:
        if isinstance(error, _Cancelled) or self.own is True:
            return str(error.args[0]) if error.args else "Tool execution error"
        if isinstance(self.own, str):
            return self.own
        return str(self.own(error))


class GuardedTool(BaseTool):
    """A LangChain tool run behind ``tool.call``/``tool.result`` middleware (see :func:`guard_tool`).

    Injected arguments (``InjectedToolCallId``, ``InjectedState``, ``InjectedStore``, any
    ``InjectedToolArg``) reach the inner tool as LangChain gave them and are never in the payload
    handlers see, nor taken from a patch. A ``content_and_artifact`` tool keeps its artifact when
    the guards let its output through; a hidden or rewritten output drops it (the artifact is the
    raw result the guard judged).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    guard: ToolGuard

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        hidden = self.inner._injected_args_keys
        injected = {key: kwargs.pop(key) for key in list(kwargs) if key in hidden}
        return _input_of(args, kwargs), injected

    def _call_id(self, injected: dict[str, Any]) -> str | None:
        for key, value in injected.items():
            if key in _call_id_keys(self.inner) and isinstance(value, str):
                return value
        return _ARTIFACT_CALL if self.response_format == "content_and_artifact" else None

    def _run(self, *args: Any, run_manager: CallbackManagerForToolRun | None = None, **kwargs: Any) -> Any:
        # The inner tool runs without this run's callbacks: its start and end are this tool's, reported once.
        given, injected = self._split(args, kwargs)
        call_id = self._call_id(injected)

        def call(tool_input: dict[str, Any]) -> Any:
            return _content(self.inner.run(_for_inner(tool_input, args, injected), tool_call_id=call_id))

        return self._answer(self.guard.run(given, call, _real_id(call_id)))

    async def _arun(self, *args: Any, run_manager: AsyncCallbackManagerForToolRun | None = None, **kwargs: Any) -> Any:
        given, injected = self._split(args, kwargs)
        call_id = self._call_id(injected)

        async def call(tool_input: dict[str, Any]) -> Any:
            return _content(await self.inner.arun(_for_inner(tool_input, args, injected), tool_call_id=call_id))

        return self._answer(await self.guard.arun(given, call, _real_id(call_id)))

    def _answer(self, answer: Any) -> Any:
        if self.response_format != "content_and_artifact":
            if isinstance(answer, _Artifacted):  # a tool answering with its own ToolMessage keeps it
                return answer.message if answer.artifact is not None else answer.content
            return answer
        if isinstance(answer, _Artifacted):
            return answer.content, answer.artifact
        return answer, None  # hidden, rewritten or answered by a guard: no artifact of the tool's


#: The tool call id a content_and_artifact tool is run with when the call named none (its artifact is kept).
_ARTIFACT_CALL = "hookbus-guarded"


class _Artifacted(str):
    """A tool's content with its artifact: as text, the content ``tool.result`` judges (the artifact is not)."""

    content: Any
    artifact: Any
    message: Any

    def __new__(cls, content: Any, artifact: Any, message: Any = None) -> _Artifacted:
        made = super().__new__(cls, output_text(content))
        made.content, made.artifact, made.message = content, artifact, message
        return made


def _content(output: Any) -> Any:
    """What the inner tool answered: a ToolMessage's content (and artifact), or the output itself."""
    from langchain_core.messages import ToolMessage

    if isinstance(output, ToolMessage):
        if output.status == "error" and output.artifact is None:
            return output.content
        return _Artifacted(output.content, output.artifact, output)
    return output


def _real_id(call_id: str | None) -> str | None:
    """The model's id of a tool call, not the stand-in an artifact-returning tool is given."""
    return None if call_id == _ARTIFACT_CALL else call_id


def _call_id_keys(tool: BaseTool) -> frozenset[str]:
    from langchain_core.tools import InjectedToolCallId
    from langchain_core.tools.base import _is_injected_arg_type, get_all_basemodel_annotations

    schema = tool.args_schema
    if not isinstance(schema, type):
        return frozenset()
    annotations = get_all_basemodel_annotations(schema)
    return frozenset(k for k, v in annotations.items() if _is_injected_arg_type(v, injected_type=InjectedToolCallId))


def guard_tool(tool: BaseTool, bus: AnyBus, *, session_id: str | None = None, agent: str | None = None) -> GuardedTool:
    """``tool`` behind middleware, with the same name, description and arguments for the model.

    Sync calls (``invoke``) need a SyncBus; async ones (``ainvoke``) take a Bus
    or a SyncBus. ``session_id`` and ``agent`` go into the requests' context.
    """
    ctx = {key: value for key, value in (("session", session_id), ("agent", agent)) if value is not None}
    return GuardedTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        return_direct=tool.return_direct,
        response_format=tool.response_format,
        handle_tool_error=_ErrorPolicy(tool.handle_tool_error),
        inner=tool,
        guard=ToolGuard(bus, tool.name, ctx, refuse=_refuse),
    )
