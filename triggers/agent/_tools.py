"""The tools the reference turn runner offers its model: small, harmless, useful in demos.

A real agent has its own tools; these exist so that ``hookbus agent`` shows the
whole path (tool_call_start, the ``tool.call`` middleware stage, tool_call)
without giving a model anything dangerous.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any]], str | Awaitable[str]]  # a coroutine for tools that use the bus

    def command(self, arguments: dict[str, Any]) -> list[str]:
        """The resolved command tool.exec shows: ``builtin:<name>`` and the arguments as ``key=value``, sorted."""
        return [f"builtin:{self.name}", *(f"{key}={arguments[key]}" for key in sorted(arguments))]

    def schema(self) -> dict[str, Any]:
        """The tool as the chat-completions API describes it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _clock(arguments: dict[str, Any]) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _echo(arguments: dict[str, Any]) -> str:
    text = arguments.get("text")
    if not isinstance(text, str):
        raise ValueError("echo needs a string 'text'")
    return text


TOOLS: Final = {
    tool.name: tool
    for tool in (
        Tool("clock", "The current date and time (UTC).", {"type": "object", "properties": {}}, _clock),
        Tool(
            "echo",
            "Repeat a text back (for testing tool use).",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            _echo,
        ),
    )
}


def with_record_tools(bus: Any, agent: str, module: str | None = None) -> dict[str, Tool]:
    """The default tools plus the agent's tools over its handler records and event_emit (docs/records.md)."""
    from triggers.agent._record_tools import RecordTools

    tools = RecordTools(bus, agent) if module is None else RecordTools(bus, agent, module)
    return {**TOOLS, **{spec[0]: Tool(*spec) for spec in tools.specs()}}
