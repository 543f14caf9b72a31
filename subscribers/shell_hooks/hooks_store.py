"""Edits to hooks.json from the HTTP API: read, change one hook, write atomically.

Every write goes through the same validator as the file and lands on disk
with :func:`subscribers.shell_hooks.hooks_file.write_atomic`; running workers pick it up
through their ordinary reload path. Each read-modify-write holds an exclusive
``flock`` on ``hooks.json.lock`` (in a thread, off the event loop), so that two
API calls never lose each other's change, in one process or in several.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from bus.core.clock import now_timestamp
from bus.core.errors import HookNotFound
from bus.core.filelock import locked
from subscribers.shell_hooks.hooks_config import HookEntry, HooksConfig, parse_api_hook
from subscribers.shell_hooks.hooks_file import load, write_atomic

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

    async def _edit(self, change: Callable[[list[HookEntry]], tuple[list[HookEntry], T]]) -> T:
        """Apply ``change`` to the current entries and save what it returns, under both locks."""

        def locked_edit() -> T:
            with locked(self.lock_path):
                entries, result = change(list(self.read().entries))
                write_atomic(self.path, HooksConfig(tuple(entries)))
                return result

        async with self._lock:
            return await asyncio.to_thread(locked_edit)

    async def create(self, body: Any) -> HookEntry:
        def change(entries: list[HookEntry]) -> tuple[list[HookEntry], HookEntry]:
            entry = parse_api_hook(body, hook_id=_new_id({e.id for e in entries}))
            return [*entries, entry], entry

        return await self._edit(change)

    async def update(self, hook_id: str, body: Any) -> HookEntry:
        def change(entries: list[HookEntry]) -> tuple[list[HookEntry], HookEntry]:
            index = _index(entries, hook_id)
            old = entries[index]
            given = {**body, "enabled": old.enabled} if isinstance(body, dict) and "enabled" not in body else body
            entries[index] = parse_api_hook(given, hook_id=hook_id, created_at=old.created_at)
            return entries, entries[index]

        return await self._edit(change)

    async def delete(self, hook_id: str) -> None:
        def change(entries: list[HookEntry]) -> tuple[list[HookEntry], None]:
            del entries[_index(entries, hook_id)]
            return entries, None

        await self._edit(change)

    async def toggle(self, hook_id: str) -> HookEntry:
        def change(entries: list[HookEntry]) -> tuple[list[HookEntry], HookEntry]:
            index = _index(entries, hook_id)
            entries[index] = replace(entries[index], enabled=not entries[index].enabled, updated_at=now_timestamp())
            return entries, entries[index]

        return await self._edit(change)


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
