"""Owner-only files: appended or written new, 0600 whatever the umask; a new write never clobbers a file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus._runtime.private_files import append_private, write_new_private


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that would leave new files world-writable."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_append_creates_0600_and_then_appends(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "journal.jsonl"
    append_private(path, b"one\n")
    append_private(path, b"two\n")
    assert path.read_bytes() == b"one\ntwo\n"
    assert _mode(path) == 0o600


def test_append_tightens_a_looser_file_it_finds(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "old.jsonl"
    path.write_bytes(b"old\n")
    path.chmod(0o644)
    append_private(path, b"new\n")
    assert path.read_bytes() == b"old\nnew\n"
    assert _mode(path) == 0o600


def test_write_new_creates_0600_and_refuses_an_existing_file(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "drained.txt"
    write_new_private(path, b"x" * 100_000)
    assert path.read_bytes() == b"x" * 100_000
    assert _mode(path) == 0o600
    with pytest.raises(FileExistsError):
        write_new_private(path, b"other")
    assert path.read_bytes() == b"x" * 100_000
