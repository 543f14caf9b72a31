"""claude-hooks.json as types, in Claude Code's settings format, with hookbus's own ``hookbus`` part."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus._runtime.config_types import NonEmpty

#: Seconds a Claude Code command hook may run (its default, and the most a claude-hooks.json may give one).
CLAUDE_HOOK_TIMEOUT = 60.0
CLAUDE_HOOK_MAX_TIMEOUT = 600.0


class ClaudeHookCommand(msgspec.Struct, kw_only=True, frozen=True):
    """One hook of a claude-hooks.json matcher group (hookbus runs ``command`` hooks; other fields are ignored).

    ``onFailure``: ``block`` (a hook that cannot run or fails refuses the call) or ``continue``; unset, the
    file's ``hookbus.onFailure`` or the event's default decides.
    """

    type: NonEmpty
    command: NonEmpty | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0, le=CLAUDE_HOOK_MAX_TIMEOUT)] = CLAUDE_HOOK_TIMEOUT
    on_failure: Literal["block", "continue"] | None = msgspec.field(default=None, name="onFailure")


class ClaudeMatcherGroup(msgspec.Struct, kw_only=True, frozen=True):
    """A matcher group: the tool names it applies to (exact names, a regular expression, ``*`` or empty: all)."""

    matcher: str | None = ""
    hooks: list[ClaudeHookCommand]


class ClaudeHooksOptions(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """hookbus's own part of claude-hooks.json (``"hookbus": {...}``; Claude Code ignores it)."""

    #: The HOME the hooks get (and ``~`` stands for); unset: the worker's home.
    home: NonEmpty | None = None
    #: The fail mode of every hook of the file that does not say its own.
    on_failure: Literal["block", "continue"] | None = msgspec.field(default=None, name="onFailure")


class ClaudeHooksFile(msgspec.Struct, kw_only=True, frozen=True):
    """claude-hooks.json (workspace), in Claude Code's settings format: ``{"hooks": {event: [group, ...]}}``.

    A whole ``.claude/settings.json`` or a plugin's ``hooks/hooks.json`` is one too: only ``hooks`` (and
    ``hookbus``) are read, the rest is ignored.
    """

    hooks: dict[NonEmpty, list[ClaudeMatcherGroup]] = {}
    hookbus: ClaudeHooksOptions = ClaudeHooksOptions()
