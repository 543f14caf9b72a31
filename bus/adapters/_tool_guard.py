"""What a guarded framework tool does around its call: ``tool.call`` before, ``tool.result`` after.

The same rules as the reference agent's runner (docs/stages.md): a cancel on
``tool.call`` skips the tool and its reason becomes the tool's answer, so the
model sees why; a patch changes the input (or, with ``result``, answers
without running the tool); on ``tool.result`` a cancel hides the output
behind the reason and a patch replaces it. A patched field of the wrong type
is refused with a :class:`bus._core.errors.DecisionError` naming the stage and
field: a hostile handler neither crashes the framework nor passes silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from bus._core.decisions import Cancel, Decision, Patch
from bus._core.errors import DecisionError
from bus._core.json_types import json_type
from bus._runtime import genai_spans as _genai
from bus.adapters._calls import AnyBus, aintercept, need_sync

TOOL_CALL: Final = "tool.call"
TOOL_RESULT: Final = "tool.result"


def cancelled(reason: str) -> str:
    """The answer the model gets for a tool call middleware cancelled (as the reference runner words it)."""
    return f"cancelled by middleware: {reason}"


@dataclass(frozen=True, slots=True)
class Before:
    """What ``tool.call`` decided: run with ``input``, or answer ``answer`` without running the tool."""

    input: dict[str, Any]
    answer: str | None = None
    cancelled: bool = False


def before(decision: Decision, tool_input: dict[str, Any]) -> Before:
    """Read a ``tool.call`` decision for a call with ``tool_input``."""
    if isinstance(decision, Cancel):
        return Before(tool_input, cancelled(decision.reason), cancelled=True)
    if not isinstance(decision, Patch):
        return Before(tool_input)
    payload = decision.payload
    result = payload.get("result")
    if result is not None:
        return Before(tool_input, _text(TOOL_CALL, "result", result))
    patched = payload.get("input", tool_input)
    if not isinstance(patched, dict):
        raise DecisionError(TOOL_CALL, f"a patched 'input' must be an object, not {json_type(patched)}")
    return Before(patched)


def output_text(output: Any) -> str:
    """The tool's output as the text ``tool.result`` judges (JSON for structured values)."""
    if isinstance(output, str):
        return str(output)  # a plain str: a framework's str subclass (content with its artifact) is not encodable
    try:
        return orjson.dumps(output, default=str).decode()
    except TypeError:
        return str(output)


def after(decision: Decision, output: Any) -> Any:
    """Read a ``tool.result`` decision: the output unchanged, hidden behind the reason, or replaced."""
    if isinstance(decision, Cancel):
        hidden = decision.payload or {}
        text = hidden.get("output")
        return text if isinstance(text, str) and text else f"[output hidden: {decision.reason}]"
    if isinstance(decision, Patch):
        return _text(TOOL_RESULT, "output", decision.payload.get("output", ""))
    return output


def _text(stage: str, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise DecisionError(stage, f"a patched {field!r} must be a string, not {json_type(value)}")
    return value


class ToolGuard:
    """The middleware around one tool: ``run`` for sync tools (SyncBus), ``arun`` for async ones.

    ``refuse(answer)`` makes a cancelled call's answer in the framework's own
    terms (LangChain: a tool error the model reads); by default the answer
    text is returned as the tool's output.
    """

    def __init__(
        self,
        bus: AnyBus,
        name: str,
        ctx: Mapping[str, Any] | None = None,
        refuse: Callable[[str], Any] | None = None,
    ) -> None:
        self.bus = bus
        self.name = name
        self.ctx = dict(ctx or {})
        self.refuse = refuse

    def _answer(self, verdict: Before) -> Any:
        assert verdict.answer is not None
        return self.refuse(verdict.answer) if verdict.cancelled and self.refuse is not None else verdict.answer

    def run(self, tool_input: dict[str, Any], call: Callable[[dict[str, Any]], Any], call_id: str | None = None) -> Any:
        """Run the tool behind its stages, in an ``execute_tool`` span where the process traces."""
        with _genai.tool(self.name, call_id):
            return self._run(tool_input, call)

    def _run(self, tool_input: dict[str, Any], call: Callable[[dict[str, Any]], Any]) -> Any:
        sync = need_sync(self.bus, f"the guarded tool {self.name!r}")
        verdict = before(sync.intercept(TOOL_CALL, {"name": self.name, "input": tool_input}, self.ctx), tool_input)
        if verdict.answer is not None:
            return self._answer(verdict)
        output, is_error = _call(call, verdict.input)
        judged = sync.intercept(TOOL_RESULT, self._result(output, is_error), self.ctx)
        return _finish(judged, output, is_error)

    async def arun(
        self, tool_input: dict[str, Any], call: Callable[[dict[str, Any]], Awaitable[Any]], call_id: str | None = None
    ) -> Any:
        """:meth:`run` for an async tool."""
        with _genai.tool(self.name, call_id):
            return await self._arun(tool_input, call)

    async def _arun(self, tool_input: dict[str, Any], call: Callable[[dict[str, Any]], Awaitable[Any]]) -> Any:
        decision = await aintercept(self.bus, TOOL_CALL, {"name": self.name, "input": tool_input}, self.ctx)
        verdict = before(decision, tool_input)
        if verdict.answer is not None:
            return self._answer(verdict)
        try:
            output, is_error = await call(verdict.input), False
        except Exception as exc:
            output, is_error = exc, True
        judged = await aintercept(self.bus, TOOL_RESULT, self._result(output, is_error), self.ctx)
        return _finish(judged, output, is_error)

    def _result(self, output: Any, is_error: bool) -> dict[str, Any]:
        text = f"{type(output).__name__}: {output}" if is_error else output_text(output)
        return {"name": self.name, "output": text, "is_error": is_error}


def _call(call: Callable[[dict[str, Any]], Any], tool_input: dict[str, Any]) -> tuple[Any, bool]:
    try:
        return call(tool_input), False
    except Exception as exc:
        return exc, True


def _finish(judged: Decision, output: Any, is_error: bool) -> Any:
    """The tool's answer after ``tool.result``; a failed tool's error is raised again unless replaced."""
    if is_error and not isinstance(judged, Cancel | Patch):
        raise output
    return after(judged, output)
