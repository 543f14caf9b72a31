"""What the middleware subcommands share: a Bus with the middleware view loaded, and how to print it."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._cli.workspace import add_workspace
from bus._cli.workspace import resolve as resolve_workspace
from bus._client import Bus
from bus._core.declaration import Declaration
from bus._middleware import timeouts
from bus._middleware.kernel.chain import StageChain
from bus._middleware.kernel.intercept import MiddlewareOptions
from bus._middleware.kernel.link import Link
from bus._middleware.kernel.view import View
from bus._middleware.registry import Announcement


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
        help="a handler of the operator's config, as module.handler: runs without approval (repeatable)",
    )


def add_drain_workspace(parser: argparse.ArgumentParser) -> None:
    add_workspace(parser, "workspace whose drain/ directory keeps middleware output too large to pass on")


def middleware_options(args: argparse.Namespace) -> MiddlewareOptions:
    """Kernel-side settings from the flags: drained output goes under the workspace, whose middleware.yaml
    holds the operator's timeout ceiling (bus._middleware.timeouts)."""
    if not hasattr(args, "workspace"):  # a command without the flag drains nothing to disk
        return MiddlewareOptions(drain_dir=None)
    workspace = resolve_workspace(args).path
    return MiddlewareOptions(drain_dir=workspace / "drain", timeout_ceiling=timeouts.ceiling(workspace))


def add_options(parser: argparse.ArgumentParser, trust: bool = False) -> None:
    add_nats_url(parser)
    if trust:
        add_trust_options(parser)


@asynccontextmanager
async def open_view(args: argparse.Namespace, name: str) -> AsyncIterator[tuple[Bus, View]]:
    trust_new = getattr(args, "trust_new", False)
    managed = getattr(args, "managed", [])
    async with command_bus(
        args,
        name,
        trust_new=trust_new,
        managed=managed,
        middleware=middleware_options(args),
    ) as bus:
        yield bus, await bus.middleware.start()


def declaration_terms(decl: Declaration, match: Iterable[str]) -> list[str]:
    """How a declaration reads in a listing: fail mode, timeout, match, order, priority, when."""
    parts = ["fail-closed" if decl.fail_closed else "fail-open", f"timeout {decl.timeout:g}s"]
    if match := list(match):
        parts.append(f"match {'|'.join(match)}")
    if decl.before:
        parts.append(f"before {','.join(decl.before)}")
    if decl.after:
        parts.append(f"after {','.join(decl.after)}")
    if decl.priority:
        parts.append(f"priority {decl.priority}")
    parts += [f"when {field} {','.join(patterns)}" for field, patterns in decl.when.to_wire().items()]
    return parts


def describe_link(position: int | str, link: Link, replicas: int) -> str:
    decl = link.decl
    parts = [
        f"  {position}. {decl.qualname}" if isinstance(position, int) else f"  {position} {decl.qualname}",
        link.trust.value,
        *declaration_terms(decl, sorted(link.match) if link.match else ()),
    ]
    if link.agents is not None:
        parts.append(f"granted to {','.join(sorted(link.agents)) or 'no agent'}")
    parts.append(f"{replicas} instance{'s' if replicas != 1 else ''}")
    return "  ".join(parts)


def describe_chain(chain: StageChain, view: View, agent: str | None = None) -> list[str]:
    """The chain in call order, then the guards holding the stage, then handlers disabled or waiting for approval.

    ``agent``: only the handlers that apply to that agent are numbered; the others are listed as not for it.
    """
    if chain.broken:
        effect = f"calls cancelled, {chain.guard} is fail-closed" if chain.guard else "not called"
        lines = [f"{chain.stage}  BROKEN ({effect}): {chain.broken}"]
        lines += [f"  - {name}" for name in sorted(decl.qualname for decl, _ in _on_stage(view, chain.stage))]
    else:
        lines = [chain.stage if agent is None else f"{chain.stage}  (for agent {agent})"]
        mine = [link for link in chain.links if agent is None or link.agents is None or agent in link.agents]
        for position, link in enumerate(mine, 1):
            lines.append(describe_link(position, link, replicas(view, link.decl.module)))
        for link in chain.links:
            if link not in mine:
                lines.append(describe_link("x", link, replicas(view, link.decl.module)) + f"  not for {agent}")
    for link in chain.disabled:
        lines.append(describe_link("-", link, replicas(view, link.decl.module)) + "  DISABLED (hookbus enable)")
    for link in chain.holds:
        name = link.decl.qualname
        lines.append(
            f"  ! {name}  {link.trust.value}  fail-closed  HOLDS: {link.hold} (until back or: hookbus detach {name})"
        )
    for link in chain.waiting:
        lines.append(describe_link("-", link, replicas(view, link.decl.module)) + "  not called until approved")
    for link in chain.rejected:
        lines.append(
            describe_link("-", link, replicas(view, link.decl.module)) + "  REJECTED (a new version waits again)"
        )
    return lines


def _on_stage(view: View, stage: str) -> list[tuple[Declaration, Announcement]]:
    return [pair for pair in view.declarations().values() if pair[0].stage == stage]


def replicas(view: View, module: str) -> int:
    return sum(1 for ann, _ in view.instances.values() if ann.module == module)
