"""``hookbus tail [PATTERN]``: print events as they happen."""

from __future__ import annotations

import argparse
import asyncio
import sys

import orjson

from bus.cli.common import add_nats_url, connection_args
from bus.client import Bus
from bus.core.envelope import Event
from bus.core.visible import visible

_MAX_PAYLOAD_CHARS = 200


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tail",
        help="print events live",
        description=(
            "Print events as they happen, one line each. PATTERN: NATS or PRX-style (default: all events; "
            "internal subjects such as _INBOX, $JS and hookbus.* only when PATTERN names them)."
        ),
    )
    parser.add_argument("pattern", nargs="?", default=">")
    parser.add_argument("--json", action="store_true", help="one envelope per line, as on the wire")
    parser.add_argument("--count", type=int, default=0, metavar="N", help="exit after N events")
    add_nats_url(parser)
    parser.set_defaults(func=run)


def format_line(event: Event) -> str:
    """One readable line: time, subject, depth, session, payload (shortened); control characters escaped."""
    clock = visible(event.timestamp[11:23] if len(event.timestamp) >= 23 else event.timestamp)
    payload = orjson.dumps(event.payload).decode()
    if len(payload) > _MAX_PAYLOAD_CHARS:
        payload = payload[: _MAX_PAYLOAD_CHARS - 1] + "…"
    session = f" session={visible(event.session_id)}" if event.session_id else ""
    cut = " truncated" if event.truncated else ""
    return f"{clock} {event.subject} depth={event.depth}{session}{cut} {payload}"


async def run(args: argparse.Namespace) -> int:
    done = asyncio.Event()
    seen = 0

    def show(event: Event) -> None:
        nonlocal seen
        line = event.raw.decode(errors="replace") if args.json else format_line(event)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        seen += 1
        if args.count and seen >= args.count:
            done.set()

    async with Bus(args.nats_url, name="hookbus-tail", **connection_args(args)) as bus:
        await bus.subscribe(args.pattern, show, concurrency=1)
        await bus.flush()
        print(f"tailing {args.pattern} on {', '.join(bus.servers)}", file=sys.stderr, flush=True)
        await done.wait()
    return 0
