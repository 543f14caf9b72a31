"""Start middleware module processes for tests, and always clean them up."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).with_name("mw_module.py")


@contextmanager
def module_process(url: str, name: str, stage: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A module process that is serving when the block starts; killed at the end whatever happens."""
    # The tree under test first (not an installed copy), then the tests' own folder.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(SCRIPT.parents[2]), str(SCRIPT.parent.parent)))}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), url, name, stage, *args], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"module process said {line!r} (exit {proc.poll()})"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
