"""``hookbus chain [STAGE]``: each stage's chain in order, with trust state and fail mode."""

from __future__ import annotations

import argparse

from bus._cli.common import hint_stage
from bus._cli.middleware import add_options, describe_chain, open_view
from bus._cli.workspace import bus_name
from bus._client import Bus
from bus._core.stages import DESCRIPTIONS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "chain",
        help="show middleware chains in call order, with trust state and fail mode",
        description="Show each stage's middleware chain in the order the kernel calls it.",
    )
    parser.add_argument("stage", nargs="?", default=None, help="only this stage (default: every declared stage)")
    parser.add_argument("--agent", default=None, metavar="A", help="the chains as agent A gets them (its grants)")
    parser.add_argument(
        "--stats",
        nargs="?",
        const=-1.0,
        type=float,
        metavar="SECONDS",
        help="then listen SECONDS (default: one counters report interval and a second) and print per "
        "(handler, stage) what every kernel on the bus reported: calls, decisions, faults, p50/p95, last error",
    )
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
                hint_stage(stage, view.chains, "hookbus chain")
                continue
            print("\n".join(describe_chain(chain, view, args.agent)))
        if not args.stage:
            idle = [stage for stage in DESCRIPTIONS if stage not in view.chains]
            if idle:
                print(f"known stages with no handler (no network call): {', '.join(idle)}")
        if args.stats is not None:
            await _stats(bus, args.stats, args.stage)
    return 0


async def _stats(bus: Bus, seconds: float, stage: str | None) -> None:
    """Listen to the kernels' counters reports for a while, then print the middleware snapshot."""
    import asyncio

    from bus._counters import interval_s
    from subscribers.fleet_metrics._middleware_snapshot import MiddlewareSnapshot

    window = seconds if seconds >= 0 else interval_s() + 1
    snapshot = await MiddlewareSnapshot(bus.port).start()
    try:
        await asyncio.sleep(window)  # the reports come on the kernels' own schedule: listen one interval
    finally:
        await snapshot.stop()
    rows = [row for row in snapshot.snapshot() if stage is None or row["stage"] == stage]
    print(f"middleware reported by every kernel in the last {window:g}s: {len(rows)} (handler, stage)")
    for row in rows:
        parts = [f"  {row['handler']}  {row['stage']}", f"calls {row['calls']}"]
        parts += [f"{kind} {count}" for kind, count in sorted(row["decisions"].items())]
        parts += [f"{cause} {count}" for cause, count in sorted(row["faults"].items())]
        for name in ("p50_ms", "p95_ms"):
            if row.get(name) is not None:
                parts.append(f"{name[:3]} <= {row[name]:g} ms")
        error = row.get("last_error")
        if error:
            parts.append(f"last error {error['outcome']} at {error['time']}: {error['cause']}")
        print("  ".join(parts))
