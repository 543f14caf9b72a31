"""Connection flags and JSON arguments: what ``hookbus emit`` shares with the other commands.

Importable without the bus (no nats-py, no asyncio), so that the one-shot
``hookbus emit`` loads no more than it needs; :mod:`bus._cli.common` re-exports it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Final

from bus._cli.parser import in_help_only
from bus._core.errors import ConfigError
from bus._core.json_types import json_object
from bus._transport.endpoints import URL_ENV, Credentials

if TYPE_CHECKING:
    from bus._client import Bus

#: How long a command that does one thing and exits retries a server that is not there (then it says so).
ONE_SHOT_CONNECT_S: Final = 0.5
#: How long a long-running service retries its first connect (it may start before the server).
SERVICE_CONNECT_S: Final = 5.0

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
_AUTH_HELP = {
    "--nats-user": "NATS user name",
    "--nats-password": "NATS user's password",
    "--nats-token": "NATS authentication token",
    "--nats-creds": "a NATS .creds file (JWT and nkey seed)",
    "--nats-nkey-seed": "a file holding an nkey seed",
    "--nats-inbox": "the prefix of this connection's reply subjects (default: _INBOX.<user>)",
    "--tls-ca": "CA certificate file the server's certificate must chain to",
    "--tls-cert": "client certificate file (with --tls-key)",
    "--tls-key": "client key file (with --tls-cert)",
}
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


def add_nats_url(parser: argparse.ArgumentParser, *, connect_s: float = ONE_SHOT_CONNECT_S) -> None:
    """--nats-url, --connect-timeout (default ``connect_s``), and the credential flags in a help section."""
    parser.add_argument(
        "--nats-url",
        metavar="URL",
        default=None,
        help=f"NATS server(s), comma-separated (default: ${URL_ENV}, else nats://127.0.0.1:4222)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=connect_s,
        metavar="SECONDS",
        help=f"how long to retry the first connection (default: {connect_s:g})",
    )
    auth = parser.add_argument_group(
        "NATS credentials and TLS", "Each flag wins over its HOOKBUS_NATS_* variable, named in brackets."
    )
    added = [
        auth.add_argument(flag, dest=_dest(flag), metavar="VALUE", help=f"{_AUTH_HELP[flag]} [${variable}]")
        for flag, variable in _AUTH_FLAGS.items()
    ]
    in_help_only(added)


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def credentials_of(args: argparse.Namespace) -> Credentials:
    """The credential and TLS flags given, for the Bus a command opens (unset ones fall back to the variables)."""
    return Credentials(**{_FIELD[flag]: getattr(args, _dest(flag), None) or None for flag in _AUTH_FLAGS})


def connection_args(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``Bus`` from the connection flags: the connect budget and the credentials."""
    return {"connect_timeout": args.connect_timeout, "credentials": credentials_of(args)}


def command_bus(args: argparse.Namespace, name: str, **options: Any) -> Bus:
    """The Bus a command opens: at ``--nats-url`` with its connection flags, named ``name``; ``options``: the rest."""
    from bus._client import Bus

    return Bus(args.nats_url, name=name, **connection_args(args), **options)


def parse_json_object(text: str, what: str) -> dict[str, Any]:
    """A JSON object from text; a ConfigError naming ``what`` and the JSON type found otherwise."""
    return json_object(text, what, ConfigError)


def read_json_object(text: str | None, what: str) -> dict[str, Any]:
    """Parse a JSON object from an argument, or from stdin when ``text`` is None or '-'."""
    if text is None or text == "-":
        text = "" if text is None and sys.stdin.isatty() else sys.stdin.read()
    if not text.strip():
        return {}
    return parse_json_object(text, what)
