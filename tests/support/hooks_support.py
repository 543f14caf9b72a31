"""Helpers for shell-hook tests: write scripts and hooks.json into a workspace, wait for effects."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from tests.support.waiting import wait_until

__all__ = ["script", "wait_for_file", "wait_until", "write_hooks"]


def script(workspace: Path, name: str, body: str) -> Path:
    """Write an executable shell script into the workspace."""
    path = workspace / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def write_hooks(workspace: Path, hooks: dict[str, list[dict[str, Any]]]) -> None:
    """Write hooks.json atomically (as an editor that renames a new file over the old one)."""
    tmp = workspace / ".hooks.json.new"
    tmp.write_bytes(orjson.dumps({"hooks": hooks}))
    os.replace(tmp, workspace / "hooks.json")


async def wait_for_file(path: Path, timeout: float = 15.0) -> str:
    """Wait until ``path`` exists and is non-empty; its text."""
    await wait_until(lambda: path.exists() and path.stat().st_size > 0, timeout, f"{path} to be written")
    return path.read_text()
