"""``hookbus emit SUBJECT [JSON]``: publish one event (or, with --jsonl, many) and exit.

Hooks run this once per event, so it has a path of its own: ``bus._cli.main``
comes here before importing anything else, the envelope comes from the one
encoder (:mod:`bus._core.envelope`), and the publish is one exchange over a
plain socket (:mod:`bus._transport.oneshot`). What that path does not speak
(TLS, nkey or .creds signing, an event over the size limit) goes through the
full client instead, with the same result.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from bus._cli.options import (
    add_nats_url,
    command_bus,
    credentials_of,
    parse_json_object,
    read_json_object,
)
from bus._core.catalog import check_emitted, check_strict
from bus._core.depth import DEFAULT_MAX_DEPTH, DEPTH_ENV, depth_from_env, set_depth
from bus._core.encoder import Encoder
from bus._core.envelope import DEFAULT_MAX_BYTES
from bus._core.errors import CatalogError, ConfigError, HookbusError, PublishDenied
from bus._core.json_types import json_type
from bus._core.subjects import publisher_token, subject_for, wire_subject
from bus._transport import oneshot
from bus._transport.endpoints import credential_values, publishing_user, resolve_servers

#: The client name the server shows for emit's connections.
NAME: Final = "hookbus-emit"
#: An encoder limit nothing reaches: here an event over the real limit goes to the full client whole.
_UNCUT: Final = 1 << 62
#: The fields of a --jsonl line.
_LINE_FIELDS: Final = ("subject", "payload", "session_id")

DESCRIPTION: Final = (
    "Publish one event and exit. SUBJECT is a catalogued subject (prx.lifecycle.tool_call, eva.turn.completed, "
    "eva.custom.<name>; 'hookbus events' lists them) or a PRX event name (tool_call); a name outside the "
    "catalogue is refused with the closest known one, unless --any. The payload is a JSON object from the "
    f"argument or stdin. ${DEPTH_ENV} (set for shell hooks) is the recursion depth the event carries; at the "
    "limit the event is dropped silently. With --jsonl, stdin holds one event per line, "
    '{"subject": ..., "payload": {...}, "session_id": ...} (payload and session_id optional), all sent over one '
    "connection once every line has been checked."
)

Event = tuple[str, dict[str, Any], str | None]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("subject", nargs="?", help="event subject or PRX event name (not with --jsonl)")
    parser.add_argument("payload", nargs="?", default=None, help="a JSON object; '-' or absent: read stdin")
    parser.add_argument("--session", default=None, help="session id the event carries")
    parser.add_argument(
        "--source", default=NAME, help=f"who the events say sent them (the console's source; default: {NAME})"
    )
    parser.add_argument("--jsonl", action="store_true", help="read events from stdin, one JSON object per line")
    parser.add_argument("--any", action="store_true", help="send to a subject outside the catalogue too")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse a catalogued event whose payload lacks a field or has a wrong type (default: a warning)",
    )
    add_nats_url(parser)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("emit", help="publish an event (or many, with --jsonl)", description=DESCRIPTION)
    configure(parser)
    parser.set_defaults(func=run)


def main(argv: list[str]) -> int:
    """``hookbus emit ...`` as dispatched by ``bus._cli.main``, without the other commands."""
    from bus._cli.parser import CommandParser
    from bus._cli.running import guarded

    parser = CommandParser(prog="hookbus emit", description=DESCRIPTION)
    configure(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: emit_now(args))


def collect(args: argparse.Namespace) -> list[Event]:
    """The events to send, each checked: subject rules, the catalogue (unless --any), fields (with --strict)."""
    if args.jsonl:
        if args.subject is not None:
            raise ConfigError("--jsonl reads subjects from stdin: give no SUBJECT")
        events = [_line_event(n, line, args.session) for n, line in enumerate(sys.stdin, 1) if line.strip()]
    elif args.subject is None:
        raise ConfigError("give a SUBJECT (or --jsonl and events on stdin)")
    else:
        events = [(subject_for(args.subject), read_json_object(args.payload, "the payload"), args.session)]
    for subject, payload, _ in events:
        check_emitted(subject, free=args.any)
        try:
            check_strict(subject, payload)
        except CatalogError as exc:
            if args.strict:
                raise
            print(f"hookbus emit: warning: {exc} (sent as it is; --strict refuses it)", file=sys.stderr)
    return events


def _line_event(number: int, line: str, session: str | None) -> Event:
    where = f"stdin line {number}"
    obj = parse_json_object(line, where)
    unknown = sorted(set(obj) - set(_LINE_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(_LINE_FIELDS)})")
    subject, payload, session = obj.get("subject"), obj.get("payload", {}), obj.get("session_id", session)
    if not isinstance(subject, str):
        raise ConfigError(f"{where}: 'subject' must be a string, not {json_type(subject)}")
    if not isinstance(payload, dict):
        raise ConfigError(f"{where}: 'payload' must be a JSON object, not {json_type(payload)}")
    if session is not None and not isinstance(session, str):
        raise ConfigError(f"{where}: 'session_id' must be a string or null, not {json_type(session)}")
    return subject_for(subject), payload, session


def emit_now(args: argparse.Namespace) -> int:
    """Check and encode every event, then send them in one exchange (or through the full client)."""
    events = collect(args)
    depth = depth_from_env()
    encoder = Encoder(_UNCUT, args.source)
    messages = [(subject, encoder.encode(subject, payload, session, depth)[0]) for subject, payload, session in events]
    if depth >= DEFAULT_MAX_DEPTH:
        return _drop_at_the_limit(args, events)
    servers = resolve_servers(args.nats_url)
    settings = credential_values(overrides=credentials_of(args).overrides())
    fits = all(len(data) <= DEFAULT_MAX_BYTES for _, data in messages)
    user = publisher_token(publishing_user(servers, settings))  # vouched as the full client would be
    messages = [(wire_subject(user, subject), data) for subject, data in messages]
    if fits and oneshot.supported(servers, settings):
        sent = oneshot.publish(
            servers,
            messages,
            settings,
            name=NAME,
            min_payload=DEFAULT_MAX_BYTES,
            connect_budget=args.connect_timeout,
        )
        if sent:
            return 0
    return _with_full_client(args, events)


def _drop_at_the_limit(args: argparse.Namespace, events: list[Event]) -> int:
    """The recursion limit drops silently, by contract, and the drop is counted for the fleet.

    The full client drops the events, counts them and sends its counters report
    as it closes (bus/_counters.py): a hook loop ends here, and the fleet's
    recursion alert sees it. Rare, so the one-shot path's speed is not at stake.
    """
    import contextlib

    with contextlib.suppress(HookbusError):  # no bus to report to: the drop stays silent
        _with_full_client(args, events)
    return 0


def _with_full_client(args: argparse.Namespace, events: list[Event]) -> int:
    import asyncio

    from bus._cli.running import configure_logging

    configure_logging(0)
    return asyncio.run(publish_with_bus(args, events))


async def run(args: argparse.Namespace) -> int:
    """``hookbus emit`` from the full parser (``hookbus -v emit ...``): the same checks, the full client."""
    return await publish_with_bus(args, collect(args))


async def publish_with_bus(args: argparse.Namespace, events: list[Event]) -> int:
    set_depth(depth_from_env())
    async with command_bus(args, NAME, source=args.source) as bus:
        sent = [await bus.emit(subject, payload, session_id=session) for subject, payload, session in events]
        if any(sent):
            await bus.flush()
        if bus.stats.dropped.get("denied"):
            raise PublishDenied(events[0][0], "a permissions violation, logged above")
        if not all(sent) and not bus.stats.dropped.get("depth"):
            print(f"hookbus: error: {events[0][0]} not sent: NATS is unreachable", file=sys.stderr)
            return 1
    return 0
