"""``hookbus mcp`` over streamable HTTP (both sides), and a server that hangs, dies or is sent too much.

The upstream for what no reference server does (hang, die mid-call, serve
HTTP) is a server written on the SDK's MCPServer (bus/testing/_mcp_server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from mcp.shared.exceptions import MCPError

from bus import Bus, Cancel, Continue, Decision, Module
from bus.testing import serving, wait_for_chain
from tests.adapters.mcp_support import (
    ROOT,
    TOKEN,
    filesystem_server,
    fixture_server,
    free_port,
    over_http,
    over_stdio,
    proxy_env,
    text_of,
)
from tests.conftest import hookbus_cmd, unique

#: Bound on every wait here: a proxy that hangs fails the test instead of hanging it.
WAIT = 30.0


def guard(name: str) -> Module:
    module = Module(name)

    @module.stage("tool.call", fail_closed=True)
    async def refuse(stage: str, payload: dict[str, Any]) -> Decision:
        text = str(payload["input"].get("text", "")) + str(payload["input"].get("path", ""))
        return Cancel("not that") if "forbidden" in text else Continue()

    return module


@pytest.fixture
async def guarded(nats_url: str) -> AsyncIterator[str]:
    name = unique("mcphttp")
    async with serving(guard(name), nats_url, detach_on_stop=True):
        async with Bus(nats_url, trust_new=True) as kernel:
            await wait_for_chain(kernel, "tool.call", [f"{name}.refuse"])
        yield name


def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket
    import time

    for _ in range(int(WAIT / 0.05)):
        if proc.poll() is not None:
            raise AssertionError(f"the process ended ({proc.returncode}) before listening")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str] | None, port: int) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_a_server_at_a_url_is_guarded_like_a_command(nats_url: str, guarded: str, tmp_path: Path) -> None:
    port = free_port()
    with running(fixture_server("--http", str(port)), None, port):
        env = proxy_env(nats_url, tmp_path)
        async with over_stdio(env, "--name", "fixture", "--url", f"http://127.0.0.1:{port}/mcp") as session:
            assert {t.name for t in (await session.list_tools()).tools} == {"echo", "hang", "die"}
            passed = await session.call_tool("echo", {"text": "hello"})
            refused = await session.call_tool("echo", {"text": "forbidden"})
    assert text_of(passed) == "hello" and not passed.is_error
    assert refused.is_error and "not that" in text_of(refused)


@pytest.fixture
def listening(nats_url: str, guarded: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``hookbus mcp --listen`` in front of the filesystem server; yields its URL and the server's root."""
    root = tmp_path / "root"
    root.mkdir()
    port = free_port()
    env = proxy_env(nats_url, tmp_path / "state", HOOKBUS_MCP_TOKEN=TOKEN)
    argv = [*hookbus_cmd(), "mcp", "--name", "filesystem", "--listen", f"127.0.0.1:{port}"]
    argv += ["--max-message", "100000", "--", *filesystem_server(), str(root)]
    with running(argv, env, port):
        yield f"http://127.0.0.1:{port}/mcp", root


async def test_the_proxy_serves_streamable_http_under_the_same_guards(listening: tuple[str, Path]) -> None:
    url, root = listening
    async with asyncio.timeout(WAIT), over_http(url) as session:
        written = await session.call_tool("write_file", {"path": str(root / "a.txt"), "content": "hi"})
        refused = await session.call_tool("write_file", {"path": str(root / "forbidden.txt"), "content": "x"})
        async with over_http(url) as second:  # a second session: a server connection of its own
            listed = await second.call_tool("list_directory", {"path": str(root)})
    assert not written.is_error and (root / "a.txt").read_text() == "hi"
    assert refused.is_error and "not that" in text_of(refused) and not (root / "forbidden.txt").exists()
    assert "a.txt" in text_of(listed)


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }


async def test_the_listen_route_refuses_a_client_without_the_token_a_foreign_host_and_a_large_body(
    listening: tuple[str, Path],
) -> None:
    """The attack: any local process (not the agent) posts to the port to act as the agent on the bus."""
    url, _ = listening
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    body = orjson.dumps(_initialize())
    async with httpx.AsyncClient(timeout=WAIT) as http:
        anonymous = await http.post(url, content=body, headers=headers)
        wrong = await http.post(url, content=body, headers={**headers, "Authorization": "Bearer guessed-token-123456"})
        authorized = {**headers, "Authorization": f"Bearer {TOKEN}"}
        rebound = await http.post(url, content=body, headers={**authorized, "Host": "evil.example:80"})
        large = orjson.dumps({**_initialize(), "params": {**_initialize()["params"], "pad": "x" * 200_000}})
        oversized = await http.post(url, content=large, headers=authorized)
        unknown = await http.post(url, content=body, headers={**authorized, "Mcp-Session-Id": "0" * 32})
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert rebound.status_code in (403, 421)
    assert oversized.status_code == 413
    assert unknown.status_code == 404


@contextlib.asynccontextmanager
async def fixture_proxy(nats_url: str, tmp_path: Path, *args: str) -> AsyncIterator[Any]:
    env = proxy_env(nats_url, tmp_path)
    async with asyncio.timeout(WAIT), over_stdio(env, "--name", "fixture", *args, "--", *fixture_server()) as session:
        yield session


async def test_a_hanging_server_is_an_mcp_error_and_the_session_goes_on(nats_url: str, tmp_path: Path) -> None:
    # The timeout covers the fixture server's start too (its initialize): long enough for a loaded machine.
    async with fixture_proxy(nats_url, tmp_path, "--timeout", "10") as session:
        with pytest.raises(MCPError, match="did not answer tools/call within 10s"):
            await session.call_tool("hang", {})
        assert text_of(await session.call_tool("echo", {"text": "still here"})) == "still here"


async def test_a_dying_server_is_an_mcp_error_for_this_call_and_every_later_one(nats_url: str, tmp_path: Path) -> None:
    async with fixture_proxy(nats_url, tmp_path) as session:
        with pytest.raises(MCPError, match="closed its connection"):
            await session.call_tool("die", {})
        with pytest.raises(MCPError, match="closed its connection"):
            await session.call_tool("echo", {"text": "anyone?"})


async def test_a_command_that_cannot_start_is_an_mcp_error(nats_url: str, tmp_path: Path) -> None:
    env = proxy_env(nats_url, tmp_path)
    command = hookbus_cmd()
    proc = await asyncio.create_subprocess_exec(
        *command, "mcp", "--", str(tmp_path / "no-such-server"),
        env=env, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        answer = await _exchange(proc, _initialize())
    finally:
        await _close(proc)
    assert answer["id"] == 1 and "no-such-server" in answer["error"]["message"]


async def _exchange(proc: asyncio.subprocess.Process, message: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(orjson.dumps(message) + b"\n")
    await proc.stdin.drain()
    async with asyncio.timeout(WAIT):
        while True:
            line = await proc.stdout.readline()
            assert line, "the proxy closed its stdout"
            reply = orjson.loads(line)
            if reply.get("id") == message["id"]:
                return dict(reply)


async def _close(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        async with asyncio.timeout(WAIT):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def test_an_oversized_client_message_is_refused_with_an_error_and_the_next_one_passes(
    nats_url: str, tmp_path: Path
) -> None:
    env = proxy_env(nats_url, tmp_path)
    proc = await asyncio.create_subprocess_exec(
        *hookbus_cmd(), "mcp", "--max-message", "65536", "--", *fixture_server(),
        env=env, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 20,
    )  # fmt: skip
    try:
        assert "result" in await _exchange(proc, _initialize())
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        big = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
        big["params"]["arguments"] = {"text": "x" * 1_000_000}
        refused = await _exchange(proc, big)
        small = {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "ok"}},
        }
        passed = await _exchange(proc, small)
    finally:
        await _close(proc)
    assert (
        refused["error"]["message"].startswith("hookbus mcp: a message of ")
        and "over the proxy's limit" in refused["error"]["message"]
    )
    assert passed["result"]["content"][0]["text"] == "ok"


def test_install_prints_each_clients_entry_wrapped_by_hookbus_mcp() -> None:
    import tomllib

    from tests.conftest import run_cli

    def entry(client: str) -> str:
        done = run_cli(
            "mcp", "install", "--client", client, "--", "npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    claude = orjson.loads(entry("claude-code"))["mcpServers"]["npx"]
    assert claude["type"] == "stdio"
    cursor = orjson.loads(entry("cursor"))["mcpServers"]["npx"]
    codex = tomllib.loads(entry("codex"))["mcp_servers"]["npx"]
    for server in (claude, cursor, codex):
        assert server["args"][-8:] == [
            "mcp",
            "--name",
            "npx",
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-filesystem",
            "/srv",
        ]
    assert codex["command"] == cursor["command"] == claude["command"]
    named = run_cli("mcp", "install", "--client", "codex", "--name", "files", "--url", "http://127.0.0.1:9/mcp")
    assert tomllib.loads(named.stdout)["mcp_servers"]["files"]["args"][-4:] == [
        "--name",
        "files",
        "--url",
        "http://127.0.0.1:9/mcp",
    ]
    assert sys.executable  # the entry runs this environment's hookbus
