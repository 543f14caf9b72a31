"""Helpers for shell-hook tests: write scripts and hooks.json into a workspace, wait for effects."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson


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


async def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_for_file(path: Path, timeout: float = 15.0) -> str:
    """Wait until ``path`` exists and is non-empty; its text."""
    await wait_until(lambda: path.exists() and path.stat().st_size > 0, timeout, f"{path} to be written")
    return path.read_text()
