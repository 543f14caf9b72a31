"""``hookbus isolate [OPTIONS] -- COMMAND [ARGS]``: run any command in the sandbox isolated shell hooks get.

The same function fences it in (bus/_sandbox/isolation.py): its
own namespaces, no network unless ``--network``, a private /proc, the file
system read-only but the current directory (a private scratch directory
instead when it is inside a hidden one), ``--hide`` directories invisible,
secrets in the current directory masked, and memory, CPU-time and process
limits. For processes the bus starts on a user's behalf outside the
shell-hook worker, for example ``hookbus isolate --network --hide WORKSPACE
-- hookbus runner ...`` for the runner of stored handler records (it needs
the network to reach NATS). Exits with the command's status; exits 2 without
running it when isolation cannot be had here.
"""

from __future__ import annotations

import argparse

from bus._cli.parser import CommandParser, add_command


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "isolate", "run a command in the sandbox of isolated shell hooks", __doc__)
    parser.add_argument("--network", action="store_true", help="keep the network (default: loopback only)")
    parser.add_argument("--memory-mb", type=int, default=None, help="address-space limit in MiB (default 512)")
    parser.add_argument("--cpu-s", type=int, default=None, help="CPU-time limit in seconds (default 60)")
    parser.add_argument("--max-procs", type=int, default=None, help="process limit (default 64)")
    parser.add_argument("--hide", action="append", default=[], metavar="DIR", help="a directory it may not see")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS]")
    if isinstance(parser, CommandParser):
        parser.keep_order()
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    import asyncio

    return await asyncio.to_thread(_run, args)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import msgspec

    from bus._core.errors import ConfigError
    from bus._sandbox.config_schema import Isolation
    from bus._sandbox.isolation import run_isolated

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ConfigError("isolate: give the command after --")
    given = {"network": args.network, "memory_mb": args.memory_mb, "cpu_s": args.cpu_s, "max_procs": args.max_procs}
    try:
        isolation = msgspec.convert({k: v for k, v in given.items() if v is not None}, Isolation)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"isolate: {exc}") from None
    hidden = [Path(path).resolve() for path in args.hide]
    return run_isolated(command, isolation, Path.cwd(), hidden)
