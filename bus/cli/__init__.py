"""The ``hookbus`` command line.

Each subcommand lives in its own module with a ``register(subparsers)`` that
adds its parser and sets ``func``, a coroutine taking the parsed arguments and
returning an exit code. Errors hookbus raises on purpose are one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from bus.cli import (
    agent,
    approvals,
    approve,
    chain,
    demo,
    detach,
    emit,
    events,
    hooks,
    intercept,
    journal,
    tail,
    triggers,
    up,
    worker,
)
from bus.core.errors import HookbusError

_COMMANDS = (
    up,
    worker,
    agent,
    emit,
    tail,
    events,
    journal,
    hooks,
    triggers,
    chain,
    intercept,
    approvals,
    approve,
    detach,
    demo,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookbus",
        description="An event bus and middleware bus for AI-agent lifecycle hooks, on NATS.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in _COMMANDS:
        command.register(subparsers)
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="hookbus: %(levelname)s: %(message)s", stream=sys.stderr)
    # nats-py logs every failed reconnect attempt with a traceback; hookbus reports them itself.
    logging.getLogger("nats").setLevel(logging.CRITICAL if verbosity < 2 else logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hookbus`` console script."""
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        code: int = asyncio.run(args.func(args))
    except HookbusError as exc:
        print(f"hookbus: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head and the like
        sys.stderr.close()
        return 0
    return code
