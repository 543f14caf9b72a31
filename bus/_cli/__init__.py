"""The ``hookbus`` command line.

Each subcommand lives in its own module with a ``register(subparsers)`` that
adds its parser and sets ``func``, a coroutine taking the parsed arguments and
returning an exit code. Errors hookbus raises on purpose are one line on
stderr and a non-zero exit, never a traceback. Nothing is imported at module
load: ``hookbus emit`` (see :func:`main`) must stay cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    from types import ModuleType


def _commands() -> tuple[ModuleType, ...]:
    """The subcommands in help order, imported when the whole parser is built (``hookbus emit`` is not)."""
    from bus._cli import (
        agent,
        agent_hook,
        approvals,
        approve,
        asks,
        bag,
        chain,
        demo,
        detach,
        emit,
        events,
        hooks,
        intercept,
        isolate,
        journal,
        llm,
        mcp,
        metrics,
        mirror,
        module_trial,
        plugins,
        records,
        reject,
        replay,
        rules,
        runner,
        serve,
        shadow,
        status,
        switch,
        tail,
        triggers,
        up,
        worker,
    )

    return (
        up,
        status,
        worker,
        metrics,
        agent,
        llm,
        emit,
        agent_hook,
        mcp,
        tail,
        events,
        journal,
        replay,
        hooks,
        plugins,
        isolate,
        runner,
        records,
        triggers,
        serve,
        chain,
        intercept,
        approvals,
        approve,
        reject,
        rules,
        mirror,
        detach,
        asks,
        switch,
        shadow,
        bag,
        module_trial,
        demo,
    )


def build_parser() -> argparse.ArgumentParser:
    from bus._cli.parser import CommandParser, add_version

    parser = CommandParser(
        prog="hookbus",
        description="An event bus and middleware bus for AI-agent lifecycle hooks, on NATS.",
    )
    add_version(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _commands():
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookbus`` console script.

    ``hookbus emit`` goes straight to its own module: hooks run it once per
    event, and importing the other commands (and the full NATS client) would
    cost many times the publish itself.
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["emit"]:
        from bus._cli import emit

        return emit.main(arguments[1:])
    # a hook per tool call too: the same one-shot path
    if arguments[:1] in (["claude-hook"], ["codex-hook"], ["gemini-hook"]):
        from bus._cli import agent_hook

        return agent_hook.main(arguments[0], arguments[1:])
    # an MCP client starts the proxy with each session: the same short path
    if arguments[:1] == ["mcp"]:
        from bus._cli import mcp

        return mcp.main(arguments[1:])
    import asyncio

    from bus._cli.running import configure_logging, guarded

    args = build_parser().parse_args(arguments)
    configure_logging(args.verbose)
    return guarded(lambda: int(asyncio.run(args.func(args))))
