"""Typed payloads of the known stages, with ``rest`` for fields the SDK does not know.

A handler that annotates its payload parameter with one of these dataclasses
gets it built from the wire dict; ``Patch`` accepts it back. Fields this SDK
version does not know travel in ``rest`` and are written back untouched, so a
typed patch never loses what a newer kernel sent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class ToolCall:
    """tool.call: the tool's stable hook form of the call."""

    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    rest: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolResult:
    """tool.result: what the tool returned."""

    name: str = ""
    output: str = ""
    is_error: bool = False
    rest: dict[str, Any] = field(default_factory=dict)


@dataclass
class LlmRequest:
    """llm.request: the request about to go to the model provider."""

    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    rest: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemorySave:
    """memory.save: a memory about to be stored."""

    key: str = ""
    content: str = ""
    rest: dict[str, Any] = field(default_factory=dict)


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
        out = {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload) if f.name != "rest"}
        rest = getattr(payload, "rest", None) or {}
        return {**rest, **out}
    raise TypeError(f"a patch payload must be a dict or a typed payload, not {type(payload).__name__}")
