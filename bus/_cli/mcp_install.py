"""``hookbus mcp install --client claude-code|codex|cursor``: the client's server entry, wrapped by ``hookbus mcp``.

Claude Code (``.mcp.json``) and Cursor (``.cursor/mcp.json``) read an
``mcpServers`` object; Codex reads ``[mcp_servers.NAME]`` tables from its
``config.toml``. The entry runs ``hookbus mcp --name NAME -- COMMAND ARGS``
(or ``--url URL``), so the client talks to the proxy as it talked to the server.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any, Final

import orjson

CLIENTS: Final = ("claude-code", "codex", "cursor")


def configure_install(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", choices=CLIENTS, required=True, help="the MCP client whose entry is printed")


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


def render(client: str, name: str, server: dict[str, Any]) -> str:
    """The entry as the client's config file spells it."""
    if client == "codex":
        args = ", ".join(_toml_string(a) for a in server["args"])
        key = name if name.replace("-", "").replace("_", "").isalnum() else _toml_string(name)
        return f"[mcp_servers.{key}]\ncommand = {_toml_string(server['command'])}\nargs = [{args}]\n"
    body = {"mcpServers": {name: {"type": "stdio", **server} if client == "claude-code" else server}}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def install(args: argparse.Namespace, name: str, upstream: list[str], extra: list[str]) -> int:
    sys.stdout.write(render(args.client, name, entry(name, upstream, args.url, extra)))
    return 0
