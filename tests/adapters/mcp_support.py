"""Driving ``hookbus mcp`` as an MCP client does: the SDK's own ClientSession over stdio or streamable HTTP."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conftest import IN_CI, hookbus_cmd, require_binary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mcp"
ROOT = Path(__file__).resolve().parents[2]
TIME_SERVER = str(Path(sys.executable).with_name("mcp-server-time"))


def git_server() -> str:
    """PyPI's reference git server (the test extra pins it), beside this interpreter."""
    script = Path(sys.executable).with_name("mcp-server-git")
    if not script.is_file():
        message = "mcp-server-git is not installed (pip install -e '.[test]')"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return str(script)


#: A token the listening proxy is started with.
TOKEN = "t0ken-for-the-mcp-proxy-tests"


def _npm_server(package: str) -> list[str]:
    """``node`` and the entry script of an npm reference server (pinned by tests/fixtures/mcp/package-lock.json)."""
    node = require_binary("node")
    script = FIXTURES / "node_modules" / "@modelcontextprotocol" / package / "dist" / "index.js"
    if not script.is_file():
        message = (
            "tests/fixtures/mcp/node_modules is missing (npm ci --prefix tests/fixtures/mcp; scripts/test does it)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return [node, str(script)]


def filesystem_server() -> list[str]:
    """The command of npm's reference filesystem server."""
    return _npm_server("server-filesystem")


def everything_server() -> list[str]:
    """npm's reference server exercising every MCP feature (tools, resources, prompts), stdio transport."""
    return [*_npm_server("server-everything"), "stdio"]


def fixture_server(*args: str) -> list[str]:
    return [sys.executable, "-m", "bus.testing._mcp_server", *args]


def proxy_env(nats_url: str, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    python_path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": python_path, "NATS_URL": nats_url, "XDG_STATE_HOME": str(state), **extra}


@contextlib.asynccontextmanager
async def over_stdio(env: dict[str, str], *args: str) -> AsyncIterator[ClientSession]:
    """A ClientSession on ``hookbus mcp ARGS`` spawned as Claude Code spawns a stdio server, initialized."""
    command = hookbus_cmd()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp", *args], env=env, cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def over_http(url: str, token: str = TOKEN) -> AsyncIterator[ClientSession]:
    """A ClientSession on a streamable HTTP endpoint with a bearer token, initialized."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", None) == "text")
