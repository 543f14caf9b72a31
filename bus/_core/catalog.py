"""The event catalog: the events hookbus knows by name, with their payload fields.

The bus is open: any valid subject may carry any JSON object. The catalog is
documentation for ``hookbus events`` and, in strict mode, a check that a
catalogued event's payload has its fields with the right JSON types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bus._core.errors import CatalogError, SubjectError
from bus._core.json_types import json_type
from bus._core.subjects import EVA_DOMAIN, PRX_DOMAIN, PRX_EVENTS, event_name, is_internal

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "boolean": (bool,),
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
                raise CatalogError(self.subject, f"field {name!r} must be {kind}, not {json_type(value)}")


_PRX = {
    "agent_start": ("the agent loop starts a new turn", {"agent": "string", "session": "string"}),
    "agent_end": ("the agent loop ends a turn", {"success": "boolean", "messages_count": "number"}),
    "llm_request": (
        "before a request is sent to the LLM provider",
        {"provider": "string", "model": "string", "messages_count": "number"},
    ),
    "llm_response": (
        "after the LLM answered",
        {"provider": "string", "model": "string", "duration_ms": "number", "success": "boolean"},
    ),
    "tool_call_start": ("before a tool runs", {"tool": "string", "arguments": "object"}),
    "tool_call": ("after a tool ran", {"tool": "string", "success": "boolean", "output": "string"}),
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
    "spend.day": "the day's spend was totalled (payload: agent, day, total in USD, tokens, calls)",
    "budget.threshold": "a budget layer's key crossed warn_at or reached max, once per key, kind and day "
    "(payload: agent, level (the layer), kind (warn|exhausted), key, spent, max, ratio, unit, day; layer: deprecated)",
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
    f"{EVA_DOMAIN}.stream.<agent>": "an agent's streamed answer, batch by batch (llm.token; docs/stages.md)",
}


def check_strict(subject: str, payload: Mapping[str, Any]) -> None:
    """Strict mode: validate the payload of a catalogued subject; others pass."""
    spec = CATALOG.get(subject)
    if spec is not None:
        spec.check(payload)


# -- names checked where they are typed: hookbus emit, hooks.json keys, triggers.yaml's "on"

#: Families whose last tokens are free: ``eva.custom.<name>`` and ``eva.skill.<name>``.
_FREE_PREFIXES: Final = (f"{EVA_DOMAIN}.custom.", f"{EVA_DOMAIN}.skill.", f"{EVA_DOMAIN}.stream.")
#: How alike two names must be (difflib's ratio) for one to be offered as what the other meant.
_CUTOFF: Final = 0.8


def is_catalogued(subject: str) -> bool:
    """Whether ``subject`` is a catalogued event or in a family of free names (``eva.custom.<name>``)."""
    return subject in CATALOG or (subject.startswith(_FREE_PREFIXES) and subject.count(".") >= 2)


def _squeeze(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def closest(name: str, candidates: Iterable[str], cutoff: float = _CUTOFF) -> str | None:
    """The candidate ``name`` most probably misspells: equal but for case and separators, else the nearest.

    The one rule for "did you mean": emitted subjects, config keys and middleware stages use it.
    """
    pool = list(candidates)
    squeezed = _squeeze(name)
    for candidate in pool:
        if _squeeze(candidate) == squeezed:
            return candidate
    import difflib  # only on the way to an error or a warning

    found = difflib.get_close_matches(name, pool, n=1, cutoff=cutoff)
    return found[0] if found else None


def suggest_event(name: str) -> str | None:
    """The catalogued subject a name outside the catalogue most probably means, or None.

    ``tool.call`` -> ``prx.lifecycle.tool_call``; ``eva.custm.deploy`` ->
    ``eva.custom.deploy``; ``turn.completed`` -> ``eva.turn.completed``.
    """
    by_form: dict[str, str] = {}
    for subject in CATALOG:
        by_form.setdefault(subject, subject)
        by_form.setdefault(event_name(subject), subject)
    tokens = name.split(".")
    for prefix in _FREE_PREFIXES:  # the name as a member of a free family, in full and short form
        if len(tokens) >= 3:
            by_form.setdefault(prefix + ".".join(tokens[2:]), prefix + ".".join(tokens[2:]))
        if len(tokens) >= 2:
            by_form.setdefault(event_name(prefix + ".".join(tokens[1:])), prefix + ".".join(tokens[1:]))
    found = closest(name, by_form)
    return by_form[found] if found is not None else None


def suggest_stage(stage: str, declared: Iterable[str] = ()) -> str | None:
    """For a stage neither built in nor among ``declared``: the one it most probably misspells, or None."""
    from bus._core.stages import Stage  # the stages' module imports nothing of the catalogue's

    known = {member.value for member in Stage} | set(declared)
    if stage in known:
        return None
    return closest(stage, sorted(known))


def pattern_hint(pattern: str) -> str | None:
    """For ``hookbus tail`` and friends: a pattern with no wildcard that names no known event and looks
    like one (``tool_cal``, ``prx.lifecycle.tool_cal``), the event it probably means; else None."""
    if "*" in pattern or ">" in pattern or is_catalogued(pattern) or is_internal(pattern):
        return None
    if pattern in PRX_EVENTS:
        return f"{PRX_DOMAIN}.{pattern}"
    tokens = pattern.split(".")
    if len(tokens) >= 3 and tokens[0] not in (PRX_DOMAIN.split(".")[0], EVA_DOMAIN):
        return None  # another domain's subject (acme.build.done): free, not a typo of ours
    return suggest_event(pattern)


def name_problem(subject: str) -> str | None:
    """Why ``hookbus emit`` refuses ``subject`` without ``--any`` (naming what it probably meant), or None."""
    if is_catalogued(subject):
        return None
    for prefix in _FREE_PREFIXES:
        if subject == prefix[:-1]:
            return f"{subject} is a family, not an event: give it a name, {prefix}<name>"
    meant = suggest_event(subject)
    hint = f"; did you mean {meant}?" if meant else ""
    return f"not a catalogued event{hint} ('hookbus events' lists them; eva.custom.<name> is free; --any: any subject)"


def check_emitted(subject: str, *, free: bool = False) -> None:
    """Refuse (SubjectError) what ``hookbus emit`` should not send: plumbing always, unknown names unless ``free``."""
    if is_internal(subject):
        raise SubjectError(subject, "_INBOX., $ and hookbus. subjects carry NATS and hookbus plumbing, not events")
    problem = None if free else name_problem(subject)
    if problem is not None:
        raise SubjectError(subject, problem)


def warn_misspelt(key: str, where: str, into: list[str] | None = None) -> None:
    """Config loaders: warn when an event key names no known event but looks like one.

    The warning (``where: 'tool.call' matches no known event: did you mean
    prx.lifecycle.tool_call?``) goes to ``into`` when given (a loader that
    collects its warnings), else to the log. Wildcard patterns, other domains'
    subjects and names far from every catalogued event pass quietly: the bus is
    open, and a key for a free subject is legitimate.
    """
    if "*" in key or ">" in key or key in PRX_EVENTS or is_catalogued(key) or is_internal(key):
        return
    tokens = key.split(".")
    if len(tokens) >= 3 and tokens[0] not in (PRX_DOMAIN.split(".")[0], EVA_DOMAIN):
        return  # another domain's subject (acme.build.done): free, not a typo of ours
    meant = suggest_event(key)
    if meant is None:
        return
    text = f"{where}: {key!r} matches no known event: did you mean {meant}?"
    if into is not None:
        into.append(text)
        return
    import logging  # not at import: hookbus emit loads this module and never logs

    logging.getLogger("hookbus.catalog").warning("%s", text)
