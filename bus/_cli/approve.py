"""``hookbus approve NAME``: approve a waiting handler (``module.handler``) or all of a module's; journaled."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from bus._cli.middleware import add_options, open_view
from bus._cli.workspace import bus_name
from bus._core.errors import MiddlewareError
from bus._operator import approve_journaled, local_actor
from bus._records.subjects import RECORDS_MODULE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bus._client import Bus
    from bus._core.declaration import Declaration
    from bus._middleware.kernel.view import View

    #: approve_journaled or reject_journaled.
    Decide = Callable[[Bus, View, str, str], Awaitable[list[Declaration]]]


#: What approving a handler record grants, said wherever one is approved.
RECORD_GRANT = (
    "Approving a handler record runs its code in the record runner with the runner's credentials "
    "(its NATS user) and beside the other records that runner serves."
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "approve",
        help="approve a middleware handler as it is declared now",
        description=(
            "Approve NAME (module.handler, or a module for all its waiting handlers) as it is declared now. "
            "The approval lives on the bus (JetStream KV), so any machine reaching NATS can approve. "
            f"{RECORD_GRANT}"
        ),
    )
    parser.add_argument("name", help="module.handler, or a module for all its waiting handlers")
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    return await decide(args, approve_journaled, "approve", "approved")


async def decide(args: argparse.Namespace, act: Decide, verb: str, done: str) -> int:
    """``hookbus <verb> NAME``: the operator's decision on the waiting versions NAME designates, each printed."""
    async with open_view(args, f"hookbus-{verb}") as (bus, view):
        try:
            decided = await act(bus, view, args.name, local_actor())
        except MiddlewareError as exc:
            raise MiddlewareError(f"{exc} on {bus_name(bus.servers)}") from None
        for decl in decided:
            print(f"{done} {decl.qualname} (stage {decl.stage}, identity {decl.identity()[:12]})")
            if verb == "approve" and decl.module == RECORDS_MODULE:
                print(f"  {RECORD_GRANT}")
    return 0
