"""hooks.json and the hooks the HTTP APIs write, as types: each entry with its fields and their bounds.

Rules that need code (event keys, duplicate ids) stay in :mod:`subscribers.shell_hooks._hooks_config`.
"""

from __future__ import annotations

import msgspec

from bus._runtime.config_types import Name, TimeoutMs
from bus._sandbox.config_schema import IsolationField

#: A shell hook's timeout when neither its action nor the file gives one (PRX's documented default).
HOOK_TIMEOUT_MS = 30_000


class ShellAction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a shell hook runs: PRX's action fields. ``null`` means the default, as in PRX's files."""

    command: str
    args: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    timeout_ms: TimeoutMs | None = None  # null: the file's timeout_ms, else HOOK_TIMEOUT_MS
    stdin_json: bool | None = None
    isolation: IsolationField = None  # null: the file's isolation, else none


class ShellHook(ShellAction, kw_only=True):
    """One entry of hooks.json: the action plus the fields hookbus's HTTP API manages."""

    id: Name | None = None
    enabled: bool | None = None
    created_at: str | None = None
    updated_at: str | None = None


class ShellHooksFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """hooks.json's top level. Keys and entries are checked one by one (to name them) by the loader."""

    hooks: dict[str, object] = {}
    enabled: bool | None = None  # PRX's switch for the whole file; null: on
    timeout_ms: TimeoutMs | None = None  # the default of actions without their own; null: HOOK_TIMEOUT_MS
    isolation: IsolationField = None  # the default of actions without their own; null: none


class ShellHookBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A hook written through hookbus's HTTP API: ``{event, action, enabled}``.

    The other fields of a listed hook may be sent back and are ignored: the id
    comes from the path, the timestamps and the flat ``command``/``timeout_ms``
    from the stored hook and its action.
    """

    event: str
    action: object  # a ShellAction, checked apart to be named ``action``
    enabled: bool | None = None
    id: object = None
    created_at: object = None
    updated_at: object = None
    command: object = None
    timeout_ms: object = None


class PrxHookBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A hook created through PRX's HTTP API shape: flat, as PRX's web console sends it."""

    event: str
    command: str
    args: list[str] = []
    timeout_ms: TimeoutMs | None = None


class PrxHookChange(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A change through PRX's HTTP API shape: the fields given (not null) replace the hook's."""

    event: str | None = None
    command: str | None = None
    args: list[str] | None = None
    timeout_ms: TimeoutMs | None = None
