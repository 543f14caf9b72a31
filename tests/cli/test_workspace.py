"""One workspace model: every command finds its workspace the same way, refuses a missing one, and names the bus.

``--workspace``, then ``$HOOKBUS_WORKSPACE``, then ``./.hookbus``; approvals live
with the bus (its JetStream store), and ``hookbus up`` says so for a new one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from bus import Bus, Continue, Module, Stage
from bus.testing import EventRecorder
from tests.cli.test_cli import UpProcess
from tests.conftest import hookbus_cmd, run_cli, unique
from tests.support.hooks_support import script, write_hooks

NO_BUS = {"NATS_URL": "nats://127.0.0.1:1"}


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def test_a_missing_workspace_is_an_error_naming_it_and_where_it_came_from(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    expected = f"hookbus: error: workspace {missing} (from --workspace) does not exist"
    commands = [
        ["hooks", "test", "tool_call", "{}", "--workspace", str(missing)],
        ["journal", "--workspace", str(missing)],
        ["triggers", "--workspace", str(missing), "test", "spend", "{}"],
        ["triggers", "--workspace", str(missing)],  # no engine answers: the file would be read
        ["worker", "--workspace", str(missing), "--connect-timeout", "0.2"],
    ]
    for command in commands:
        done = run_cli(*command, env=NO_BUS)
        assert done.returncode == 1, (command, done.stdout)
        assert first_line(done.stderr).startswith(expected), (command, done.stderr)
        assert done.stdout == "", command


def test_hookbus_workspace_is_the_fallback_and_the_default_is_named(tmp_path: Path, workspace: Path) -> None:
    script(workspace, "hi.sh", "echo hi from the env workspace\n")
    write_hooks(workspace, {"tool_call": [{"command": "./hi.sh"}]})
    from_env = run_cli("hooks", "test", "tool_call", "{}", env={"HOOKBUS_WORKSPACE": str(workspace)})
    assert from_env.returncode == 0, from_env.stderr
    assert "stdout | hi from the env workspace" in from_env.stdout
    other = tmp_path / "other"
    other.mkdir()
    flag_wins = run_cli(
        "hooks", "test", "tool_call", "{}", "--workspace", str(other), env={"HOOKBUS_WORKSPACE": str(workspace)}
    )
    assert flag_wins.returncode == 0, flag_wins.stderr
    assert flag_wins.stdout.strip() == (
        f"no enabled hook in {other / 'hooks.json'} (workspace from --workspace) matches prx.lifecycle.tool_call"
    )
    env = {k: v for k, v in os.environ.items() if k != "HOOKBUS_WORKSPACE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # run from another folder: bus from this tree
    default = subprocess.run(
        [*hookbus_cmd(), "journal"], cwd=other, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert default.returncode == 1
    assert first_line(default.stderr) == (
        f"hookbus: error: workspace {other / '.hookbus'} (the default ./.hookbus) does not exist: "
        "give --workspace DIR or set $HOOKBUS_WORKSPACE (hookbus up creates one)"
    )
    missing_env = run_cli("journal", env={"HOOKBUS_WORKSPACE": str(tmp_path / "gone")})
    assert f"workspace {tmp_path / 'gone'} (from $HOOKBUS_WORKSPACE) does not exist" in missing_env.stderr


def test_an_empty_answer_names_the_workspace_it_read(workspace: Path) -> None:
    from subscribers.journal._store import DB_NAME, JournalStore

    JournalStore(workspace / DB_NAME).close()
    done = run_cli("journal", "--workspace", str(workspace), "--kind", "trigger")
    assert done.returncode == 0
    assert done.stdout.splitlines()[0].startswith("RECEIVED")
    assert done.stderr.strip() == (f"(no journal entry in {workspace / DB_NAME} matches; workspace from --workspace)")


async def test_commands_that_ask_the_bus_name_it(nats_url: str) -> None:
    approvals = await asyncio.to_thread(run_cli, "approvals", env={"NATS_URL": nats_url})
    assert approvals.returncode == 0, approvals.stderr
    assert approvals.stdout.splitlines()[0] in (
        f"no handler is waiting for approval on {nats_url}",
        f"waiting for approval on {nats_url}:",
    )
    chain = await asyncio.to_thread(run_cli, "chain", "nosuch.stage", env={"NATS_URL": nats_url})
    assert chain.returncode == 0, chain.stderr
    assert chain.stdout.strip() == (
        f"nosuch.stage  (no handler declared on {nats_url}: intercepts continue without a network call)"
    )
    name = unique("ws")
    module = Module(name)

    @module.stage(Stage.TOOL_CALL)
    async def check(stage: str, payload: dict[str, object]) -> Continue:
        return Continue()

    async with Bus(nats_url) as bus:
        ready = asyncio.Event()
        serving = asyncio.create_task(module.serve(bus=bus, ready=ready))
        try:
            await asyncio.wait_for(ready.wait(), 15)
            waiting = await asyncio.to_thread(run_cli, "approvals", env={"NATS_URL": nats_url})
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
    lines = waiting.stdout.splitlines()
    assert lines[0] == f"waiting for approval on {nats_url}:"
    assert any(line.startswith(f"{name}.check  untrusted  stage tool.call") for line in lines[1:]), lines


@pytest.mark.timeout(300)  # three hookbus up in a row
async def test_approvals_live_with_the_bus_and_up_says_so(tmp_path: Path) -> None:
    """A new workspace is a new embedded bus with no approvals; the same workspace keeps them."""
    workspace = tmp_path / "ws"
    up = UpProcess(workspace)
    try:
        text = "\n".join(up.lines)
        assert f"no approved handlers: this workspace's embedded bus is new ({workspace / 'jetstream'})" in text
        name = unique("kept")
        module = Module(name)

        @module.stage(Stage.TOOL_CALL)
        async def check(stage: str, payload: dict[str, object]) -> Continue:
            return Continue()

        async with Bus(up.nats_url) as bus:
            ready = asyncio.Event()
            serving = asyncio.create_task(module.serve(bus=bus, ready=ready))
            try:
                await asyncio.wait_for(ready.wait(), 15)
                approved = await asyncio.to_thread(run_cli, "approve", f"{name}.check", env={"NATS_URL": up.nats_url})
                assert approved.returncode == 0, approved.stderr
            finally:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
        code, _ = up.stop()
        assert code == 0
    finally:
        up.close()
    again = UpProcess(workspace)
    try:
        assert f"  trust    1 approved handlers (kept in {workspace / 'jetstream'})" in again.lines
        async with Bus(again.nats_url) as bus:  # the bus of the same workspace answers as before
            recorder = EventRecorder()
            await bus.subscribe("eva.custom.x", recorder)
            await bus.flush()
            await bus.emit("eva.custom.x", {})
            await recorder.wait_for(1)
    finally:
        again.close()
    fresh = UpProcess(tmp_path / "other")
    try:
        assert any("no approved handlers: this workspace's embedded bus is new" in line for line in fresh.lines)
    finally:
        fresh.close()
