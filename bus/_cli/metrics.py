"""``hookbus metrics``: derive the fleet's metrics from the bus, beside ``hookbus up``, for larger fleets.

Counts the events that cross the bus, the journal's shell-hook runs and
trigger firings, and every process's counters reports, and serves them on
/metrics. Instances share the messages through the queue group
``hookbus-fleet-metrics`` (with ``hookbus up`` too): each message is counted
once, so scrape every instance and sum. docs/metrics.md says which target
gives what.
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack

from bus._cli.common import add_metrics_port, add_nats_url, serve_metrics, stop_on_signals
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._cli.parser import add_command
from bus._core.errors import ConfigError

DEFAULT_METRICS_PORT = 9478


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "metrics",
        "derive fleet metrics from the bus and serve them on /metrics (replicas share the work)",
        __doc__,
    )
    add_metrics_port(parser, default=DEFAULT_METRICS_PORT)
    parser.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from subscribers.fleet_metrics.receiver import QUEUE, FleetReceiver

    if args.metrics_port < 0:
        raise ConfigError("hookbus metrics serves /metrics: give --metrics-port a port (0: any free one)")
    stop = stop_on_signals()
    async with AsyncExitStack() as stack:
        bus = await stack.enter_async_context(command_bus(args, "hookbus-metrics"))
        receiver = await FleetReceiver(bus.port).start()
        stack.push_async_callback(receiver.stop)
        url = serve_metrics(stack, args.host, args.metrics_port)
        print(f"hookbus metrics: {url} from {', '.join(bus.servers)}, queue group {QUEUE}; ready", flush=True)
        await stop.wait()
    print("hookbus metrics: stopped", flush=True)
    return 0
