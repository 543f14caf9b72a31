"""``hookbus approvals``: the handlers waiting for approval (new or changed)."""

from __future__ import annotations

import argparse

from bus._cli.middleware import add_options, open_view
from bus._cli.workspace import bus_name
from bus._middleware.kernel.approvals import queue, rejected


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "approvals",
        help="list middleware handlers waiting for approval",
        description=(
            "List live handlers that are not executed until approved: untrusted (new) or modified. "
            "Approvals live on the bus (its JetStream store): a new bus has none."
        ),
    )
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-approvals") as (bus, view):
        waiting = queue(view)
        where = bus_name(bus.servers)
        if not waiting:
            print(f"no handler is waiting for approval on {where}")
        else:
            print(f"waiting for approval on {where}:")
        for item in waiting:
            decl = item.decl
            mode = "fail-closed" if decl.fail_closed else "fail-open"
            print(f"{decl.qualname}  {item.state.value}  stage {decl.stage}  {mode}  identity {decl.identity()[:12]}")
        for link in rejected(view):
            decl = link.decl
            print(f"{decl.qualname}  rejected  stage {decl.stage}  identity {decl.identity()[:12]}  (not waiting)")
    return 0
