"""What agent hooks send and the relay carries, as wire types: a hook's input, a relayed request and reply."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from bus._core.middleware_schema import RequestDepth


class AgentHookInput(msgspec.Struct, kw_only=True):
    """A Claude Code or Codex hook input, as their hook documentation describes it (docs/integrations.md).

    Only what hookbus maps is typed; other fields are ignored. Each field is
    checked when present (``tool_input`` an object, ``session_id`` a string ...).
    """

    hook_event_name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    session_id: str | None = None
    cwd: str | None = None
    transcript_path: str | None = None
    permission_mode: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    tool_response: Any = None
    error: Any = None  # Claude Code's PostToolUseFailure, Codex's StopFailure: untyped, as the fields below
    prompt: str | None = None
    source: str | None = None
    reason: str | None = None
    trigger: str | None = None
    stop_hook_active: bool | None = None
    turn_id: str | None = None
    model: str | None = None
    # Codex's SubagentStart / StopFailure and Gemini CLI's model hooks; untyped so that an agent sending
    # another shape for a field hookbus only reports never makes the whole input unreadable.
    agent_id: Any = None
    agent_type: Any = None
    error_details: Any = None
    llm_request: Any = None
    llm_response: Any = None


AdapterFlavor = Literal["claude-code", "codex", "gemini"]


class AdapterRequestMsg(msgspec.Struct, kw_only=True):
    """A hook input relayed to ``hookbus up`` on ``hookbus.adapter.<flavor>.<user>``.

    Sent by ``hookbus claude-hook`` / ``codex-hook``.
    """

    input: dict[str, Any]
    depth: RequestDepth = 0
    #: What a handler's ask becomes: held for an operator (``fleet``), or the agent's own ``ask`` (``terminal``).
    asks: Literal["fleet", "terminal"] = "fleet"


class AdapterReplyMsg(msgspec.Struct, kw_only=True):
    """What the agent's hook command does: exit with ``exit_code``, print ``output`` (JSON) and ``stderr``.

    ``fail_closed`` names, per stage, the trusted fail-closed handlers in force:
    the command remembers it for when the bus cannot be reached. ``error``
    instead of an answer: the input was refused (it names the field).
    """

    exit_code: Annotated[int, msgspec.Meta(ge=0, le=2)] = 0
    output: dict[str, Any] | None = None
    stderr: Annotated[str, msgspec.Meta(max_length=65536)] = ""
    fail_closed: dict[str, list[str]] = {}
    error: str | None = None
