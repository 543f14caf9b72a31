"""Middleware stages: the points where the kernel waits for handlers' decisions.

A stage name is dotted (``tool.call``); the four Eva stages are typed members
of :class:`Stage`, and any other valid name works too (a user-declared stage).
Each stage has a phase (the journal's ``request``, before the action, or
``result``, judging a done one) and a field a handler's matcher is compared
with.
"""

from __future__ import annotations

import enum
from typing import Final

from bus.core.errors import StageError
from bus.core.subjects import TOKEN_RE


class Stage(enum.StrEnum):
    """The stages the kernel knows by name; plain strings work for any other stage."""

    TOOL_CALL = "tool.call"
    TOOL_RESULT = "tool.result"
    LLM_REQUEST = "llm.request"
    MEMORY_SAVE = "memory.save"


#: Stages whose veto acts on something that already happened.
_AFTER: Final = frozenset({Stage.TOOL_RESULT.value})

#: The payload field a matcher is compared with, per stage; ``name`` otherwise.
_MATCH_FIELD: Final = {Stage.LLM_REQUEST.value: "model", Stage.MEMORY_SAVE.value: "key"}


def validate_stage(stage: object) -> str:
    """Return the stage name as a plain str if it is valid, else raise StageError."""
    if not isinstance(stage, str) or not stage:
        raise StageError(stage, "a stage name must be a non-empty string")
    for token in stage.split("."):
        if not TOKEN_RE.fullmatch(token):
            raise StageError(stage, f"token {token!r} is not [A-Za-z0-9_-]+")
    return str(stage)


def phase(stage: str) -> str:
    """``result`` for stages that judge a done action (tool.result), else ``request``."""
    return "result" if stage in _AFTER else "request"


def match_field(stage: str) -> str:
    """The payload field a handler's ``match=`` names are compared with."""
    return _MATCH_FIELD.get(stage, "name")
