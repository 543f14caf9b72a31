"""Errors of the shell hooks: hooks.json and the hooks the HTTP API writes, and the sandbox they run in.

The tree (under :mod:`bus._core.errors`)::

    ConfigError
    └── HookConfigError        hooks.json (or an API write) breaks the hooks format
    HookbusError
    └── HookNotFound           no hook has this id (also LookupError)
"""

from __future__ import annotations

from bus._core.errors import ConfigError, HookbusError


class HookConfigError(ConfigError, ValueError):
    """hooks.json, or a hook written through the HTTP API, breaks the hooks format.

    ``file`` is the file (None for an API body), ``entry`` the entry's place
    (``hooks.tool_call[0]``) and ``field`` the offending field, when known.
    """

    def __init__(
        self, reason: str, *, file: str | None = None, entry: str | None = None, field: str | None = None
    ) -> None:
        self.reason = reason
        self.file = file
        self.entry = entry
        self.field = field
        where = ".".join(part for part in (entry, field) if part)
        prefix = ": ".join(part for part in (file, where) if part)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


class HookNotFound(HookbusError, LookupError):
    """No hook has this id."""

    def __init__(self, hook_id: str) -> None:
        self.hook_id = hook_id
        super().__init__(f"no hook with id {hook_id!r}")
