"""Hot reload of a config file: poll, parse, keep the last good version.

Editors replace files rather than rewrite them, so the file's identity
(inode, size, mtime) is what is watched, by polling: no extra dependency and
no missed rename. A change that does not parse keeps the last good value
running and logs one clear error (naming the file and what is wrong) per
change, not per poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, Generic, TypeVar

from bus.core.errors import ConfigError

log = logging.getLogger("hookbus.config")

T = TypeVar("T")
Signature = tuple[int, int, int] | None


def signature(path: Path) -> Signature:
    """What identifies a version of the file: inode, size, mtime; None if it does not exist."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


class FileVersion:
    """Tells whether a file changed since the last look: the one poller of hookbus's config files.

    ``seen_missing`` makes a file that does not exist at the first look count
    as unchanged (there is nothing new to load); otherwise the first look is
    always a change.
    """

    def __init__(self, path: Path, *, seen_missing: bool = False) -> None:
        self.path = path
        self._seen: Signature | object = None if seen_missing else _UNSEEN

    def changed(self) -> bool:
        """True once per new version (or disappearance) of the file."""
        current = signature(self.path)
        if current == self._seen:
            return False
        self._seen = current
        return True

    @property
    def exists(self) -> bool:
        """Whether the file existed at the last look."""
        return self._seen is not None and self._seen is not _UNSEEN


_UNSEEN: Final = object()  # never equal to a real signature


class WatchedFile(Generic[T]):
    """A config file parsed by ``parse``; ``on_change`` gets each new good version."""

    def __init__(
        self,
        path: Path,
        parse: Callable[[Path], T],
        on_change: Callable[[T], Awaitable[None]],
        empty: T,
        interval: float = 0.5,
    ) -> None:
        self.path = path
        self.parse = parse
        self.on_change = on_change
        self.current = empty
        self._empty = empty
        self.interval = interval
        self.last_error: str | None = None
        self._version = FileVersion(path, seen_missing=True)
        self.reloads = 0

    async def check(self) -> bool:
        """Reload if the file changed; True if a new good version was applied."""
        if not self._version.changed():
            return False
        if not self._version.exists:
            value = self._empty
        else:
            try:
                value = await asyncio.to_thread(self.parse, self.path)
            except ConfigError as exc:
                self.last_error = str(exc)
                log.error("%s; keeping the last good configuration", exc)
                return False
        self.last_error = None
        self.current = value
        self.reloads += 1
        await self.on_change(value)
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
