"""``hookbus worker``: run only the shell-hook worker, against an existing NATS.

Start it on as many machines as you like with the same ``--queue``: they share
the events, and each event's hooks run on one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from contextlib import AsyncExitStack
from pathlib import Path

from prometheus_client import start_http_server

from bus.cli.common import add_nats_url
from bus.errors import ConfigError


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
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=-1,
        help="serve Prometheus /metrics (per-hook metrics) on this port; 0: any free port (default: -1, off)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
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
    async with AsyncExitStack() as stack:
        worker = await stack.enter_async_context(ShellWorker(await stack.enter_async_context(bus), workspace, **kwargs))
        hooks = f"{worker.hooks.path} ({len(worker.config.entries)} hooks)"
        metrics = _serve_metrics(stack, args.host, args.metrics_port)
        print(
            f"hookbus worker: {hooks} on {', '.join(bus.servers)}, queue group {worker.queue or '-'}{metrics}; ready",
            flush=True,
        )
        await stop.wait()
    print("hookbus worker: stopped", flush=True)
    return 0


def _serve_metrics(stack: AsyncExitStack, host: str, port: int) -> str:
    """Start /metrics unless port is -1; the banner fragment saying where."""
    if port < 0:
        return ""
    try:
        httpd, thread = start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    stack.callback(thread.join, 5)
    stack.callback(httpd.server_close)
    stack.callback(httpd.shutdown)
    return f", metrics http://{host}:{httpd.server_port}/metrics"
