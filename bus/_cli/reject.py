"""``hookbus reject NAME``: reject a waiting handler's version (``module.handler``) or all of a module's; journaled."""

from __future__ import annotations

import argparse

from bus._cli.approve import decide
from bus._cli.middleware import add_options
from bus._operator import reject_journaled


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
    return await decide(args, reject_journaled, "reject", "rejected")
