"""``hookbus triggers``: list triggers with their state; ``hookbus triggers test``: try one."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import orjson

from bus._cli.common import add_nats_url, hint_event, read_json_object
from bus._cli.options import command_bus
from bus._cli.parser import also_after
from bus._cli.workspace import add_workspace, bus_name, existing
from bus._core.errors import ConfigError, ConnectError, NoResponders, RequestTimeout
from bus._core.schema import decode
from bus._core.subjects import validate_subject
from triggers.engine._errors import TriggerStatusError
from triggers.engine._schema import TriggerStatusMsg
from triggers.engine._subjects import TRIGGERS_STATUS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "triggers",
        help="list LLM triggers and their state, or test one",
        description="The LLM triggers of triggers.yaml: their state on the bus (list), or a dry run of one (test).",
    )
    add_workspace(parser, "workspace with triggers.yaml, read by 'test' and when no engine answers")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    listing_help = "each trigger: pattern, agent, fired, suppressed (default)"
    listing = actions.add_parser("list", help=listing_help, description=f"List {listing_help}.")
    add_nats_url(listing)
    listing.add_argument("--json", action="store_true", help="one JSON document: running, triggers")
    test_help = "would this event fire NAME, and with what prompt? Starts nothing."
    test = actions.add_parser("test", help=test_help, description=test_help)
    test.add_argument("name", help="the trigger's name in triggers.yaml")
    test.add_argument("payload", nargs="?", default=None, help="the event payload as JSON ('-' or absent: stdin)")
    test.add_argument("--subject", help="the event's subject (default: the trigger's 'on', if it is a subject)")
    test.add_argument("--session", default=None, help="session id of the event")
    test.add_argument("--depth", type=int, default=0, help="recursion depth of the event (default: 0)")
    test.add_argument(
        "--publisher", default=None, help="the NATS user that published it (default: the target agent's own)"
    )
    also_after(parser, "--workspace", listing, test)
    parser.set_defaults(func=run, action="list", nats_url=None, connect_timeout=2.0, json=False)


async def run(args: argparse.Namespace) -> int:
    from triggers.engine import _config as config

    if args.action == "test":
        workspace = existing(args)
        return _test(args, config.load(workspace.path / config.FILE_NAME), workspace.path)
    status, where = await _running_status(args)
    rows: list[dict[str, Any]] = status or []
    if status is None:
        workspace = existing(args)
        specs = config.load(workspace.path / config.FILE_NAME)
        rows = [{"name": s.name, "on": s.on, "agent": s.agent, "enabled": s.enabled} for s in specs.values()]
    if args.json:
        print(orjson.dumps({"running": status is not None, "triggers": rows}).decode())
        return 0
    if status is None:
        print(f"(no trigger engine answered on {where}; showing {workspace.path / config.FILE_NAME})")
    if not rows:
        print("no trigger is defined" if status is None else f"the trigger engine on {where} runs no trigger")
    for row in rows:
        state = ""
        if status is not None:
            suppressed = ", ".join(f"{k} {v}" for k, v in sorted(row["suppressed"].items())) or "none"
            last = row["last_fired"] or "never"
            state = f"  fired {row['fired']} (last {last}), in flight {row['in_flight']}, suppressed: {suppressed}"
        enabled = "" if row["enabled"] else "  [disabled]"
        print(f"{row['name']}: on {row['on']} -> agent {row['agent']}{enabled}{state}")
    return 0


async def _running_status(args: argparse.Namespace) -> tuple[list[dict[str, Any]] | None, str]:
    """The running engine's rows (None if none answered), and the bus asked."""
    bus = command_bus(args, "hookbus-triggers-cli")
    where = bus_name(bus.servers)
    try:
        async with bus:
            reply = await bus.port.request_raw(TRIGGERS_STATUS, b"", timeout=1.0)
    except (ConnectError, NoResponders, RequestTimeout):
        return None, where
    status = decode(reply, TriggerStatusMsg, f"the status reply on {TRIGGERS_STATUS}", TriggerStatusError)
    return [msgspec.to_builtins(row) for row in status.triggers], where


def _test(args: argparse.Namespace, specs: Mapping[str, object], workspace: Path) -> int:
    from bus._core.encoder import Encoder
    from bus._core.envelope import decode_event
    from triggers.engine._config import TriggerSpec, agent_user

    spec = specs.get(args.name)
    if not isinstance(spec, TriggerSpec):
        from bus._core.catalog import closest

        meant = closest(args.name, list(specs))
        if meant is not None:
            raise ConfigError(f"no trigger named {args.name!r} in {workspace}/triggers.yaml: did you mean {meant}?")
        raise ConfigError(
            f"no trigger named {args.name!r} in {workspace}/triggers.yaml (have: {', '.join(specs) or 'none'})"
        )
    subject = args.subject or spec.on
    if args.subject:
        hint_event(args.subject, "hookbus triggers test")
    try:
        validate_subject(subject)
    except ValueError:
        raise ConfigError(f"trigger {spec.name!r} listens to the pattern {spec.on!r}: give --subject") from None
    payload = read_json_object(args.payload, "the payload")
    data, _ = Encoder().encode(subject, payload, args.session, args.depth)
    event = decode_event(subject, data)
    from bus._core.subjects import matches

    if not matches(spec.pattern, subject):
        print(f"would NOT fire: {subject} does not match {spec.on!r}")
        return 1
    failed = [c.describe() for c in spec.conditions if not c.holds(event)]
    if failed:
        print("would NOT fire: filter failed: " + "; ".join(failed))
        return 1
    if not spec.enabled:
        print("would NOT fire: the trigger is disabled")
        return 1
    publisher = args.publisher or agent_user(spec.agent)
    if not spec.accepts(publisher, vouching=True):
        print(f"would NOT fire: published by {publisher}, not one this trigger accepts")
        return 1
    print(f"would fire: a turn on agent {spec.agent!r} at depth {event.depth + 1}")
    if spec.dedupe:
        print(f"dedupe key: {spec.dedupe.render(event)}")
    print("prompt:")
    print(spec.prompt.render(event))
    return 0
