"""Edits to hooks.json from the HTTP API: read, change one hook, write atomically.

Every write goes through the same validator as the file and lands on disk
with :func:`subscribers.shell_hooks._hooks_file.write_atomic`; running workers pick it up
through their ordinary reload path. Each read-modify-write holds an exclusive
``flock`` on ``hooks.json.lock`` (in a thread, off the event loop), so that two
API calls never lose each other's change, in one process or in several.

A hook is named by hookbus's id or the PRX way (``event`` or ``event:n``); a
write in PRX's flat shape is applied as PRX applies it
(:mod:`subscribers.shell_hooks._prx_api`). Every other entry, and the file's
top-level fields, are written back exactly as they were read.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from bus._core.clock import now_timestamp
from bus._runtime.filelock import locked
from subscribers.shell_hooks._hooks_config import HookEntry, HooksConfig, parse_api_hook
from subscribers.shell_hooks._hooks_file import load, write_atomic
from subscribers.shell_hooks._prx_api import changed_entry, created_entry, is_prx_body

T = TypeVar("T")


class HooksStore:
    """hooks.json as a collection of hooks with ids."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._lock = asyncio.Lock()

    def read(self) -> HooksConfig:
        """The current file (HookConfigError if it is broken: fix it before editing through the API)."""
        return load(self.path)

    async def _edit(self, change: Callable[[HooksConfig], tuple[HooksConfig, T]]) -> T:
        """Apply ``change`` to the current file and save the configuration it returns, under both locks."""

        def locked_edit() -> T:
            with locked(self.lock_path):
                config, result = change(self.read())
                write_atomic(self.path, config)
                return result

        async with self._lock:
            return await asyncio.to_thread(locked_edit)

    async def create(self, body: Any) -> HookEntry:
        """Add a hook (hookbus's shape or PRX's flat one) at the end of its event's list."""

        def change(config: HooksConfig) -> tuple[HooksConfig, HookEntry]:
            hook_id = _new_id({e.id for e in config.entries})
            if is_prx_body(body):
                entry = created_entry(config, body, hook_id)
            else:
                entry = parse_api_hook(body, hook_id=hook_id, default_timeout_ms=config.timeout_ms)
                entry = replace(entry, key=config.key_for(entry.event))
            new = config.rebuilt([*config.items(), (entry.key, entry.fields)])
            return new, _last_of(new, entry.key)

        return await self._edit(change)

    async def update(self, hook_id: str, body: Any) -> HookEntry:
        """Replace a hook (hookbus's shape), or change the fields given (PRX's flat shape)."""

        def change(config: HooksConfig) -> tuple[HooksConfig, HookEntry]:
            index, _ = config.locate(hook_id)
            old = config.entries[index]
            if is_prx_body(body):
                entry = changed_entry(config, old, body)
            else:
                given = {**body, "enabled": old.enabled} if isinstance(body, dict) and "enabled" not in body else body
                entry = parse_api_hook(
                    given, hook_id=old.id, created_at=old.created_at, default_timeout_ms=config.timeout_ms
                )
                entry = replace(entry, key=old.key if entry.event == old.event else config.key_for(entry.event))
            items = config.items()
            if entry.key == old.key:
                items[index] = (entry.key, entry.fields)
                new = config.rebuilt(items)
                return new, new.entries[index]
            del items[index]  # a new event: to the end of that event's list, as PRX does
            new = config.rebuilt([*items, (entry.key, entry.fields)])
            return new, _last_of(new, entry.key)

        return await self._edit(change)

    async def delete(self, hook_id: str) -> bool:
        """Remove a hook; whether it was named the PRX way (``event`` or ``event:n``)."""

        def change(config: HooksConfig) -> tuple[HooksConfig, bool]:
            index, by_prx_id = config.locate(hook_id)
            items = config.items()
            del items[index]
            return config.rebuilt(items), by_prx_id

        return await self._edit(change)

    async def toggle(self, hook_id: str) -> tuple[HookEntry, bool]:
        """Flip one hook's ``enabled``; the hook, and whether it was named the PRX way."""

        def change(config: HooksConfig) -> tuple[HooksConfig, tuple[HookEntry, bool]]:
            index, by_prx_id = config.locate(hook_id)
            old = config.entries[index]
            fields = {**old.fields, "enabled": not old.enabled}
            if "created_at" in fields or "updated_at" in fields:
                fields["updated_at"] = now_timestamp()
            items = config.items()
            items[index] = (old.key, fields)
            new = config.rebuilt(items)
            return new, (new.entries[index], by_prx_id)

        return await self._edit(change)


def _last_of(config: HooksConfig, key: str) -> HookEntry:
    return [entry for entry in config.entries if entry.key == key][-1]


def _new_id(taken: set[str]) -> str:
    while True:
        hook_id = f"hook_{secrets.token_hex(5)}"
        if hook_id not in taken:
            return hook_id
