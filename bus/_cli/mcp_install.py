"""``hookbus mcp install --client claude-code|codex|cursor|agents-sdk``: the client's entry, wrapped by the proxy.

Claude Code (``.mcp.json``) and Cursor (``.cursor/mcp.json``) read an
``mcpServers`` object; Codex reads ``[mcp_servers.NAME]`` tables from its
``config.toml``. The entry runs ``hookbus mcp --name NAME -- COMMAND ARGS``
(or ``--url URL``), so the client talks to the proxy as it talked to the server.
``--write [PATH]`` merges it into the client's file instead of printing it
(:mod:`bus._cli.mcp_config`). For the OpenAI Agents SDK the snippet is Python:
the SDK's own server object with its calls on the guards in-process
(``bus.adapters.openai_agents.guard_mcp_calls``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any, Final

import orjson

CLIENTS: Final = ("claude-code", "codex", "cursor", "agents-sdk")
#: The clients with a config file ``--write`` merges into.
FILE_CLIENTS: Final = ("claude-code", "codex", "cursor")


def configure_install(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", choices=CLIENTS, required=True, help="the MCP client whose entry is printed")
    parser.add_argument(
        "--write",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="merge the entry into the client's file (default: .mcp.json, .cursor/mcp.json, Codex's config.toml)",
    )
    parser.add_argument("--force", action="store_true", help="with --write: replace an entry of the same name")


def _program() -> tuple[str, list[str]]:
    """How the client starts the proxy: the installed script, else this interpreter's module."""
    script = shutil.which("hookbus")
    return (script, []) if script else (sys.executable, ["-m", "bus._cli"])


def entry(name: str, upstream: list[str], url: str | None, extra: list[str]) -> dict[str, Any]:
    """The server entry: ``command`` and ``args`` that run the proxy in front of the server."""
    program, prefix = _program()
    target = ["--url", url] if url else ["--", *upstream]
    return {"command": program, "args": [*prefix, "mcp", "--name", name, *extra, *target]}


def _toml_string(text: str) -> str:
    return orjson.dumps(text).decode()  # a JSON string is a TOML basic string (the same escapes)


def _python(name: str, upstream: list[str], url: str | None) -> str:
    """The Agents SDK snippet: the server object, its tool calls on the fleet's guards."""
    if url:
        made = f"MCPServerStreamableHttp(params={{'url': {url!r}}}, name={name!r})"
        kind = "MCPServerStreamableHttp"
    else:
        made = f"MCPServerStdio(params={{'command': {upstream[0]!r}, 'args': {upstream[1:]!r}}}, name={name!r})"
        kind = "MCPServerStdio"
    return (
        f"from agents.mcp import {kind}\n"
        "from bus.adapters.openai_agents import guard_mcp_calls\n\n"
        f"# every tool call as mcp__{name}__TOOL on tool.call / tool.result (bus: a connected hookbus Bus)\n"
        f"async with {made} as server:\n"
        "    agent = Agent(name=..., mcp_servers=[guard_mcp_calls(server, bus)])\n"
    )


def render(client: str, name: str, server: dict[str, Any]) -> str:
    """The entry as the client's config file spells it."""
    if client == "codex":
        args = ", ".join(_toml_string(a) for a in server["args"])
        key = name if name.replace("-", "").replace("_", "").isalnum() else _toml_string(name)
        return f"[mcp_servers.{key}]\ncommand = {_toml_string(server['command'])}\nargs = [{args}]\n"
    body = {"mcpServers": {name: _file_entry(client, server)}}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def _file_entry(client: str, server: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stdio", **server} if client == "claude-code" else server


def install(args: argparse.Namespace, name: str, upstream: list[str], extra: list[str]) -> int:
    from bus._core.errors import ConfigError

    if args.client == "agents-sdk":
        if args.write is not None:
            raise ConfigError("--write needs a client with a config file, not agents-sdk (its snippet is code)")
        sys.stdout.write(_python(name, upstream, args.url))
        return 0
    server = entry(name, upstream, args.url, extra)
    if args.write is None:
        sys.stdout.write(render(args.client, name, server))
        return 0
    from pathlib import Path

    from bus._cli.mcp_config import default_path, merge

    path = Path(args.write) if args.write else default_path(args.client)
    merge(
        args.client, path, name, _file_entry(args.client, server), render(args.client, name, server), force=args.force
    )
    print(f"hookbus mcp: {name} written to {path}", file=sys.stderr)
    return 0
