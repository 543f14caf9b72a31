"""``hookbus mcp [--name SERVER] -- COMMAND ARGS...`` / ``--url URL`` [``--listen HOST:PORT``]: the MCP proxy.

An MCP client runs this where it ran the server; the proxy runs the server
(or connects to its URL) and passes every message through, with tool calls,
results, tool lists and resource reads on the bus's stages
(:mod:`bus.adapters._mcp`). It connects as the agent's NATS user (the usual
credential flags and variables). When the bus cannot be reached it applies
the fail-closed guards last seen (the state file ``hookbus claude-hook``
keeps), or refuses every call with ``--fail-closed``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bus._cli.mcp_install import configure_install
from bus._cli.options import add_nats_url, command_bus

if TYPE_CHECKING:
    from bus.adapters._mcp._gate import Gate
    from bus.adapters._mcp._proxy import McpProxy, Streams

#: The variable holding the bearer token ``--listen`` requires of its clients.
TOKEN_VARIABLE: Final = "HOOKBUS_MCP_TOKEN"
#: Seconds the proxy retries its first connect to the bus (a client waits for the server's start meanwhile).
CONNECT_S: Final = 2.0

DESCRIPTION: Final = (
    "A transparent MCP proxy: runs the MCP server COMMAND (or connects to --url) and passes every message "
    "through, with each tools/call on tool.call (as mcp__SERVER__TOOL) before the server sees it, its result "
    "on tool.result, tools/list filtered on tool.list and resources/read on resource.read; every call and "
    "result is a lifecycle event. 'hookbus mcp install --client claude-code|codex|cursor|agents-sdk "
    "-- COMMAND ARGS' prints the client's entry for it (--write merges it into the client's file)."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None, help="the server's name in tool names (default: the command's name)")
    parser.add_argument("--url", default=None, help="the MCP server's streamable HTTP URL (instead of a command)")
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=None,
        help=f"serve streamable HTTP at /mcp (${TOKEN_VARIABLE} is the bearer token)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds a request waits for the server (60)")
    parser.add_argument("--max-message", type=int, default=None, help="largest client message in bytes (4 MiB)")
    parser.add_argument("--max-sessions", type=int, default=None, help="with --listen: sessions open at once (32)")
    parser.add_argument("--session", default=None, help="the session id the events and intercepts carry")
    parser.add_argument(
        "--fail-closed", action="store_true", help="refuse every guarded call when the bus cannot be reached"
    )
    parser.add_argument("--state", type=Path, default=None, help="file remembering the fail-closed guards")
    add_nats_url(parser, connect_s=CONNECT_S)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mcp", help="an MCP server behind the bus's guards (install: a client's entry)", description=DESCRIPTION
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="[install --client C] [options] -- COMMAND ARGS...")
    parser.set_defaults(func=_from_parser)


async def _from_parser(args: argparse.Namespace) -> int:
    return await run(list(args.rest))


def main(argv: list[str]) -> int:
    """``hookbus mcp ...`` as dispatched by ``bus._cli.main``, without the other commands."""
    import asyncio

    from bus._cli.running import configure_logging, guarded

    configure_logging(0)
    return guarded(lambda: asyncio.run(run(argv)))


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], bool]:
    """The options, the server command, and whether this is ``install``."""
    from bus._cli.parser import CommandParser
    from bus._core.errors import ConfigError

    install = argv[:1] == ["install"]
    options, command = _split(argv[1:] if install else argv)
    parser = CommandParser(prog="hookbus mcp" + (" install" if install else ""), description=DESCRIPTION)
    configure(parser)
    if install:
        configure_install(parser)
    args = parser.parse_args(options)
    if bool(command) == bool(args.url):
        raise ConfigError("hookbus mcp needs a server: '-- COMMAND ARGS...' or --url URL (one of them)")
    if args.name is None:
        args.name = Path(command[0]).name if command else "remote"
    return args, command, install


async def run(argv: list[str]) -> int:
    args, command, install = parse(argv)
    if install:
        from bus._cli.mcp_install import install as print_entry

        return print_entry(args, args.name, command, [])
    async with _gate(args) as gate:
        if args.listen:
            await _listen(args, command, gate)
        else:
            from bus.adapters._mcp._proxy import run_with
            from bus.adapters._mcp._stdio import DEFAULT_MAX_MESSAGE, client_on_stdio

            async with client_on_stdio(args.max_message or DEFAULT_MAX_MESSAGE) as client:
                await run_with(_proxy(args, gate, args.session), client, _upstream(args, command))
    return 0


def _upstream(args: argparse.Namespace, command: list[str]) -> Callable[[], AbstractAsyncContextManager[Streams]]:
    if args.url:
        from bus.adapters._mcp._http import server_at_url

        return lambda: server_at_url(args.url)
    from bus.adapters._mcp._stdio import server_on_stdio

    return lambda: server_on_stdio(command[0], command[1:])


def _proxy(args: argparse.Namespace, gate: Gate, session: str | None) -> McpProxy:
    from bus.adapters._mcp._proxy import DEFAULT_MAX_IN_FLIGHT, DEFAULT_TIMEOUT_S, McpProxy, ProxySettings

    ctx: dict[str, Any] = {"agent": f"mcp:{args.name}"}
    if session is not None:
        ctx["session"] = session
    settings = ProxySettings(
        server=args.name,
        timeout_s=args.timeout or DEFAULT_TIMEOUT_S,
        max_in_flight=DEFAULT_MAX_IN_FLIGHT,
        session_id=session,
        ctx=ctx,
    )
    return McpProxy(gate, settings)


@contextlib.asynccontextmanager
async def _gate(args: argparse.Namespace) -> AsyncIterator[Gate]:
    """The bus as the agent's user; without one, the guards remembered for its servers."""
    from bus._cli.agent_hook import recalled, recalled_entry, remember
    from bus._core.errors import HookbusError
    from bus._transport.endpoints import resolve_servers
    from bus.adapters._mcp._gate import MATCHES, MCP_STAGES, OfflineGate, fail_closed_guards, fail_closed_matches

    servers = resolve_servers(args.nats_url)
    bus = command_bus(args, f"hookbus-mcp-{args.name}")
    try:
        await bus.__aenter__()
    except HookbusError as exc:
        print(f"hookbus mcp: the bus cannot be reached ({exc}); the remembered guards apply", file=sys.stderr)
        matches = recalled_entry(args, servers).get(MATCHES)
        yield OfflineGate(
            recalled(args, servers),
            str(exc),
            fail_closed=args.fail_closed,
            matches=matches if isinstance(matches, dict) else None,
        )
        return

    def seen() -> None:
        guards: dict[str, Any] = {**fail_closed_guards(bus), MATCHES: fail_closed_matches(bus)}
        remember(args, servers, guards, (*MCP_STAGES, MATCHES))

    try:
        await bus.middleware.start()
        seen()
        yield bus
        seen()
    finally:
        await bus.__aexit__(None, None, None)


async def _listen(args: argparse.Namespace, command: list[str], gate: Gate) -> None:
    from bus._core.errors import ConfigError
    from bus.adapters._mcp._http import DEFAULT_MAX_SESSIONS, ProxySessions, serve
    from bus.adapters._mcp._stdio import DEFAULT_MAX_MESSAGE

    token = os.environ.get(TOKEN_VARIABLE, "")
    if len(token) < 16:
        raise ConfigError(f"--listen needs a bearer token of at least 16 characters in ${TOKEN_VARIABLE}")
    host, _, port = str(args.listen).rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--listen takes HOST:PORT, not {args.listen!r}")
    hosts = [f"{host}:{port}"] + (
        [f"localhost:{port}", f"127.0.0.1:{port}"] if host in ("127.0.0.1", "localhost") else []
    )
    app = ProxySessions(
        _upstream(args, command),
        lambda session: _proxy(args, gate, args.session or session),
        token,
        hosts,
        max_sessions=args.max_sessions or DEFAULT_MAX_SESSIONS,
    )
    await serve(app, host, int(port), args.max_message or DEFAULT_MAX_MESSAGE)
