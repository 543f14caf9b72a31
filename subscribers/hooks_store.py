"""Edits to hooks.json from the HTTP API: read, change one hook, write atomically.

Every write goes through the same validator as the file and lands on disk
with :func:`subscribers.hooks_file.write_atomic`; running workers pick it up
through their ordinary reload path. Edits are serialised by a lock so that
two API calls never lose each other's change.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from bus.errors import HookbusError
from subscribers.hooks_config import HookEntry, HooksConfig, now_stamp, parse_api_hook
from subscribers.hooks_file import load, write_atomic


class HookNotFound(HookbusError, LookupError):
    """No hook has this id."""

    def __init__(self, hook_id: str) -> None:
        self.hook_id = hook_id
        super().__init__(f"no hook with id {hook_id!r}")


class HooksStore:
    """hooks.json as a collection of hooks with ids."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    def read(self) -> HooksConfig:
        """The current file (HookConfigError if it is broken: fix it before editing through the API)."""
        return load(self.path)

    def _save(self, entries: list[HookEntry]) -> None:
        write_atomic(self.path, HooksConfig(tuple(entries)))

    async def create(self, body: Any) -> HookEntry:
        async with self._lock:
            entries = list(self.read().entries)
            entry = parse_api_hook(body, hook_id=_new_id({e.id for e in entries}))
            self._save([*entries, entry])
            return entry

    async def update(self, hook_id: str, body: Any) -> HookEntry:
        async with self._lock:
            entries = list(self.read().entries)
            index = _index(entries, hook_id)
            old = entries[index]
            if isinstance(body, dict) and "enabled" not in body:
                body = {**body, "enabled": old.enabled}
            entries[index] = parse_api_hook(body, hook_id=hook_id, created_at=old.created_at)
            self._save(entries)
            return entries[index]

    async def delete(self, hook_id: str) -> None:
        async with self._lock:
            entries = list(self.read().entries)
            del entries[_index(entries, hook_id)]
            self._save(entries)

    async def toggle(self, hook_id: str) -> HookEntry:
        async with self._lock:
            entries = list(self.read().entries)
            index = _index(entries, hook_id)
            entries[index] = replace(entries[index], enabled=not entries[index].enabled, updated_at=now_stamp())
            self._save(entries)
            return entries[index]


def _index(entries: list[HookEntry], hook_id: str) -> int:
    for index, entry in enumerate(entries):
        if entry.id == hook_id:
            return index
    raise HookNotFound(hook_id)


def _new_id(taken: set[str]) -> str:
    while True:
        hook_id = f"hook_{secrets.token_hex(5)}"
        if hook_id not in taken:
            return hook_id
