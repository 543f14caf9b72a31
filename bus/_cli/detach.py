"""``hookbus detach NAME``: end a gone fail-closed guard (``module`` or ``module.handler``).

A trusted fail-closed handler whose module is gone keeps cancelling its stage
until its module comes back or an operator detaches it here. Detaching is
journaled and announced as ``eva.module.detached``.
"""

from __future__ import annotations

import argparse

from bus._cli.middleware import add_options, open_view
from bus._operator import detach_journaled, local_actor


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "detach",
        help="end a gone fail-closed guard: its stage stops being cancelled",
        description=(
            "Detach NAME (module.handler, or a module for all its fail-closed handlers) whose module is gone. "
            "Until then every call its guard would see is cancelled. Refused while an instance is alive."
        ),
    )
    parser.add_argument("name", help="module.handler, or a module for all its fail-closed handlers")
    add_options(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-detach") as (bus, view):
        for rec in await detach_journaled(bus, view, args.name, local_actor()):
            print(f"detached {rec.decl.qualname} (stage {rec.decl.stage}, identity {rec.identity[:12]})")
    return 0
