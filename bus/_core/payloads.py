"""Typed payloads of the known stages, with ``rest`` for fields the SDK does not know.

A handler that annotates its payload parameter with one of these dataclasses
gets it built from the wire dict; ``Patch`` accepts it back. Fields this SDK
version does not know travel in ``rest`` and are written back untouched, so a
typed patch never loses what a newer kernel sent. Fields only a patch sets
(``result``, ``answer``, ``rework``) are left out of the wire dict while None,
so a typed handler that does not set them sends no such key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

T = TypeVar("T")


#: Metadata of a field a handler sets only to decide (a cached result, a rework): absent from the wire while None.
_PATCH_ONLY: Final = {"patch_only": True}


@dataclass
class _Payload:
    """What every typed payload carries: ``rest``, the fields this SDK does not know, written back untouched."""

    rest: dict[str, Any] = field(default_factory=dict, kw_only=True)


@dataclass
class _TurnPayload(_Payload):
    """A payload of a stage inside an agent's turn: the agent and the turn it belongs to."""

    agent: str = ""
    turn: str = ""


@dataclass
class ToolCall(_Payload):
    """tool.call: the tool's stable hook form of the call; a patch with ``result`` short-circuits the tool."""

    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    result: str | None = field(default=None, metadata=_PATCH_ONLY)


@dataclass
class ToolResult(_Payload):
    """tool.result: what the tool returned."""

    name: str = ""
    output: str = ""
    is_error: bool = False


@dataclass
class LlmRequest(_Payload):
    """llm.request: the request about to go to the model provider; a patch with ``result`` skips the model."""

    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    result: str | dict[str, Any] | None = field(default=None, metadata=_PATCH_ONLY)


@dataclass
class LlmRetry(_Payload):
    """llm.retry: a transient model error about to be retried; a patch may change ``delay_s`` or ``model``."""

    model: str = ""
    attempt: int = 0
    max_attempts: int = 0
    error: str = ""
    delay_s: float = 0.0
    during: str = "connect"


@dataclass
class LlmToken(_TurnPayload):
    """llm.token: one streamed chunk (or a batch of them); a patch changes only what the client is streamed."""

    text: str = ""
    index: int = 0
    final_answer: bool = True
    replace: bool = False


@dataclass
class ToolExec(_Payload):
    """tool.exec: the resolved command at the runner's tool-execution boundary (agent_os's before_syscall)."""

    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)


@dataclass
class ContextEvict(_TurnPayload):
    """context.evict: the messages about to leave the context window; a patch supplies the ``summary`` kept."""

    evicted: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""
    tokens: int = 0
    window_tokens: int = 0


@dataclass
class UserMessage(_TurnPayload):
    """user.message: the incoming message; a patch rewrites ``content``, a cancel rejects it."""

    content: str = ""


@dataclass
class AssistantMessage(_TurnPayload):
    """assistant.message: the final answer; cancel suppresses, a patch sets ``answer`` or asks ``rework``."""

    content: str = ""
    round: int = 0
    answer: str | None = field(default=None, metadata=_PATCH_ONLY)
    rework: str | None = field(default=None, metadata=_PATCH_ONLY)


@dataclass
class TurnEnd(_TurnPayload):
    """turn.end: the turn is done; a patch may replace ``answer``, a cancel fails the turn."""

    answer: str = ""
    rounds: int = 0
    messages_count: int = 0


@dataclass
class AgentSpawn(_TurnPayload):
    """agent.spawn: a turn is about to start on an agent; a cancel refuses it."""

    trigger: str | None = None
    depth: int = 0


@dataclass
class AgentTerminate(_TurnPayload):
    """agent.terminate: a turn's agent loop ended, successfully or not."""

    success: bool = True
    error: str | None = None


@dataclass
class TurnDone(_TurnPayload):
    """turn.done: the model called job_done; a cancel or a patch with ``rework`` hands the correction back."""

    result: str = ""
    round: int = 0
    rework: str | None = field(default=None, metadata=_PATCH_ONLY)


@dataclass
class LoopEnd(_TurnPayload):
    """loop.end: the agent loop ended with an answer (agent_os's after_loop); observed."""

    reason: str = "answer"
    rounds: int = 0


@dataclass
class TurnAfter(_TurnPayload):
    """turn.after: a turn completed with its settled answer (agent_os's after_turn); observed."""

    question: str = ""
    answer: str = ""
    rounds: int = 0


@dataclass
class AgentError(_TurnPayload):
    """agent.error: a turn failed (agent_os's on_error); observed, before the ``error`` event."""

    error: str = ""
    component: str = "agent"


@dataclass
class MemorySave(_Payload):
    """memory.save: a memory about to be stored."""

    key: str = ""
    content: str = ""


def is_typed(cls: object) -> bool:
    """Whether ``cls`` is a payload dataclass with a ``rest`` field."""
    return (
        isinstance(cls, type) and dataclasses.is_dataclass(cls) and "rest" in {f.name for f in dataclasses.fields(cls)}
    )


def from_dict(cls: type[T], payload: dict[str, Any]) -> T:
    """Build ``cls`` from a wire payload; unknown fields go to ``rest``."""
    known = {f.name for f in dataclasses.fields(cls)} - {"rest"}  # type: ignore[arg-type]
    args = {key: value for key, value in payload.items() if key in known}
    rest = {key: value for key, value in payload.items() if key not in known}
    build: Any = cls  # a dataclass with a rest field (checked by is_typed)
    return build(**args, rest=rest)  # type: ignore[no-any-return]


def to_dict(payload: Any) -> dict[str, Any]:
    """The wire dict of a payload: a dict as is, a typed payload with ``rest`` merged back."""
    if isinstance(payload, dict):
        return payload
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        out = {
            f.name: getattr(payload, f.name)
            for f in dataclasses.fields(payload)
            if f.name != "rest" and not (f.metadata.get("patch_only") and getattr(payload, f.name) is None)
        }
        rest = getattr(payload, "rest", None) or {}
        return {**rest, **out}
    raise TypeError(f"a patch payload must be a dict or a typed payload, not {type(payload).__name__}")
