"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Iterable
from contextlib import AsyncExitStack

from bus._cli.options import add_nats_url, connection_args, credentials_of, read_json_object
from bus._core.errors import ConfigError

__all__ = [  # the connection flags and JSON arguments live in bus._cli.options (light enough for hookbus emit)
    "add_metrics_port",
    "add_nats_url",
    "connection_args",
    "credentials_of",
    "hint_event",
    "hint_stage",
    "read_json_object",
    "serve_metrics",
    "stop_on_signals",
]


def add_metrics_port(parser: argparse.ArgumentParser, default: int = -1) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=default,
        help=f"serve Prometheus /metrics on this port; 0: any free port; -1: off (default: {default})",
    )


def serve_metrics(stack: AsyncExitStack, host: str, port: int) -> str | None:
    """Serve /metrics until ``stack`` closes, unless ``port`` is -1; returns its URL."""
    if port < 0:
        return None
    from prometheus_client import start_http_server

    from bus._metrics import register_collectors

    register_collectors()
    try:
        httpd, thread = start_http_server(port, addr=host)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    stack.callback(thread.join, 5)
    stack.callback(httpd.server_close)
    stack.callback(httpd.shutdown)
    return f"http://{host}:{httpd.server_port}/metrics"


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM: long-running commands stop cleanly on either."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def hint_stage(stage: str, declared: Iterable[str] = (), command: str = "hookbus") -> None:
    """On stderr, when ``stage`` is neither built in nor declared and looks like one that is: the one it
    probably misspells. Exit codes stay as they are (a free stage name is legitimate)."""
    from bus._core.catalog import suggest_stage

    meant = suggest_stage(stage, declared)
    if meant is not None:
        print(f"{command}: {stage!r} is no built-in or declared stage: did you mean {meant}?", file=sys.stderr)


def hint_event(name: str, command: str = "hookbus") -> None:
    """On stderr, when an event name or pattern with no wildcard names no known event and looks like one."""
    from bus._core.catalog import pattern_hint

    meant = pattern_hint(name)
    if meant is not None:
        print(f"{command}: {name!r} matches no known event: did you mean {meant}?", file=sys.stderr)
