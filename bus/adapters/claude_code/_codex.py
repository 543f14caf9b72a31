"""Codex sessions on the bus: Codex's hook inputs take Claude Code's mapping, its output its own rules.

Codex speaks Claude Code's command-hook protocol (its inputs add ``turn_id``
and ``model``) with a stricter output parser: an output it cannot apply fails
the hook, and a failed hook lets the tool run. So every answer here is one
Codex accepts:

- a refusal is ``permissionDecision: "deny"`` with a non-empty reason;
- a changed input is ``permissionDecision: "allow"`` with ``updatedInput``
  (Codex applies it and requires the two together);
- an allowed call is no output at all (Codex's own approval flow applies);
- ``ask`` is never written (Codex refuses it, and the tool would run): a
  decision Codex cannot express is a refusal naming it.

Codex's own events beyond Claude Code's first five: ``PermissionRequest``
runs the ``tool.call`` chain again on the call Codex is about to ask a human
about (a refusal is ``behavior: "deny"``; ``updatedInput`` is reserved by
Codex there, so a changed input is refused too), ``PostCompact``,
``SubagentStart`` and ``StopFailure`` become events.

:func:`matches` is Codex's matcher rule (codex-rs ``matches_matcher``), for
Codex hook files served as handlers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

import orjson

from bus.adapters.claude_code._mapping import ClaudeCodeDialect, HookAnswer, Step, plan

if TYPE_CHECKING:
    from bus._core.decisions import Decision
    from bus.adapters._schema import AgentHookInput

#: The agent name intercepts and events of a Codex session carry.
CODEX: Final = "codex"
#: The hook events ``hookbus codex-hook install`` configures (those Codex documents).
INSTALLED_EVENTS: Final = (
    "SessionStart",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "PostCompact",
    "SubagentStart",
    "StopFailure",
)
#: Codex's events without a stage, and the event each becomes.
_EVENTS: Final = {
    "PostCompact": "eva.custom.post_compact",
    "SubagentStart": "prx.lifecycle.agent_start",
    "StopFailure": "prx.lifecycle.turn_complete",
}
#: The events whose matcher Codex reads (others ignore theirs).
MATCHED_EVENTS: Final = frozenset({"PreToolUse", "PermissionRequest", "PostToolUse", "SessionStart"})
_EXACT: Final = re.compile(r"[A-Za-z0-9_|]*")


class CodexDialect(ClaudeCodeDialect):
    """Decisions in the output Codex's parser accepts (see the module docstring)."""

    name: str = CODEX
    agent: str = CODEX

    def plan(self, hook: AgentHookInput) -> Step:
        event = hook.hook_event_name
        if event == "PermissionRequest":
            pre = plan(_as_pre_tool_use(hook), self.agent)
            return Step(event, pre.stage, pre.payload)  # the call's start was emitted at its PreToolUse
        subject = _EVENTS.get(event)
        if subject is None:
            return plan(hook, self.agent)
        payload: dict[str, Any] = {"agent": self.agent, "session": hook.session_id}
        if hook.cwd is not None:
            payload["cwd"] = hook.cwd
        if event == "SubagentStart":
            payload.update(subagent=_str(hook.agent_id), agent_type=_str(hook.agent_type), model=hook.model)
        elif event == "StopFailure":
            payload.update(success=False, error=_str(hook.error), error_details=_str(hook.error_details))
        else:
            payload.update(trigger=hook.trigger, model=hook.model)
        payload = {key: value for key, value in payload.items() if value is not None}
        return Step(event, events=((subject, payload),), always=True)

    def deny(self, event: str, reason: str) -> HookAnswer:
        reason = reason.strip() or "hookbus: refused"  # Codex fails a deny without a non-empty reason
        if event == "PermissionRequest":
            decision = {"behavior": "deny", "message": reason}
            return HookAnswer(output={"hookSpecificOutput": {"hookEventName": event, "decision": decision}})
        return super().deny(event, reason)

    def updated_input(self, tool_input: dict[str, Any]) -> HookAnswer:
        specific = {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": tool_input}
        return HookAnswer(output={"hookSpecificOutput": specific})

    def answer(self, step: Step, decision: Decision) -> HookAnswer:
        from bus._core.decisions import Cancel, Continue, Patch

        if step.stage is not None and not isinstance(decision, Cancel | Continue | Patch):
            # ask, defer or any decision Codex has no output for: refused, never let through
            kind = type(decision).__name__.lower()
            return self.deny(step.event, f"hookbus: a guard asked for '{kind}', which Codex cannot ask; refused")
        if step.event == "PermissionRequest" and isinstance(decision, Patch):
            changed = decision.payload.get("input")
            if decision.payload.get("result") is not None or changed != step.payload["input"]:
                text = orjson.dumps(changed).decode() if isinstance(changed, dict) else "no input"
                return self.deny(step.event, f"hookbus: a guard changed this call's input to {text}; refused")
            return HookAnswer()
        return super().answer(step, decision)


def _str(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else orjson.dumps(value).decode()


def _as_pre_tool_use(hook: AgentHookInput) -> AgentHookInput:
    import msgspec

    return msgspec.structs.replace(hook, hook_event_name="PreToolUse")


def matcher_for(event: str, matcher: str | None) -> str | None:
    """The matcher Codex applies on ``event`` (None: every occurrence; events without matchers drop theirs)."""
    return matcher if event in MATCHED_EVENTS else None


def valid_matcher(matcher: str) -> bool:
    """Whether Codex loads a hook with ``matcher`` (a literal or ``*``, or a regular expression that compiles)."""
    if matcher in ("", "*") or _EXACT.fullmatch(matcher):
        return True
    try:
        re.compile(matcher)
    except re.error:
        return False
    return True


def matches(matcher: str | None, name: str | None) -> bool:
    """Codex's rule: none, ``""`` or ``*`` match all; names and ``A|B`` exactly; anything else a regex search."""
    if matcher is None or matcher in ("", "*"):
        return True
    if name is None:
        return False
    if _EXACT.fullmatch(matcher):
        return name in matcher.split("|")
    try:
        return re.search(matcher, name) is not None
    except re.error:
        return False


def event_label(event: str) -> str:
    """Codex's key label of a hook event (``PreToolUse`` -> ``pre_tool_use``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def hook_hash(
    event: str, command: str, timeout: int | None = None, matcher: str | None = None, status_message: str | None = None
) -> str:
    """The hash Codex trusts a command hook by: sha256 of its normalized identity as sorted compact JSON.

    The identity is the event's label, the matcher Codex applies (absent when none) and the one handler with its
    timeout as Codex normalizes it (600 seconds when unset, at least 1). A hook whose hash differs from the
    ``trusted_hash`` Codex keeps for it is "modified" and not run until trusted again.
    """
    import hashlib

    handler: dict[str, Any] = {"type": "command", "command": command, "timeout": max(timeout or 600, 1)}
    handler["async"] = False
    if status_message is not None:
        handler["statusMessage"] = status_message
    identity: dict[str, Any] = {"event_name": event_label(event), "hooks": [handler]}
    applied = matcher_for(event, matcher)
    if applied is not None:
        identity["matcher"] = applied
    canonical = orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def hook_key(hooks_file: str, event: str, group: int, handler: int) -> str:
    """The key of a hook's state (``[hooks.state."<key>"]`` in Codex's config.toml)."""
    return f"{hooks_file}:{event_label(event)}:{group}:{handler}"


def trust_entries(hooks_file: str, hooks: dict[str, Any], is_ours: Any) -> list[tuple[str, str]]:
    """(key, trusted hash) of every hook of ``hooks`` (a hooks.json ``hooks`` object) that ``is_ours`` picks."""
    found = []
    for event, groups in hooks.items():
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            if not isinstance(group, dict):
                continue
            for h, hook in enumerate(group.get("hooks") or []):
                if is_ours(hook) and isinstance(hook.get("command"), str):
                    digest = hook_hash(event, hook["command"], hook.get("timeout"), group.get("matcher"))
                    found.append((hook_key(hooks_file, event, g, h), digest))
    return found
