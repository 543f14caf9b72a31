"""Fixtures: a real NATS server per test module, helpers to run the CLI for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bus import Bus, NatsServer
from bus.testing import nats_for_tests

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_binary(name: str) -> str:
    """Path of a binary the test needs: skip with the reason on a laptop, fail under CI=true."""
    path = shutil.which(name)
    if path is None:
        message = f"{name!r} is not installed (bash .ci/run installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    """A real NATS server shared by the tests of one module."""
    with nats_for_tests() as url:
        yield url


@pytest.fixture
def own_server() -> Iterator[NatsServer]:
    """A nats-server of this test's own, for tests that stop or restart it."""
    with NatsServer() as server:
        yield server


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    async with Bus(nats_url, name="test") as connected:
        yield connected


def hookbus_cmd() -> list[str]:
    """The ``hookbus`` console script of this interpreter's environment."""
    return [sys.executable, "-m", "bus.cli"]


def run_cli(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``hookbus ARGS`` as a real process and return what it did."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*hookbus_cmd(), *args], capture_output=True, text=True, env=full_env, input=input, timeout=timeout, check=False
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path
