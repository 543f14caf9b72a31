"""Errors of the agent that runs turns: the model and its hook-turns.

The tree (under :class:`bus._core.errors.HookbusError`)::

    HookbusError
    ├── LLMError         the model could not be asked, or did not answer a chat completion
    └── HookTurnError    the model did not give a decision in a hook-turn
"""

from __future__ import annotations

from bus._core.errors import HookbusError


class LLMError(HookbusError):
    """The model could not be asked, or answered something that is not a chat completion."""

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


class HookTurnError(HookbusError):
    """The model did not give a decision (no single hook_* call, or a malformed one)."""
