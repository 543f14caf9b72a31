"""Advisory file locks (``flock``) that hold across processes.

``locked`` serialises a read-modify-write of a workspace file among every
process that edits it; ``WorkspaceLock`` lets one process at a time own a
workspace, and tells the next one who has it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from bus._core.errors import ConfigError


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created 0600 if missing) for the block; blocks until free."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class WorkspaceLock:
    """One owner per workspace: ``acquire`` fails at once, naming the owner's pid, if another holds it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> WorkspaceLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"workspace {self.path.parent} is in use by another hookbus up (pid {owner}); "
                "stop it first, or give a different --workspace"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
