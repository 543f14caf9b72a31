"""Hot reload of a config file: poll, parse, keep the last good version.

What is watched is the file's content, by polling and comparing a digest of
it (as PRX does): no extra dependency, no missed rename (editors replace files
rather than rewrite them), and no missed rewrite in place that keeps the size
and the old mtime; a ``touch`` is not a change. A change that does not parse
keeps the last good value running and logs one clear error (naming the file
and what is wrong) per change, not per poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, Generic, TypeVar

from bus._core.errors import ConfigError

log = logging.getLogger("hookbus.config")

T = TypeVar("T")
#: A version of a file: the digest of its content, why it cannot be read, or None (it does not exist).
Signature = bytes | str | None


def read_version(path: Path) -> tuple[Signature, bytes | None]:
    """The file's version and content (None if it does not exist or cannot be read)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:  # the loader reads it again and names the problem
        return f"unreadable: {exc.strerror or exc}", None
    return hashlib.sha256(data).digest(), data


class FileVersion:
    """Tells whether a file changed since the last look: the one poller of hookbus's config files.

    ``seen_missing`` makes a file that does not exist at the first look count
    as unchanged (there is nothing new to load); otherwise the first look is
    always a change. ``data`` is the content read at the last look, so that a
    loader parses exactly the version that was compared.
    """

    def __init__(self, path: Path, *, seen_missing: bool = False) -> None:
        self.path = path
        self._seen: Signature | object = None if seen_missing else _UNSEEN
        self.data: bytes | None = None

    def changed(self) -> bool:
        """True once per new version (or disappearance) of the file."""
        current, self.data = read_version(self.path)
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


class Poller:
    """Calls a synchronous ``check`` every ``interval`` seconds in a background task, until stopped.

    The one watch loop of the workers' hot-reloaded files: a ``check`` that
    raises is logged on ``logger`` (naming ``what``) and polling goes on.
    """

    def __init__(self, check: Callable[[], object], interval: float, what: str, logger: logging.Logger = log) -> None:
        self.check = check
        self.interval = interval
        self.what = what
        self._log = logger
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name=f"watch {self.what}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:
                self._log.exception("reloading %s failed", self.what)
