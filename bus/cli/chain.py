"""``hookbus chain [STAGE]``: each stage's chain in order, with trust state and fail mode."""

from __future__ import annotations

import argparse

from bus.cli.middleware import add_options, describe_chain, open_view
from bus.cli.workspace import bus_name
from bus.core.stages import DESCRIPTIONS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "chain",
        help="show middleware chains in call order, with trust state and fail mode",
        description="Show each stage's middleware chain in the order the kernel calls it.",
    )
    parser.add_argument("stage", nargs="?", default=None, help="only this stage (default: every declared stage)")
    parser.add_argument("--agent", default=None, metavar="A", help="the chains as agent A gets them (its grants)")
    add_options(parser, trust=True)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    async with open_view(args, "hookbus-chain") as (bus, view):
        stages = [args.stage] if args.stage else sorted(view.chains)
        where = bus_name(bus.servers)
        if not stages:
            print(f"no middleware handler is declared on {where}")
        for stage in stages:
            chain = view.chains.get(stage)
            if chain is None:
                print(f"{stage}  (no handler declared on {where}: intercepts continue without a network call)")
                continue
            print("\n".join(describe_chain(chain, view, args.agent)))
        if not args.stage:
            idle = [stage for stage in DESCRIPTIONS if stage not in view.chains]
            if idle:
                print(f"known stages with no handler (no network call): {', '.join(idle)}")
    return 0
