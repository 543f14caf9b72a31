"""``hookbus reject NAME``: reject a waiting handler's version (``module.handler``) or all of a module's; journaled."""

from __future__ import annotations

import argparse

from bus.cli.middleware import add_options, open_view
from bus.cli.workspace import bus_name
from bus.core.errors import MiddlewareError
from bus.operator import local_actor, reject_journaled


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reject",
        help="reject a middleware handler's waiting version",
        description=(
            "Reject NAME (module.handler, or a module for all its waiting handlers) as it is declared now: "
            "it leaves the approval queue and is never called; a changed declaration waits for approval again. "
            "The rejection lives on the bus beside the approvals (JetStream KV)."
        ),
    )
    parser.add_argument("name", help="module.handler, or a module for all its waiting handlers")
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-reject") as (bus, view):
        try:
            rejected = await reject_journaled(bus, view, args.name, local_actor())
        except MiddlewareError as exc:
            raise MiddlewareError(f"{exc} on {bus_name(bus.servers)}") from None
        for decl in rejected:
            print(f"rejected {decl.qualname} (stage {decl.stage}, identity {decl.identity()[:12]})")
    return 0
