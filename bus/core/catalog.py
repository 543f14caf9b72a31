"""The event catalog: the events hookbus knows by name, with their payload fields.

The bus is open: any valid subject may carry any JSON object. The catalog is
documentation for ``hookbus events`` and, in strict mode, a check that a
catalogued event's payload has its fields with the right JSON types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bus.core.errors import CatalogError
from bus.core.subjects import EVA_DOMAIN, PRX_DOMAIN, PRX_EVENTS

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "bool": (bool,),
    "object": (dict,),
}


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One catalogued event: its subject, when it fires, its payload fields."""

    subject: str
    description: str
    fields: Mapping[str, str] = field(default_factory=dict)

    def check(self, payload: Mapping[str, Any]) -> None:
        """Raise CatalogError if a declared field is missing or of the wrong JSON type."""
        for name, kind in self.fields.items():
            if name not in payload:
                raise CatalogError(self.subject, f"missing field {name!r} ({kind})")
            value = payload[name]
            ok = isinstance(value, _JSON_TYPES[kind])
            if kind == "number" and isinstance(value, bool):
                ok = False
            if not ok:
                raise CatalogError(self.subject, f"field {name!r} must be {kind}, not {type(value).__name__}")


_PRX = {
    "agent_start": ("the agent loop starts a new turn", {"agent": "string", "session": "string"}),
    "agent_end": ("the agent loop ends a turn", {"success": "bool", "messages_count": "number"}),
    "llm_request": (
        "before a request is sent to the LLM provider",
        {"provider": "string", "model": "string", "messages_count": "number"},
    ),
    "llm_response": (
        "after the LLM answered",
        {"provider": "string", "model": "string", "duration_ms": "number", "success": "bool"},
    ),
    "tool_call_start": ("before a tool runs", {"tool": "string", "arguments": "object"}),
    "tool_call": ("after a tool ran", {"tool": "string", "success": "bool", "output": "string"}),
    "turn_complete": ("a whole turn is done (all tools handled)", {}),
    "error": ("any error during execution", {"component": "string", "message": "string"}),
}
assert tuple(_PRX) == PRX_EVENTS

_EVA = {
    "turn.completed": "a turn finished",
    "turn.failed": "a turn failed",
    "cron.fired": "a scheduled job fired",
    "cron.failed": "a scheduled job failed",
    "message.silent": "the agent chose not to answer",
    "chat.created": "a chat was created",
    "chat.compacted": "a chat was compacted",
    "chat.reaped": "a chat was reaped",
    "memory.saved": "a memory was saved",
    "memory.forgotten": "a memory was forgotten",
    "module.attached": "a middleware module appeared (payload: module)",
    "module.detached": "a middleware module left the chain: gone fail-open, or detached by an operator "
    "(payload: module, reason; handlers when detached)",
    "mcp.server_down": "an MCP server went down",
    "mcp.server_up": "an MCP server came up",
    "broken.set": "a middleware chain is broken (cycle or dangling reference): its calls continue, "
    "or are cancelled if it holds a trusted fail-closed handler",
    "broken.cleared": "a disabled middleware chain works again",
    "spend.day": "the day's spend was totalled",
    "person.created": "a person was created",
}

CATALOG: dict[str, EventSpec] = {
    **{
        f"{PRX_DOMAIN}.{name}": EventSpec(f"{PRX_DOMAIN}.{name}", desc, fields) for name, (desc, fields) in _PRX.items()
    },
    **{f"{EVA_DOMAIN}.{name}": EventSpec(f"{EVA_DOMAIN}.{name}", desc) for name, desc in _EVA.items()},
}

#: Families the catalog describes by pattern rather than by name.
FAMILIES: dict[str, str] = {
    f"{EVA_DOMAIN}.skill.*": "skill events",
    f"{EVA_DOMAIN}.custom.<name>": "custom events from modules and the event_emit tool",
}


def check_strict(subject: str, payload: Mapping[str, Any]) -> None:
    """Strict mode: validate the payload of a catalogued subject; others pass."""
    spec = CATALOG.get(subject)
    if spec is not None:
        spec.check(payload)
