"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from contextlib import AsyncExitStack
from typing import Any, Final

import orjson
from prometheus_client import start_http_server

from bus.core.errors import ConfigError
from bus.metrics import register_collectors
from bus.transport.connection import URL_ENV, Credentials


def add_nats_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nats-url",
        metavar="URL",
        default=None,
        help=f"NATS server(s), comma-separated (default: ${URL_ENV}, else nats://127.0.0.1:4222)",
    )
    auth = parser.add_argument_group("NATS credentials and TLS (flags win over the HOOKBUS_NATS_* variables)")
    for flag, variable in _AUTH_FLAGS.items():
        auth.add_argument(flag, dest=_dest(flag), metavar="VALUE", help=f"default: ${variable}")
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to retry the first connection (default: 5)",
    )


_AUTH_FLAGS = {
    "--nats-user": "HOOKBUS_NATS_USER",
    "--nats-password": "HOOKBUS_NATS_PASSWORD",
    "--nats-token": "HOOKBUS_NATS_TOKEN",
    "--nats-creds": "HOOKBUS_NATS_CREDS",
    "--nats-nkey-seed": "HOOKBUS_NATS_NKEY_SEED",
    "--nats-inbox": "HOOKBUS_NATS_INBOX",
    "--tls-ca": "HOOKBUS_NATS_TLS_CA",
    "--tls-cert": "HOOKBUS_NATS_TLS_CERT",
    "--tls-key": "HOOKBUS_NATS_TLS_KEY",
}


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def credentials_of(args: argparse.Namespace) -> Credentials:
    """The credential and TLS flags given, for the Bus a command opens (unset ones fall back to the variables)."""
    return Credentials(**{_FIELD[flag]: getattr(args, _dest(flag), None) or None for flag in _AUTH_FLAGS})


def connection_args(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``Bus`` from the connection flags: the connect budget and the credentials."""
    return {"connect_timeout": args.connect_timeout, "credentials": credentials_of(args)}


#: The Credentials field each flag sets.
_FIELD: Final = {
    "--nats-user": "user",
    "--nats-password": "password",
    "--nats-token": "token",
    "--nats-creds": "creds",
    "--nats-nkey-seed": "nkey_seed",
    "--nats-inbox": "inbox",
    "--tls-ca": "tls_ca",
    "--tls-cert": "tls_cert",
    "--tls-key": "tls_key",
}


def read_json_object(text: str | None, what: str) -> dict[str, Any]:
    """Parse a JSON object from an argument, or from stdin when ``text`` is None or '-'."""
    if text is None or text == "-":
        text = "" if text is None and sys.stdin.isatty() else sys.stdin.read()
    if not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


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
