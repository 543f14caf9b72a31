"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from bus.connection import URL_ENV
from bus.errors import ConfigError


def add_nats_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--nats-url",
        metavar="URL",
        default=None,
        help=f"NATS server(s), comma-separated (default: ${URL_ENV}, else nats://127.0.0.1:4222)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to retry the first connection (default: 5)",
    )


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
