"""Fixtures: a real NATS server per test module, helpers to run the CLI for real."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from bus import Bus, NatsServer
from bus._middleware.kernel.metrics import MIDDLEWARE
from bus.testing import nats_for_tests
from bus.testing.fake_llm import FakeLLM
from subscribers.shell_hooks._settings import WorkerSettings
from subscribers.shell_hooks.shell_worker import ShellWorker

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(autouse=True)
def _fresh_middleware_metrics() -> None:
    """Each test starts with the process's middleware series empty: their handler label cap (256 per
    process) is meant for one deployment's handlers, and a worker of this suite names far more."""
    MIDDLEWARE.reset()


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


SHIPPED_PERMISSIONS = Path(__file__).resolve().parent.parent / "deploy" / "nats" / "permissions.conf"


def shipped_permissions(folder: Path) -> Path:
    """deploy/nats/permissions.conf as shipped, but for its JetStream store and fixed monitoring port.

    Tests start several servers from it at once: the store goes to ``folder``
    and the monitoring port to any free one.
    """
    text = SHIPPED_PERMISSIONS.read_text()
    assert "http: 0.0.0.0:8222" in text and "/data/jetstream" in text, "the shipped file changed shape"
    config = folder / "permissions.conf"
    config.write_text(text.replace("/data/jetstream", str(folder / "jetstream")).replace("0.0.0.0:8222", "127.0.0.1:0"))
    return config


def shipped_server(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[NatsServer]:
    """A nats-server (no JetStream) on the shipped permissions file, for a module fixture to ``yield from``."""
    with NatsServer(config_file=shipped_permissions(tmp_path_factory.mktemp(name)), jetstream=False) as server:
        yield server


def as_user(server: NatsServer, user: str) -> str:
    """``server``'s URL logged in as ``user`` of the shipped permissions file (password ``change-me-<user>``)."""
    return f"nats://{user}:change-me-{user}@127.0.0.1:{server.port}"


@contextlib.asynccontextmanager
async def connect_as(server: NatsServer, user: str) -> AsyncIterator[Client]:
    """A plain nats-py connection as ``user`` of the shipped permissions, quiet about its refusals."""
    nc = Client()

    async def quiet(exc: Exception) -> None:
        return None

    await nc.connect(as_user(server, user), inbox_prefix=f"_INBOX.{user}", error_cb=quiet, allow_reconnect=False)
    try:
        yield nc
    finally:
        await nc.close()


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
    return [sys.executable, "-m", "bus._cli"]


def run_cli(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run ``hookbus ARGS`` as a real process and return what it did."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*hookbus_cmd(), *args], capture_output=True, text=True, env=full_env, input=input, timeout=timeout, check=False
    )


def unique(prefix: str) -> str:
    """A fresh module name: trust records outlive a test on a module-scoped server."""
    return f"{prefix}{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def kernel(nats_url: str) -> AsyncIterator[Bus]:
    """The agent side of middleware: a Bus whose registry view is running (new handlers trusted)."""
    async with Bus(nats_url, name="kernel", trust_new=True) as bus:
        await bus.middleware.start()
        yield bus


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    """A scripted OpenAI-compatible chat-completions server on a free port."""
    server = await FakeLLM().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


#: ``await start_worker(**WorkerSettings fields, bus=..., nats_url=...)``: a started ShellWorker.
StartWorker = Callable[..., Any]


@pytest.fixture
async def start_worker(bus: Bus, workspace: Path) -> AsyncIterator[StartWorker]:
    """Start ShellWorkers on the test's workspace; all are stopped at the end."""
    workers: list[ShellWorker] = []

    async def start(**options: Any) -> ShellWorker:
        options.setdefault("poll_interval_s", 0.05)
        options.setdefault("queue", None)
        on_bus, nats_url = options.pop("bus", bus), options.pop("nats_url", None)
        worker = ShellWorker(on_bus, workspace, WorkerSettings(**options), nats_url=nats_url)
        await worker.start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        await worker.stop()


@pytest.fixture
def recorded(workspace: Path) -> Iterator[Any]:
    """`hookbus up` recording prx.> on an embedded server of its own: each test sees only its own history."""
    from tests.cli.test_cli import UpProcess  # a test module that imports this one

    up = UpProcess(workspace, "--record", "prx.>")
    try:
        yield up
    finally:
        up.close()


@pytest.fixture
async def raw(nats_url: str) -> AsyncIterator[Client]:
    """A plain nats-py connection: publishes whatever bytes on whatever subject, as an attacker would."""
    nc = await nats.connect(nats_url)
    try:
        yield nc
    finally:
        await nc.close()
