"""``hookbus emit SUBJECT [JSON]``: publish one event."""

from __future__ import annotations

import argparse
import sys

from bus.cli.common import add_nats_url, connection_args, read_json_object
from bus.client import Bus
from bus.core.depth import DEPTH_ENV, depth_from_env, set_depth
from bus.core.subjects import subject_for


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "emit",
        help="publish one event",
        description=(
            "Publish one event. SUBJECT is a full subject (eva.custom.deploy) or a PRX event name "
            f"(tool_call). The payload is JSON from the argument or stdin. ${DEPTH_ENV} (set for shell "
            "hooks) is the recursion depth the event carries; at the limit it is dropped silently."
        ),
    )
    parser.add_argument("subject")
    parser.add_argument("payload", nargs="?", default=None, help="a JSON object; '-' or absent: read stdin")
    parser.add_argument("--session", default=None, help="session id")
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    subject = subject_for(args.subject)
    payload = read_json_object(args.payload, "the payload")
    set_depth(depth_from_env())
    async with Bus(args.nats_url, name="hookbus-emit", **connection_args(args)) as bus:
        sent = await bus.emit(subject, payload, session_id=args.session)
        if sent:
            await bus.flush()
        elif bus.stats.dropped.get("depth"):
            return 0  # the recursion limit drops silently, by contract
        else:
            print(f"hookbus: error: {subject} not sent: NATS is unreachable", file=sys.stderr)
            return 1
    return 0
