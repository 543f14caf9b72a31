"""``hookbus enable|disable NAME`` and ``hookbus grant|revoke NAME --agent A``: an operator's switches of a handler.

Stored in the trust bucket beside the approvals and journaled; every kernel
applies them from its next call once its watch delivers them (within a
heartbeat). Switches are not part of a handler's identity: no re-approval.
"""

from __future__ import annotations

import argparse

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._middleware.switches import describe


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for command, text in (
        ("enable", "let a disabled handler run again"),
        ("disable", "stop calling a handler without stopping its module (a fail-closed guard then cancels nothing)"),
    ):
        parser = subparsers.add_parser(command, help=text, description=f"{text[0].upper()}{text[1:]}.")
        parser.add_argument("name", help="module.handler")
        add_nats_url(parser)
        parser.set_defaults(func=run, action=command)
    grant = subparsers.add_parser(
        "grant",
        help="apply a handler to an agent (it then applies only to the agents granted)",
        description="Grant NAME to --agent A (repeatable), or --global to apply it to every agent again.",
    )
    grant.add_argument("name", help="module.handler")
    target = grant.add_mutually_exclusive_group(required=True)
    target.add_argument("--agent", action="append", default=[], metavar="A", help="an agent name (repeatable)")
    target.add_argument("--global", dest="everyone", action="store_true", help="apply it to every agent")
    add_nats_url(grant)
    grant.set_defaults(func=run, action="grant")
    revoke = subparsers.add_parser(
        "revoke",
        help="stop applying a granted handler to an agent",
        description="Revoke NAME from --agent A (repeatable); with its last grant revoked it applies to no agent.",
    )
    revoke.add_argument("name", help="module.handler")
    revoke.add_argument("--agent", action="append", required=True, metavar="A", help="an agent name (repeatable)")
    add_nats_url(revoke)
    revoke.set_defaults(func=run, action="revoke")


async def run(args: argparse.Namespace) -> int:
    from bus._switching import disable_handler, enable_handler, grant_handler, revoke_handler

    async with command_bus(args, f"hookbus-{args.action}") as bus:
        if args.action == "enable":
            record = await enable_handler(bus, args.name)
        elif args.action == "disable":
            record = await disable_handler(bus, args.name)
        elif args.action == "grant" and args.everyone:
            record = await grant_handler(bus, args.name, None)
        else:
            change = grant_handler if args.action == "grant" else revoke_handler
            for agent in args.agent:
                record = await change(bus, args.name, agent)
        print(f"{args.name}: {describe(record)}")
    return 0
