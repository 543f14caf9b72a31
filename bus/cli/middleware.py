"""What the middleware subcommands share: a Bus with the middleware view loaded, and how to print it."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from bus.cli.common import add_nats_url
from bus.client import Bus
from bus.view import Link, StageChain, View


def add_trust_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust-new",
        action="store_true",
        help="approve handlers never seen before on first sight (development; changed handlers still need approval)",
    )
    parser.add_argument(
        "--managed",
        action="append",
        default=[],
        metavar="NAME",
        help="a handler (module.handler) or module of the operator's config: runs without approval (repeatable)",
    )


def add_options(parser: argparse.ArgumentParser, trust: bool = False) -> None:
    add_nats_url(parser)
    if trust:
        add_trust_options(parser)


@asynccontextmanager
async def open_view(args: argparse.Namespace, name: str) -> AsyncIterator[tuple[Bus, View]]:
    trust_new = getattr(args, "trust_new", False)
    managed = getattr(args, "managed", [])
    async with Bus(
        args.nats_url, name=name, connect_timeout=args.connect_timeout, trust_new=trust_new, managed=managed
    ) as bus:
        yield bus, await bus.middleware.start()


def describe_link(position: int, link: Link, replicas: int) -> str:
    decl = link.decl
    parts = [
        f"  {position}. {decl.qualname}",
        link.trust.value,
        "fail-closed" if decl.fail_closed else "fail-open",
        f"timeout {decl.timeout:g}s",
    ]
    if link.match:
        parts.append(f"match {'|'.join(sorted(link.match))}")
    if decl.before:
        parts.append(f"before {','.join(decl.before)}")
    if decl.after:
        parts.append(f"after {','.join(decl.after)}")
    parts.append(f"{replicas} instance{'s' if replicas != 1 else ''}")
    return "  ".join(parts)


def describe_chain(chain: StageChain, view: View) -> list[str]:
    if chain.broken:
        names = sorted(decl.qualname for decl, _ in view.declarations().values() if decl.stage == chain.stage)
        return [f"{chain.stage}  BROKEN (not called): {chain.broken}", *(f"  - {name}" for name in names)]
    lines = [chain.stage]
    for position, link in enumerate(chain.links, 1):
        lines.append(describe_link(position, link, replicas(view, link.decl.module)))
    return lines


def replicas(view: View, module: str) -> int:
    return sum(1 for ann, _ in view.instances.values() if ann.module == module)
