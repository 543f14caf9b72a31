"""``hookbus tail [PATTERN]``: print events as they happen."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from bus._cli.common import add_nats_url, hint_event, stop_on_signals
from bus._cli.options import command_bus
from bus._cli.tail_history import HistoryThenLive
from bus._core.envelope import Event
from bus._core.errors import PayloadRefError
from bus._runtime.visible import visible

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
    parser.add_argument(
        "pattern", nargs="?", default=">", help="subjects to show: prx.*, tool_call, eva.custom.> (default: all events)"
    )
    parser.add_argument("--json", action="store_true", help="one envelope per line, as on the wire")
    parser.add_argument(
        "--full",
        action="store_true",
        help="whole payloads: not shortened, and fetched from the object store for events over the size limit",
    )
    parser.add_argument("--count", type=int, default=0, metavar="N", help="exit after N events")
    parser.add_argument(
        "--since",
        metavar="DURATION",
        help="first the recorded events of the last DURATION (10m, 24h; hookbus up --record)",
    )
    parser.add_argument("--session", help="only this session's events (recorded ones too: all of them without --since)")
    add_nats_url(parser)
    parser.set_defaults(func=run)


def format_line(event: Event, whole: dict[str, Any] | None = None) -> str:
    """One readable line: time, subject, depth, session, payload (shortened unless ``whole`` is given).

    Control characters are escaped.
    """
    clock = visible(event.timestamp[11:23] if len(event.timestamp) >= 23 else event.timestamp)
    payload = orjson.dumps(event.payload if whole is None else whole).decode()
    if whole is None and len(payload) > _MAX_PAYLOAD_CHARS:
        payload = payload[: _MAX_PAYLOAD_CHARS - 1] + "…"
    session = f" session={visible(event.session_id)}" if event.session_id else ""
    cut = " truncated" if event.truncated and (whole is None or event.payload_ref is None) else ""
    return f"{clock} {event.subject} depth={event.depth}{session}{cut} {payload}"


def _line(event: Event, as_json: bool) -> str:
    return event.raw.decode(errors="replace") if as_json else format_line(event)


async def _full_line(event: Event, as_json: bool) -> str:
    """The line with the whole payload; the preview and a note on stderr when it cannot be had."""
    try:
        whole = await event.full_payload()
        raw = await event.full_raw()
    except PayloadRefError as exc:
        print(f"hookbus tail: {exc}; showing the preview", file=sys.stderr, flush=True)
        return _line(event, as_json)
    return raw.decode(errors="replace") if as_json else format_line(event, whole)


async def run(args: argparse.Namespace) -> int:
    hint_event(args.pattern, "hookbus tail")
    done = stop_on_signals()  # set by --count, SIGINT or SIGTERM: also when SIGINT came in ignored (a background job)
    seen = 0

    async def show(event: Event) -> None:
        nonlocal seen
        line = await _full_line(event, args.json) if args.full else _line(event, args.json)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        seen += 1
        if args.count and seen >= args.count:
            done.set()

    history = HistoryThenLive(show, args.pattern, args.since, args.session) if args.since or args.session else None
    async with command_bus(args, "hookbus-tail") as bus:
        await bus.subscribe(args.pattern, history.live if history else show, concurrency=1)
        await bus.flush()
        if history:
            await history.replay(bus, done.is_set)
        print(f"tailing {args.pattern} on {', '.join(bus.servers)}", file=sys.stderr, flush=True)
        await done.wait()
    return 0
