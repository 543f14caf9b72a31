"""The command-line options of a shell-hook worker, shared by ``hookbus up`` and ``hookbus worker``."""

from __future__ import annotations

import argparse
from typing import Any

from bus.core.errors import ConfigError
from subscribers.shell_hooks.limits import DEFAULT_KILL_GRACE, DEFAULT_MAX_PROCS, DEFAULT_QUEUE, DEFAULT_QUEUE_SIZE


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """Add --queue, --max-procs, --queue-size, --kill-grace."""
    group = parser.add_argument_group("shell hooks")
    group.add_argument(
        "--queue",
        default=DEFAULT_QUEUE,
        help="queue group shared by workers that split the events; '' for none (default: %(default)s)",
    )
    group.add_argument(
        "--max-procs",
        type=int,
        default=DEFAULT_MAX_PROCS,
        help="hook processes at once, per event key (default: %(default)s)",
    )
    group.add_argument(
        "--queue-size",
        type=int,
        default=DEFAULT_QUEUE_SIZE,
        help="events of one key waiting for a slot before that key sheds (default: %(default)s)",
    )
    group.add_argument(
        "--kill-grace",
        type=float,
        default=DEFAULT_KILL_GRACE,
        help="seconds between SIGTERM and SIGKILL on a hook timeout (default: %(default)s)",
    )


def worker_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """ShellWorker keyword arguments from parsed options."""
    if args.max_procs < 1 or args.queue_size < 1:
        raise ConfigError("--max-procs and --queue-size must be at least 1")
    if args.kill_grace < 0:
        raise ConfigError("--kill-grace must not be negative")
    return {
        "queue": args.queue or None,
        "max_procs": args.max_procs,
        "queue_size": args.queue_size,
        "kill_grace": args.kill_grace,
    }
