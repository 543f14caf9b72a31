"""``hookbus mirror --from DOMAIN``: mirror the hub's buckets into this leaf node's JetStream domain.

Run once against each leaf node's server, as the operator, after ``hookbus up``
made the buckets on the hub: kernels on the leaf then watch the local copies,
and their writes still go to the hub (docs/scaling.md, JetStream where it scales).
"""

from __future__ import annotations

import argparse

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._core.errors import ConfigError
from bus._transport.kv_mirror import DOMAIN_ENV, MIRRORED, kv_domain, mirror_buckets


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="mirror the hub's buckets into this leaf node's JetStream domain (run as the operator)",
        description=(
            "Make the registry, trust, guard, rules and presence buckets of this server's JetStream domain "
            "mirrors of domain DOMAIN's (the hub's). Buckets already mirrored are left alone."
        ),
    )
    parser.add_argument(
        "--from", dest="source", metavar="DOMAIN", help=f"the hub's JetStream domain (default ${DOMAIN_ENV})"
    )
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    source = args.source or kv_domain()
    if not source:
        raise ConfigError(f"name the hub's JetStream domain: --from DOMAIN or {DOMAIN_ENV}")
    async with command_bus(args, "hookbus-mirror") as bus:
        made = await mirror_buckets(bus.port.nc, source)
    for name in MIRRORED:
        print(f"{name}: {'mirrored from ' + source if name in made else 'already a mirror'}")
    return 0
