"""The shell-hook worker's command-line options, shared by ``hookbus up`` and ``hookbus worker``.

The flags become a WorkerSettings; the worker never sees the parsed flags.
"""

from __future__ import annotations

import argparse

from bus._core.errors import ConfigError
from bus._sandbox.process import DEFAULT_KILL_GRACE
from subscribers.shell_hooks._limits import (
    DEFAULT_MAX_PROCS,
    DEFAULT_OUTPUT_TAIL,
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_SIZE,
    MAX_OUTPUT_TAIL,
)
from subscribers.shell_hooks._settings import WorkerSettings


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
    group.add_argument(
        "--output-tail",
        type=int,
        default=DEFAULT_OUTPUT_TAIL,
        metavar="BYTES",
        help=f"last bytes of each hook run's stdout and stderr kept in the journal, 0-{MAX_OUTPUT_TAIL} "
        "(default: %(default)s)",
    )


def worker_settings(args: argparse.Namespace) -> WorkerSettings:
    """The worker's settings from parsed options (errors name the flags)."""
    if args.max_procs < 1 or args.queue_size < 1:
        raise ConfigError("--max-procs and --queue-size must be at least 1")
    if args.kill_grace < 0:
        raise ConfigError("--kill-grace must not be negative")
    if not 0 <= args.output_tail <= MAX_OUTPUT_TAIL:
        raise ConfigError(f"--output-tail {args.output_tail} must be in 0..{MAX_OUTPUT_TAIL}")
    return WorkerSettings(
        queue=args.queue or None,
        max_procs=args.max_procs,
        queue_size=args.queue_size,
        kill_grace_s=args.kill_grace,
        output_tail_bytes=args.output_tail,
    )
