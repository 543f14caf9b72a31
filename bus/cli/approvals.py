"""``hookbus approvals``: the handlers waiting for approval (new or changed)."""

from __future__ import annotations

import argparse

from bus.cli.middleware import add_options, open_view
from bus.middleware.kernel.approvals import queue


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "approvals",
        help="list middleware handlers waiting for approval",
        description="List live handlers that are not executed until approved: untrusted (new) or modified.",
    )
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-approvals") as (_, view):
        waiting = queue(view)
        if not waiting:
            print("no handler is waiting for approval")
        for item in waiting:
            decl = item.decl
            mode = "fail-closed" if decl.fail_closed else "fail-open"
            print(f"{decl.qualname}  {item.state.value}  stage {decl.stage}  {mode}  identity {decl.identity()[:12]}")
    return 0
