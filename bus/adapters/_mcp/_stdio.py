"""The stdio sides of the proxy: the client on this process's stdin/stdout, a server spawned as a child.

The SDK's stdio server reads lines of any length; here stdin is read in lines
of at most ``max_bytes`` (a longer one is skipped in bounded chunks, and the
request it carried, when its id can be read from its start, is answered with
an error), so one message costs the proxy bounded memory and work. When stdin
and stdout are pipes they are read and written on the event loop
(:mod:`bus.adapters._mcp._pipes`), not in a worker thread per message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping
from typing import IO, Any, Final, cast

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.server.stdio import stdio_server

from bus.adapters._mcp._messages import OVERSIZED
from bus.adapters._mcp._pipes import PipeReader, PipeWriter, claimed_stdout, is_pipe, nonblocking
from bus.adapters._mcp._proxy import Streams

log = logging.getLogger(__name__)

#: The largest message read from the client, in bytes (a tool call's arguments, a file to write).
DEFAULT_MAX_MESSAGE: Final = 4 * 1024 * 1024
#: Variables the server does not inherit: the proxy's own bus credentials and settings.
_PRIVATE_PREFIXES: Final = ("HOOKBUS_", "NATS_")
_ID_RE: Final = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")')


class BoundedLines:
    """The lines of a binary stream as text, none longer than ``max_bytes``."""

    def __init__(self, raw: IO[bytes] | PipeReader, max_bytes: int) -> None:
        self._raw = raw
        self.max_bytes = max_bytes

    async def _readline(self) -> bytes:
        if isinstance(self._raw, PipeReader):
            return await self._raw.readline(self.max_bytes + 1)
        # a worker thread per read (as anyio's wrap_file), given up on at shutdown: a blocked read of stdin never ends
        return await anyio.to_thread.run_sync(self._raw.readline, self.max_bytes + 1, abandon_on_cancel=True)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await self._readline()
            if not line:
                return
            if len(line) > self.max_bytes and not line.endswith(b"\n"):
                yield await self._skip(line)
                continue
            yield line.decode("utf-8", errors="replace")

    async def _skip(self, head: bytes) -> str:
        size = len(head)
        while True:
            rest = await self._readline()
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        log.warning("hookbus mcp: a client message of %d bytes is over %d: refused", size, self.max_bytes)
        found = _ID_RE.search(head[:4096])
        if found is None:
            return "\n"  # not JSON: the SDK reports it, the proxy logs it
        request_id = found.group(1).decode()
        params = f'{{"bytes":{size},"limit":{self.max_bytes}}}'
        return f'{{"jsonrpc":"2.0","id":{request_id},"method":"{OVERSIZED}","params":{params}}}\n'


@contextlib.asynccontextmanager
async def client_on_stdio(max_bytes: int = DEFAULT_MAX_MESSAGE) -> AsyncIterator[Streams]:
    """The MCP client that started this process, on its stdin and stdout."""
    if not (is_pipe(0) and is_pipe(1)):
        lines = BoundedLines(sys.stdin.buffer, max_bytes)
        async with stdio_server(stdin=cast(Any, lines)) as (read, write):
            yield Streams(read, write)
        return
    with nonblocking(0), claimed_stdout() as wire, nonblocking(wire):
        lines = BoundedLines(PipeReader(0), max_bytes)
        async with stdio_server(stdin=cast(Any, lines), stdout=cast(Any, PipeWriter(wire))) as (read, write):
            yield Streams(read, write)


def server_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the server process inherits: this process's environment without the bus's credentials."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if not k.startswith(_PRIVATE_PREFIXES)}


@contextlib.asynccontextmanager
async def server_on_stdio(command: str, args: list[str]) -> AsyncIterator[Streams]:
    """The MCP server ``command args``, spawned as a child speaking on its stdin and stdout."""
    params = StdioServerParameters(command=command, args=args, env=server_environment())
    async with stdio_client(params) as (read, write):
        yield Streams(read, write)
