"""``hookbus worker``: run only the shell-hook worker, against an existing NATS.

Start it on as many machines as you like with the same ``--queue``: they share
the events, and each event's hooks run on one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from bus.cli.common import add_nats_url


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from subscribers.worker_options import add_worker_options

    parser = subparsers.add_parser(
        "worker",
        help="run the shell hooks of a workspace against an existing NATS",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workspace", type=Path, default=Path(".hookbus"), help="workspace with hooks.json (default: ./.hookbus)"
    )
    add_nats_url(parser)
    add_worker_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus.client import Bus
    from subscribers.worker import ShellWorker
    from subscribers.worker_options import worker_kwargs

    workspace: Path = args.workspace.resolve()
    kwargs = worker_kwargs(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bus = Bus(args.nats_url, name="hookbus-worker", connect_timeout=args.connect_timeout)
    async with bus, ShellWorker(bus, workspace, **kwargs) as worker:
        hooks = f"{worker.hooks.path} ({len(worker.config.entries)} hooks)"
        print(
            f"hookbus worker: {hooks} on {', '.join(bus.servers)}, queue group {worker.queue or '-'}; ready", flush=True
        )
        await stop.wait()
    print("hookbus worker: stopped", flush=True)
    return 0
