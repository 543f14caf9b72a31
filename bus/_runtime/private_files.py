"""Files that may hold secrets (hooks.json, the journal, drained output, the API token): owner-only.

Files are created 0600 and directories 0700 whatever the umask: made with
these modes (a permissive umask adds nothing) and then set to them (an odd
umask could have taken the owner's own bits). A file of ours found looser,
from an older version, is tightened when it is opened again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

FILE_MODE: Final = 0o600
DIR_MODE: Final = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents 0700; a directory that exists is left as it is."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made by another process meanwhile
            continue
        os.chmod(directory, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty if it is missing; either way leave it 0600.

    An existing file is changed by name, never opened: closing a descriptor
    drops every POSIX lock this process holds on the file, SQLite's included.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        with contextlib.suppress(PermissionError):  # not ours (another user reading it): leave it
            os.chmod(path, FILE_MODE)
        return path
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def restrict(path: Path) -> None:
    """Make an existing file 0600 (by name); a missing one is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(path, FILE_MODE)


def append_private(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path``, creating it 0600."""
    _write_private(path, data, os.O_APPEND)


def write_new_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (which must not exist), 0600."""
    _write_private(path, data, os.O_EXCL)


def _write_private(path: Path, data: bytes, mode_flag: int) -> None:
    """Open ``path`` for writing with ``mode_flag`` (append, or create exclusively), 0600, and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | mode_flag, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
