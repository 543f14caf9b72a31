"""``hookbus intercept STAGE [JSON]``: run a stage's chain once and print the decision."""

from __future__ import annotations

import argparse
import sys

import orjson

from bus._cli.common import hint_stage, read_json_object
from bus._cli.middleware import add_drain_workspace, add_options, open_view
from bus._core.decisions import Cancel, Patch
from bus._core.stages import validate_stage


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "intercept",
        help="run a stage's middleware chain on a payload and print the decision",
        description=(
            "Run the chain of STAGE (any stage 'hookbus events' lists, e.g. tool.call or assistant.message, "
            "or any declared stage) "
            "on the JSON payload (argument or stdin) and print the decision as JSON. Exit status 0 whatever "
            "the decision; 1 for errors."
        ),
    )
    parser.add_argument("stage", help="the stage to run, e.g. tool.call")
    parser.add_argument("payload", nargs="?", default=None, help="a JSON object; '-' or absent: read stdin")
    parser.add_argument("--session", default=None, help="session id passed to handlers")
    parser.add_argument("--agent", default=None, help="agent name passed to handlers")
    parser.add_argument("--user", default=None, help="the call's user (what when sees)")
    parser.add_argument("--template", default=None, help="the agent's template (what when sees)")
    add_options(parser, trust=True)
    add_drain_workspace(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    stage = validate_stage(args.stage)
    payload = read_json_object(args.payload, "the payload")
    async with open_view(args, "hookbus-intercept") as (bus, view):
        ctx = {"session": args.session, "agent": args.agent, "user": args.user, "template": args.template}
        decision = await bus.intercept(stage, payload, ctx)
        chain = view.chains.get(stage)
        if chain is None:
            hint_stage(stage, view.chains, "hookbus intercept")
        for link in chain.waiting if chain else ():
            name = link.decl.qualname
            print(f"hookbus: {name} not called: {link.trust.value} (hookbus approve {name})", file=sys.stderr)
        for link in chain.holds if chain else ():
            print(f"hookbus: {link.hold} (hookbus detach {link.decl.qualname})", file=sys.stderr)
        if chain is not None and chain.broken:
            print(f"hookbus: the chain of {stage} is broken, nothing called: {chain.broken}", file=sys.stderr)
    out = decision.to_wire()
    if isinstance(decision, Cancel) and decision.handler:
        out["handler"] = decision.handler
    if isinstance(decision, Patch):
        out["payload"] = decision.payload
    print(orjson.dumps(out).decode())
    return 0
