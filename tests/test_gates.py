"""Style and types never drift: ruff (lint + format) and mypy strict run with the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout
    )


def test_ruff_lint() -> None:
    done = run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format() -> None:
    done = run("ruff", "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(600)  # a cold-cache mypy of the whole tree on a loaded 2-core CI machine takes minutes
def test_mypy_strict() -> None:
    done = run("mypy", timeout=540)
    assert done.returncode == 0, done.stdout + done.stderr
