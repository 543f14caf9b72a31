"""Errors of the agent adapters: hook inputs from agents, and the matchers that pick their tools.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    ├── AgentHookError   a Claude Code, Codex or Gemini hook input is malformed (names the field; also ValueError)
    └── PatternError     RE2 cannot take a pattern (also ValueError)
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class AgentHookError(HookbusError, ValueError):
    """A hook input from Claude Code or Codex (stdin, the HTTP endpoint, the relay) is not what they document."""


class PatternError(HookbusError, ValueError):
    """RE2 cannot take the pattern; the message says why."""
