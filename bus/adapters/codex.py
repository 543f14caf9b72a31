"""Codex sessions on the bus: Codex's hook inputs take Claude Code's mapping, its output its own limits.

Codex documents the same command-hook protocol for ``SessionStart``,
``PreToolUse``, ``PostToolUse``, ``UserPromptSubmit`` and ``Stop`` (its inputs
add ``turn_id`` and ``model``). Two differences matter here: an allowed call is
an empty output, and a hook output Codex cannot apply fails the hook and runs
the tool. So a patch of the input, which Codex hooks cannot apply, is written
as a refusal whose reason carries the changed input for the model to retry
with: the guard's change is never silently dropped.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from bus.adapters.claude_code import ClaudeCodeDialect, HookAnswer

#: The agent name intercepts and events of a Codex session carry.
CODEX: Final = "codex"
#: The hook events ``hookbus codex-hook install`` configures (those Codex documents).
INSTALLED_EVENTS: Final = ("SessionStart", "PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop")


class CodexDialect(ClaudeCodeDialect):
    """Decisions in Codex's hook output: deny as Claude Code, a changed input as a deny naming it."""

    name: str = CODEX
    agent: str = CODEX

    def updated_input(self, tool_input: dict[str, Any]) -> HookAnswer:
        changed = orjson.dumps(tool_input).decode()
        return self.deny("PreToolUse", f"hookbus: a guard changed this call's input; call the tool with {changed}")
