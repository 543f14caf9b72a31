"""PRX's shapes of a hooks API write, beside hookbus's own: flat, as PRX's web console sends them.

A create is ``{"event", "command", "args"?, "timeout_ms"?}``; a change gives
any of those, and the ones given (not null) replace the hook's (declared as
``PrxHookBody`` and ``PrxHookChange`` in :mod:`subscribers.shell_hooks._config_schema`). The
command is trimmed, as PRX does. What is written takes the shape of the file:
in a plain PRX file, PRX's action fields with ``"stdin_json": true`` (what
PRX's API writes); in a file whose entries carry ids, hookbus's full shape.
The security rules are the API's (:func:`checked_for_api`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bus._core.clock import now_timestamp
from subscribers.shell_hooks._config_schema import PrxHookBody, PrxHookChange
from subscribers.shell_hooks._hooks_config import (
    HookEntry,
    HooksConfig,
    checked_for_api,
    make_entry,
    read_key,
    to_schema,
)


def is_prx_body(body: object) -> bool:
    """Whether a write is in PRX's flat shape: an object without hookbus's ``action``."""
    return isinstance(body, dict) and "action" not in body


def created_entry(config: HooksConfig, body: object, hook_id: str) -> HookEntry:
    """The hook a PRX-shaped create adds to ``config`` (``hook_id`` if the file keeps ids)."""
    doc = to_schema(body, PrxHookBody)
    event, pattern = read_key(doc.event, [], field="event")
    fields: dict[str, Any] = {
        "command": doc.command.strip(),
        "args": doc.args,
        "env": {},
        "cwd": None,
        "timeout_ms": doc.timeout_ms,
        "stdin_json": True,
    }
    entry = make_entry(config.key_for(event), event, pattern, fields, config.timeout_ms)
    if config.uses_ids:
        stamp = now_timestamp()
        entry = replace(entry, id=hook_id, created_at=stamp, updated_at=stamp)
        entry = replace(entry, fields=entry.hookbus_fields())
    return checked_for_api(entry)


def changed_entry(config: HooksConfig, old: HookEntry, body: object) -> HookEntry:
    """``old`` with a PRX-shaped change applied; a new event moves it to that event's key."""
    doc = to_schema(body, PrxHookChange)
    fields = dict(old.fields)
    if doc.command is not None:
        fields["command"] = doc.command.strip()
    if doc.args is not None:
        fields["args"] = doc.args
    if doc.timeout_ms is not None:
        fields["timeout_ms"] = doc.timeout_ms
    if "created_at" in fields or "updated_at" in fields:
        fields["updated_at"] = now_timestamp()
    event, pattern = (old.event, old.pattern) if doc.event is None else read_key(doc.event, [], field="event")
    key = old.key if event == old.event else config.key_for(event)
    return checked_for_api(make_entry(key, event, pattern, fields, config.timeout_ms))
