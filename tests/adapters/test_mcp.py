"""``hookbus mcp``: real MCP servers (npm's filesystem server, PyPI's time server) behind the proxy, on a real bus.

The client is the ``mcp`` SDK's own ClientSession, spawning ``hookbus mcp -- ...``
over stdio as Claude Code spawns a server (or over streamable HTTP with
``--listen``); the guards are Modules served on the bus and trusted by a
kernel, as in production.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Decision, Module, NatsServer, Patch
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.adapters.mcp_support import (
    TIME_SERVER,
    filesystem_server,
    over_stdio,
    proxy_env,
    text_of,
)
from tests.conftest import unique


def fs_guard(name: str, allowed: Path) -> Module:
    """Writes only under ``allowed`` (fail-closed), no move_file listed, SECRET redacted from outputs."""
    module = Module(name)

    @module.stage("tool.call", fail_closed=True, match="mcp__filesystem__write_file")
    async def writes(stage: str, payload: dict[str, Any]) -> Decision:
        path = Path(str(payload["input"].get("path", ""))).resolve()
        return Continue() if path.is_relative_to(allowed.resolve()) else Cancel(f"no writes outside {allowed.name}")

    @module.stage("tool.list", fail_closed=True, match="mcp__filesystem__move_file")
    async def unlisted(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("moving files is not for agents")

    @module.stage("tool.result")
    async def redact(stage: str, payload: dict[str, Any]) -> Decision:
        output = str(payload.get("output", ""))
        return Patch({"output": output.replace("SECRET", "[redacted]")}) if "SECRET" in output else Continue()

    return module


async def trusted(nats_url: str, module: str, chains: dict[str, list[str]]) -> None:
    async with Bus(nats_url, trust_new=True) as kernel:
        for stage, handlers in chains.items():
            await wait_for_chain(kernel, stage, [f"{module}.{h}" for h in handlers])


@pytest.fixture
async def guarded_fs(nats_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """The filesystem guard served and trusted; yields its name and the filesystem server's root."""
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    name = unique("mcpfs")
    async with serving(fs_guard(name, root / "notes"), nats_url, detach_on_stop=True):
        await trusted(nats_url, name, {"tool.call": ["writes"], "tool.list": ["unlisted"], "tool.result": ["redact"]})
        yield name, root


async def test_a_write_outside_the_directory_is_refused_while_reads_and_writes_inside_pass(
    nats_url: str, guarded_fs: tuple[str, Path], tmp_path: Path
) -> None:
    name, root = guarded_fs
    (root / "notes" / "plan.txt").write_text("the plan has a SECRET in it")
    env = proxy_env(nats_url, tmp_path / "state")
    async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
        refused = await session.call_tool("write_file", {"path": str(root / "escape.txt"), "content": "x"})
        assert refused.is_error
        assert text_of(refused) == f"cancelled by middleware: no writes outside notes ({name}.writes)" or (
            "no writes outside notes" in text_of(refused)
        )
        assert not (root / "escape.txt").exists()

        written = await session.call_tool("write_file", {"path": str(root / "notes" / "a.txt"), "content": "hello"})
        assert not written.is_error, text_of(written)
        assert (root / "notes" / "a.txt").read_text() == "hello"

        read = await session.call_tool("read_text_file", {"path": str(root / "notes" / "plan.txt")})
        assert not read.is_error
        assert text_of(read) == "the plan has a [redacted] in it"


async def test_tools_list_leaves_out_what_tool_list_refuses(
    nats_url: str, guarded_fs: tuple[str, Path], tmp_path: Path
) -> None:
    _, root = guarded_fs
    env = proxy_env(nats_url, tmp_path / "state")
    async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
    assert {"read_text_file", "write_file", "list_directory"} <= listed
    assert "move_file" not in listed
    async with over_stdio(env, "--name", "fs2", "--", *filesystem_server(), str(root)) as session:
        assert "move_file" in {tool.name for tool in (await session.list_tools()).tools}  # another server's name


async def test_every_call_and_result_is_an_event_on_the_bus(
    nats_url: str, guarded_fs: tuple[str, Path], tmp_path: Path
) -> None:
    _, root = guarded_fs
    recorder = EventRecorder()
    async with Bus(nats_url, name="watcher") as watcher:
        await watcher.subscribe("prx.lifecycle.>", recorder)
        await watcher.flush()
        env = proxy_env(nats_url, tmp_path / "state")
        async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
            await session.call_tool("list_directory", {"path": str(root)})
            await session.call_tool("write_file", {"path": str(root / "escape.txt"), "content": "x"})
        events = await recorder.wait_for(4)
    seen = [(e.event, e.payload["tool"], e.payload.get("success")) for e in events]
    assert seen == [
        ("tool_call_start", "mcp__filesystem__list_directory", None),
        ("tool_call", "mcp__filesystem__list_directory", True),
        ("tool_call_start", "mcp__filesystem__write_file", None),
        ("tool_call", "mcp__filesystem__write_file", False),
    ]
    assert events[0].payload["arguments"] == {"path": str(root)}
    assert "notes" in events[1].payload["output"]


async def test_a_patch_changes_the_arguments_the_server_sees(nats_url: str, tmp_path: Path) -> None:
    module = Module(unique("mcptime"))

    @module.stage("tool.call", match="mcp__time__get_current_time")
    async def tokyo(stage: str, payload: dict[str, Any]) -> Decision:
        assert payload["server"] == "time" and payload["tool"] == "get_current_time"
        return Patch({**payload, "input": {**payload["input"], "timezone": "Asia/Tokyo"}})

    async with serving(module, nats_url, detach_on_stop=True):
        await trusted(nats_url, module.name, {"tool.call": ["tokyo"]})
        env = proxy_env(nats_url, tmp_path / "state")
        async with over_stdio(env, "--", TIME_SERVER) as session:  # --name: the command's base name, "mcp-server-time"
            untouched = await session.call_tool("get_current_time", {"timezone": "UTC"})
        async with over_stdio(env, "--name", "time", "--", TIME_SERVER) as session:
            patched = await session.call_tool("get_current_time", {"timezone": "UTC"})
    assert '"timezone": "UTC"' in text_of(untouched)
    assert '"timezone": "Asia/Tokyo"' in text_of(patched)
    assert patched.structured_content is not None and patched.structured_content["timezone"] == "Asia/Tokyo"


async def test_a_killed_guard_keeps_refusing(nats_url: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    name = unique("mcpkill")
    async with serving(fs_guard(name, root / "notes"), nats_url) as task:
        await trusted(nats_url, name, {"tool.call": ["writes"]})
        task.cancel()  # killed, not detached: its fail-closed promise stands
        await asyncio.gather(task, return_exceptions=True)
    env = proxy_env(nats_url, tmp_path / "state")
    try:
        async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
            inside = await session.call_tool("write_file", {"path": str(root / "notes" / "a.txt"), "content": "x"})
            read = await session.call_tool("list_directory", {"path": str(root)})
        assert inside.is_error and name in text_of(inside)
        assert not (root / "notes" / "a.txt").exists()
        assert not read.is_error  # another tool: no guard matches it
    finally:
        await _detach(nats_url, name)


async def _detach(nats_url: str, module: str) -> None:
    from tests.conftest import run_cli

    done = await asyncio.to_thread(run_cli, "detach", module, env={"NATS_URL": nats_url})
    assert done.returncode == 0, done.stderr


async def test_without_the_bus_the_remembered_fail_closed_guards_refuse(own_server: NatsServer, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    name = unique("mcpgone")
    env = proxy_env(own_server.url, tmp_path / "state")
    async with serving(fs_guard(name, root / "notes"), own_server.url, detach_on_stop=True):
        await trusted(own_server.url, name, {"tool.call": ["writes"]})
        async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
            await session.list_tools()  # seen once: its guards are remembered
        own_server.stop()
        async with over_stdio(env, "--name", "filesystem", "--", *filesystem_server(), str(root)) as session:
            write = await session.call_tool("write_file", {"path": str(root / "notes" / "a.txt"), "content": "x"})
            listed = await session.call_tool("list_directory", {"path": str(root)})
        async with over_stdio(
            {**env, "XDG_STATE_HOME": str(tmp_path / "other")},
            "--name",
            "filesystem",
            "--",
            *filesystem_server(),
            str(root),
        ) as session:
            unknown = await session.call_tool("write_file", {"path": str(root / "notes" / "b.txt"), "content": "x"})
    assert write.is_error and f"{name}.writes is fail-closed and the bus cannot be reached" in text_of(write)
    assert not (root / "notes" / "a.txt").exists()
    assert not listed.is_error and "notes" in text_of(listed)  # remembered per tool: its guard matches write_file only
    assert not unknown.is_error and (root / "notes" / "b.txt").exists()  # no guard remembered there: it continues
    state = tmp_path / "state" / "hookbus" / "agent-guards.json"
    assert os.stat(state).st_mode & 0o077 == 0
    remembered = next(iter(orjson.loads(state.read_bytes()).values()))
    assert remembered["matches"]["tool.call"] == {f"{name}.writes": ["mcp__filesystem__write_file"]}


async def test_offline_a_guard_holds_only_the_tools_it_matches_and_all_without_a_record() -> None:
    """The remembered matches narrow a stage's refusal to the guards matching the call; a record that does not
    speak for exactly the stage's guards (rewritten since) is not trusted: every guard holds the stage."""
    from bus.adapters._mcp._gate import OfflineGate

    guards = {"tool.call": ["m.writes", "m.all"], "tool.list": ["m.moves"]}
    matches: dict[str, dict[str, list[str] | None]] = {
        "tool.call": {"m.writes": ["mcp__fs__write_file"], "m.all": None},
        "tool.list": {"m.moves": ["mcp__fs__move_file"], "m.gone": None},
    }
    gate = OfflineGate(guards, "down", matches=matches)
    write = await gate.intercept("tool.call", {"name": "mcp__fs__write_file"})
    read = await gate.intercept("tool.call", {"name": "mcp__fs__read_file"})
    assert isinstance(write, Cancel) and "m.all, m.writes" in write.reason
    assert isinstance(read, Cancel) and read.reason.startswith("m.all is fail-closed")
    only = OfflineGate(
        {"tool.call": ["m.writes"]}, "down", matches={"tool.call": {"m.writes": ["mcp__fs__write_file"]}}
    )
    assert isinstance(await only.intercept("tool.call", {"name": "mcp__fs__write_file"}), Cancel)
    assert isinstance(await only.intercept("tool.call", {"name": "mcp__fs__read_file"}), Continue)
    assert isinstance(await only.intercept("tool.result", {"name": "mcp__fs__write_file"}), Continue)
    stale = await gate.intercept("tool.list", {"name": "mcp__fs__read_file"})
    assert isinstance(stale, Cancel), "the record names a guard the stage no longer has: the whole stage holds"
    bare = OfflineGate({"tool.call": ["m.writes"]}, "down")
    assert isinstance(await bare.intercept("tool.call", {"name": "mcp__fs__read_file"}), Cancel)
