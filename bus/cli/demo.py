"""``hookbus demo``: drive the running bus like a small fleet of agents would."""

from __future__ import annotations

import argparse

from bus.cli.common import add_nats_url, connection_args
from bus.client import Bus


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="play a small fleet of agents against the running bus (watch it in tail, journal, dashboards)",
        description=(
            "Sessions with LLM calls (several models, some failing), tool calls through a guard module it "
            "serves (cancels rm -rf, patches deploys), custom events, and a trigger on eva.spend.day answered "
            "by a demo agent. Run `hookbus up` first, then `hookbus tail` in another terminal."
        ),
    )
    parser.add_argument("--sessions", type=int, default=12, help="agent sessions to play (default: 12)")
    parser.add_argument("--agents", type=int, default=3, help="agents the sessions are spread over (default: 3)")
    parser.add_argument("--pace", type=float, default=1.0, help="scale of simulated latencies (0: as fast as possible)")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run exactly")
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from triggers.demo import GUARD_HANDLERS, run_demo

    async with Bus(args.nats_url, name="hookbus-demo", **connection_args(args), managed=GUARD_HANDLERS) as bus:
        report = await run_demo(bus, sessions=args.sessions, agents=args.agents, pace=args.pace, seed=args.seed)
    for line in report.lines():
        print(line)
    print("see: hookbus journal --kind middleware; hookbus journal --kind trigger; the dashboards in deploy/grafana")
    return 0
