"""Workspace files that may hold secrets are owner-only whatever the umask; drained output stays in the workspace.

Every process here runs with umask 000, the most permissive there is: what
hookbus creates must still be 0600 (files) and 0700 (directories).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from bus import Bus, Cancel, Continue, Module, Stage
from bus._journal.entries import ensure_journal_stream
from bus.testing import serving
from subscribers.journal._store import DB_NAME, JournalStore, Query
from subscribers.journal.sink import JournalSink
from tests.conftest import hookbus_cmd, unique
from tests.support.waiting import wait_until


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class Up:
    """``hookbus up`` on a fresh workspace, started with umask 000."""

    def __init__(self, workspace: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "HOOKBUS_API_TOKEN")}
        command = ["up", "--workspace", str(workspace), "--port", "0", "--metrics-port", "-1", "--http-port", "0"]
        self.proc = subprocess.Popen(
            [*hookbus_cmd(), *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, umask=0
        )
        lines = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            lines.append(line)
            if line.startswith("ready"):
                break
        text = "".join(lines)
        nats = re.search(r"nats\s+(nats://\S+)", text)
        api = re.search(r"api\s+(http://\S+/api/hooks)", text)
        assert nats and api, text
        self.nats_url, self.api = nats.group(1), api.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=30)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    process = Up(tmp_path / "new" / "ws")
    try:
        yield process
    finally:
        process.stop()


async def test_up_creates_every_secret_file_owner_only_under_umask_000(up: Up, tmp_path: Path) -> None:
    workspace = tmp_path / "new" / "ws"
    token = (workspace / "api-token").read_text().strip()
    hook = {"event": "tool_call", "action": {"command": "/bin/true", "timeout_ms": 3000}, "enabled": True}
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.post(up.api, data=orjson.dumps(hook), headers=headers) as response:
            assert response.status == 201, await response.text()
    async with Bus(up.nats_url) as bus:
        await wait_until(lambda: (workspace / "hooks.json").exists(), what="hooks.json written")
        await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})  # the hook run is journaled
        await wait_until(lambda: (workspace / "journal" / "shell_hook.jsonl").exists(), 30, "the journal entry")
    assert mode(workspace) == 0o700 and mode(workspace.parent) == 0o700  # made by hookbus up, parents too
    secrets = ("hooks.json", "api-token", "ask-link-key", DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm")
    for name in (*secrets, "journal/shell_hook.jsonl"):
        assert mode(workspace / name) == 0o600, name
    assert mode(workspace / "journal") == 0o700 and mode(workspace / "jetstream") == 0o700


class Guard:
    """A module that cancels with a reason too long to pass on: it is drained."""

    def __init__(self) -> None:
        self.module = Module(unique("drainguard"))

        @self.module.stage(Stage.TOOL_CALL)
        async def chatty(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
            return Cancel("secret " * 5_000)


async def intercept(nats_url: str, module: str, cwd: Path, *extra: str) -> dict[str, Any]:
    """One-shot ``hookbus intercept`` as a real process with umask 000 (the module answers meanwhile)."""
    done = await asyncio.to_thread(
        subprocess.run,
        [*hookbus_cmd(), "intercept", "tool.call", '{"name": "shell"}', "--managed", f"{module}.chatty", *extra],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "NATS_URL": nats_url},
        umask=0,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    decision: dict[str, Any] = orjson.loads(done.stdout)
    return decision


def drained_file(reason: str) -> Path:
    found = re.search(r"whole output in (\S+)\]", reason)
    assert found, reason[:300]
    return Path(found.group(1))


async def test_drained_output_stays_in_the_workspace_owner_only(nats_url: str, tmp_path: Path) -> None:
    guard = Guard()
    async with serving(guard.module, nats_url, detach_on_stop=True):
        named = await intercept(nats_url, guard.module.name, tmp_path, "--workspace", str(tmp_path / "ws"))
        default = await intercept(nats_url, guard.module.name, tmp_path)
    for decision, directory in ((named, tmp_path / "ws" / "drain"), (default, tmp_path / ".hookbus" / "drain")):
        assert decision["decision"] == "cancel"
        path = drained_file(decision["reason"])
        assert path.parent == directory  # never a shared directory such as /tmp/hookbus-drain
        assert path.read_text() == "secret " * 5_000
        assert mode(path) == 0o600 and mode(directory) == 0o700 and mode(directory.parent) == 0o700


async def test_one_shot_commands_add_no_journal_files(nats_url: str, tmp_path: Path) -> None:
    """Each ``hookbus intercept`` is a process of its own; the journal keeps one file per kind all the same."""
    workspace = tmp_path / "ws"
    guard = Guard()
    async with Bus(nats_url) as bus:
        await ensure_journal_stream(bus.port)
        await bus.port.nc.jetstream().purge_stream("HOOKBUS_JOURNAL")  # only this test's entries
        sink = JournalSink(bus, workspace, durable=unique("oneshot"))
        stop = asyncio.Event()
        task = asyncio.create_task(sink.run(stop))
        try:
            async with serving(guard.module, nats_url, detach_on_stop=True):
                for _ in range(3):
                    await intercept(nats_url, guard.module.name, tmp_path, "--workspace", str(workspace))
            await wait_until(lambda: len(_processes(workspace)) == 3, 30, "three processes' entries stored")
        finally:
            stop.set()
            await task
    assert sorted(path.name for path in (workspace / "journal").iterdir()) == ["middleware.jsonl"]


def _processes(workspace: Path) -> set[str]:
    if not (workspace / DB_NAME).exists():
        return set()
    store = JournalStore(workspace / DB_NAME)
    try:
        return {row.entry.process for _, row in store.query(Query()) if row.entry.who.endswith("chatty")}
    finally:
        store.close()
