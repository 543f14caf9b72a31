"""What the runner takes from a patch at its hook points: each field checked, a bad one named.

A handler may be hostile or buggy: a patched field of the wrong type fails the
turn with an error naming the stage and the field, never crashes the runner or
passes silently (docs/stages.md lists the fields each stage reads).
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bus._core.json_types import json_type
from bus._turns.errors import TurnFailed
from triggers.agent._llm import ChatToolCall, Completion

#: The longest delay an llm.retry patch may ask for, in seconds.
MAX_RETRY_DELAY_S: Final = 300.0


def bad(stage: str, field: str, wanted: str, value: Any) -> TurnFailed:
    """The error of a patch whose ``field`` is not what ``stage`` reads."""
    return TurnFailed(f"{stage} patch: {field!r} must be {wanted}, not {json_type(value)}")


def text_field(stage: str, payload: dict[str, Any], field: str) -> str | None:
    """A string field of a patch, None if absent or null."""
    value = payload.get(field)
    if value is None or isinstance(value, str):
        return value
    raise bad(stage, field, "a string", value)


def kept(stage: str, payload: dict[str, Any], field: str, current: str) -> str:
    """A patched string field, or ``current`` when the patch left it out (or null)."""
    value = text_field(stage, payload, field)
    return current if value is None else value


def llm_call(payload: dict[str, Any]) -> dict[str, Any]:
    """The llm.request fields the runner uses, checked."""
    stage = "llm.request"
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise bad(stage, "model", "a non-empty string", model)
    messages = payload.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise bad(stage, "messages", "an array of objects", messages)
    tools = payload.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise bad(stage, "tools", "an array of objects or null", tools)
    max_tokens = payload.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise bad(stage, "max_tokens", "a positive integer or null", max_tokens)
    temperature = payload.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, int | float)):
        raise bad(stage, "temperature", "a number or null", temperature)
    return {**payload, "model": model, "messages": messages, "tools": tools}


def cached_result(value: Any) -> Completion:
    """An llm.request ``result``: an answer text, or a message ``{content, tool_calls}`` as the API gives it."""
    if isinstance(value, str):
        return Completion(value, model="hookbus:result")
    if not isinstance(value, dict):
        raise bad("llm.request", "result", "a string or an object", value)
    content = value.get("content")
    if content is not None and not isinstance(content, str):
        raise bad("llm.request", "result.content", "a string or null", content)
    calls: list[ChatToolCall] = []
    for call in value.get("tool_calls") or []:
        name = call.get("name") if isinstance(call, dict) else None
        arguments = call.get("arguments", {}) if isinstance(call, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise bad("llm.request", "result.tool_calls", "[{id, name, arguments: object}]", call)
        calls.append(ChatToolCall(str(call.get("id") or f"result_{len(calls)}"), name, arguments))
    raw_calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()}}
        for c in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if raw_calls:
        message["tool_calls"] = raw_calls
    return Completion(content, calls, "hookbus:result", raw={"choices": [{"message": message}]})


def retry_choice(payload: dict[str, Any], delay_s: float, model: str) -> tuple[float, str]:
    """The (delay, model) an llm.retry patch leaves."""
    delay = payload.get("delay_s", delay_s)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_RETRY_DELAY_S:
        raise bad("llm.retry", "delay_s", f"a number of seconds from 0 to {MAX_RETRY_DELAY_S:g}", delay)
    chosen = payload.get("model", model)
    if not isinstance(chosen, str) or not chosen:
        raise bad("llm.retry", "model", "a non-empty string", chosen)
    return float(delay), chosen


def tool_input(stage: str, payload: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A patched tool ``input`` (an object), or the current one."""
    value = payload.get("input", current)
    if not isinstance(value, dict):
        raise bad(stage, "input", "an object", value)
    return value
