"""Middleware stages: the points where the kernel waits for handlers' decisions.

A stage name is dotted (``tool.call``); the four Eva stages and the agent_os
points the reference runner asks (docs/stages.md, field by field) are typed
members of :class:`Stage`, and any other valid name works too (a user-declared
stage).
Each stage has a phase (the journal's ``request``, before the action, or
``result``, judging a done one) and a field a handler's matcher is compared
with.
"""

from __future__ import annotations

import enum
from typing import Final

from bus._core.errors import StageError
from bus._core.subjects import TOKEN_RE


class Stage(enum.StrEnum):
    """The stages the kernel knows by name; plain strings work for any other stage."""

    TOOL_CALL = "tool.call"
    TOOL_RESULT = "tool.result"
    TOOL_LIST = "tool.list"
    RESOURCE_READ = "resource.read"
    LLM_REQUEST = "llm.request"
    MEMORY_SAVE = "memory.save"
    LLM_RETRY = "llm.retry"
    LLM_TOKEN = "llm.token"
    TOOL_EXEC = "tool.exec"
    CONTEXT_EVICT = "context.evict"
    USER_MESSAGE = "user.message"
    ASSISTANT_MESSAGE = "assistant.message"
    TURN_END = "turn.end"
    AGENT_SPAWN = "agent.spawn"
    AGENT_TERMINATE = "agent.terminate"
    TURN_DONE = "turn.done"
    LOOP_END = "loop.end"
    TURN_AFTER = "turn.after"
    AGENT_ERROR = "agent.error"


#: What each known stage is for, one line (``hookbus events``, ``hookbus chain``; docs/stages.md has the fields).
DESCRIPTIONS: Final = {
    Stage.TOOL_CALL.value: "before a tool runs: cancel refuses it, patch changes input or supplies result",
    Stage.TOOL_RESULT.value: "after a tool ran: cancel hides the output with the reason, patch rewrites it",
    Stage.TOOL_LIST.value: "a tool an MCP server lists (hookbus mcp): cancel leaves it out of tools/list",
    Stage.RESOURCE_READ.value: "before an MCP resource is read (hookbus mcp): cancel refuses the read",
    Stage.LLM_REQUEST.value: "before every model call (retries too): patch the request or supply result",
    Stage.MEMORY_SAVE.value: "before a memory is stored",
    Stage.LLM_RETRY.value: "a transient model error is about to be retried: patch delay_s or model, cancel fails",
    Stage.LLM_TOKEN.value: "each streamed chunk: patch changes only what the client is streamed",
    Stage.TOOL_EXEC.value: "the tool-execution boundary (before_syscall): the resolved command about to run",
    Stage.CONTEXT_EVICT.value: "the context window overflowed: patch supplies the summary kept",
    Stage.USER_MESSAGE.value: "an incoming user message: patch rewrites it, cancel rejects it",
    Stage.ASSISTANT_MESSAGE.value: "the final answer before it enters the context: cancel, answer or rework",
    Stage.TURN_END.value: "a turn ended: patch replaces the answer returned, cancel fails the turn",
    Stage.AGENT_SPAWN.value: "a turn is about to start on an agent: cancel refuses it",
    Stage.AGENT_TERMINATE.value: "a turn's agent loop ended (observed; decisions are journaled)",
    Stage.TURN_DONE.value: "the model called job_done: cancel or rework hands the correction back as its result",
    Stage.LOOP_END.value: "the agent loop ended with an answer (after_loop; observed)",
    Stage.TURN_AFTER.value: "a turn completed: its question and settled answer (after_turn; observed)",
    Stage.AGENT_ERROR.value: "a turn failed: the error, before the error event (on_error; observed)",
}

#: Stages whose veto acts on something that already happened.
_AFTER: Final = frozenset(
    stage.value
    for stage in (
        Stage.TOOL_RESULT,
        Stage.ASSISTANT_MESSAGE,
        Stage.TURN_END,
        Stage.AGENT_TERMINATE,
        Stage.TURN_DONE,
        Stage.LOOP_END,
        Stage.TURN_AFTER,
        Stage.AGENT_ERROR,
    )
)

#: The payload field a matcher is compared with, per stage; ``name`` otherwise.
_MATCH_FIELD: Final = {
    Stage.LLM_REQUEST.value: "model",
    Stage.MEMORY_SAVE.value: "key",
    Stage.LLM_RETRY.value: "model",
    **{
        stage.value: "agent"
        for stage in (
            Stage.LLM_TOKEN,
            Stage.CONTEXT_EVICT,
            Stage.USER_MESSAGE,
            Stage.ASSISTANT_MESSAGE,
            Stage.TURN_END,
            Stage.AGENT_SPAWN,
            Stage.AGENT_TERMINATE,
            Stage.TURN_DONE,
            Stage.LOOP_END,
            Stage.TURN_AFTER,
            Stage.AGENT_ERROR,
        )
    },
}


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
