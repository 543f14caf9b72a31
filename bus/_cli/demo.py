"""``hookbus demo``: drive the running bus like a small fleet of agents would."""

from __future__ import annotations

import argparse
from typing import Final

from bus._cli.common import add_nats_url, connection_args
from bus._client import Bus
from bus._core.claim import DEFAULT_MAX_OBJECT_BYTES
from bus._core.envelope import DEFAULT_MAX_BYTES
from bus._core.errors import ConfigError
from bus._runtime.quantities import parse_duration

#: How long the demo plays by default: more than two scrapes at the shipped 15 s interval, so rates move.
DEFAULT_FOR: Final = "40s"
DEFAULT_SESSIONS: Final = 12


def duration_arg(text: str) -> float:
    try:
        return parse_duration(text, "--for")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="play a small fleet of agents against the running bus (watch it in tail, journal, dashboards)",
        description=(
            "Sessions with LLM calls (several models, some failing), tool calls through a guard module it "
            "serves (cancels rm -rf, patches deploys, hangs on a downloaded script), custom events, shell hooks of "
            "its own (one fails now and then, one times out), and a trigger on eva.spend.day answered by a demo "
            "agent; each agent names itself. With --for (the default), it plays once what goes wrong in a real fleet: "
            "a malformed event, a cut-to-fit event, a dropped link, shed hook events, asks answered and expired. "
            "Run `hookbus up` first, then `hookbus tail` in another terminal."
        ),
    )
    parser.add_argument(
        "--for",
        dest="for_s",
        type=duration_arg,
        default=None,
        metavar="DURATION",
        help=f"keep the fleet playing this long, e.g. 2m (default: {DEFAULT_FOR}, two scrapes at the shipped "
        "15 s interval; with --sessions alone, only those sessions)",
    )
    parser.add_argument(
        "--sessions", type=int, default=None, help=f"agent sessions to play, at least (default: {DEFAULT_SESSIONS})"
    )
    parser.add_argument(
        "--no-hooks",
        dest="hooks",
        action="store_false",
        help="run without the demo's own shell hooks (an audit on tool calls, a flaky check on LLM responses)",
    )
    parser.add_argument("--agents", type=int, default=3, help="agents the sessions are spread over (default: 3)")
    parser.add_argument("--pace", type=float, default=1.0, help="scale of simulated latencies (0: as fast as possible)")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run exactly")
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from triggers.demo import GUARD_HANDLERS, run_demo

    if args.agents < 1:
        raise ConfigError(f"--agents {args.agents}: give at least one agent")
    sessions = DEFAULT_SESSIONS if args.sessions is None else args.sessions
    for_s = parse_duration(DEFAULT_FOR) if args.for_s is None and args.sessions is None else args.for_s

    def agent_bus(
        agent: str, *, servers: str | None = None, max_bytes: int | None = None, max_object_bytes: int | None = None
    ) -> Bus:  # each agent identifies itself: its events' source is its name
        return Bus(
            servers or args.nats_url,
            name=f"hookbus-demo-{agent}",
            source=agent,
            max_bytes=max_bytes or DEFAULT_MAX_BYTES,
            max_object_bytes=max_object_bytes or DEFAULT_MAX_OBJECT_BYTES,
            **connection_args(args),
        )

    connection = connection_args(args)
    async with Bus(
        args.nats_url, name="hookbus-demo", source="hookbus-demo", managed=GUARD_HANDLERS, **connection
    ) as bus:
        report = await run_demo(
            bus,
            sessions=sessions,
            agents=args.agents,
            pace=args.pace,
            seed=args.seed,
            for_s=for_s,
            agent_bus=agent_bus,
            hooks=args.hooks,
        )
    for line in report.lines():
        print(line)
    print("see: hookbus journal --kind middleware; hookbus journal --kind trigger; the dashboards in deploy/grafana")
    return 0
