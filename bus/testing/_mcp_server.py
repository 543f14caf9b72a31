"""An MCP server built on the SDK's MCPServer, for what the reference servers do not do: hang and die.

``python -m bus.testing._mcp_server`` serves stdio; ``--http PORT`` serves
streamable HTTP at /mcp on 127.0.0.1. Tools: ``echo`` answers its text,
``hang`` never answers, ``die`` ends the process mid-call.
"""

from __future__ import annotations

import argparse
import os

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("fixture")


@server.tool()
def echo(text: str) -> str:
    """Answer ``text`` unchanged."""
    return text


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "never"


@server.tool()
def die() -> str:
    """End the server process in the middle of the call."""
    os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
