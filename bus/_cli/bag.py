"""``hookbus bag``: every bag key the live handlers declare, with its producers and consumers."""

from __future__ import annotations

import argparse

from bus._cli.middleware import add_options, open_view
from bus._middleware.kernel.bag import ports


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bag",
        help="list the per-turn bag's keys with the handlers that write and read them",
        description="List each bag key the live handlers declare: producers (outputs) and consumers (inputs).",
    )
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-bag") as (_, view):
        rows = ports(decl for decl, _ in view.declarations().values())
    if not rows:
        print("no live handler reads or writes the bag")
    for row in rows:
        print(row["key"])
        for producer in row["producers"]:
            print(f"  writes  {producer['handler']}  ({producer['stage']})")
        for consumer in row["consumers"]:
            how = "required" if consumer["required"] else f"default {consumer['default']!r}"
            print(f"  reads   {consumer['handler']}  ({consumer['stage']}, {how})")
        if not row["producers"]:
            print("  (no live handler writes it)")
    return 0
