"""``hookbus runner``: serve the bus's approved, enabled handler records as one middleware module.

Start several with the same ``--module``: they share the calls (one queue
group). Records may import only the modules named with ``--allow-import``
(default: a few pure ones); that restriction is not a security boundary, run
the runner under process isolation for records nobody should trust.
"""

from __future__ import annotations

import argparse

from bus._cli.common import add_nats_url, stop_on_signals
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._cli.parser import add_command
from bus._records.subjects import RECORDS_MODULE


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "runner", "serve the approved handler records as a middleware module", __doc__)
    parser.add_argument("--module", default=RECORDS_MODULE, help=f"module name (default: {RECORDS_MODULE})")
    parser.add_argument(
        "--allow-import",
        action="append",
        default=None,
        metavar="MODULE",
        help="a module records may import (repeatable; replaces the default set)",
    )
    parser.add_argument(
        "--managed",
        action="append",
        default=[],
        metavar="NAME=IDENTITY",
        help="a record the operator ships, pinned by identity (12+ hex digits, as 'hookbus records show' prints): "
        "that version is served without approval, any other waits (repeatable)",
    )
    parser.add_argument("--max-failures", type=int, default=5, help="faults in a row that disable a record")
    add_nats_url(parser, connect_s=SERVICE_CONNECT_S)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus._core.errors import ConfigError
    from bus._records.sandbox import DEFAULT_IMPORTS
    from subscribers.records_runner.record_runner import RecordsRunner, RecordsRunnerSettings

    try:
        settings = RecordsRunnerSettings(
            module=args.module,
            imports=frozenset(args.allow_import) if args.allow_import is not None else DEFAULT_IMPORTS,
            managed=_pins(args.managed),
            max_failures=args.max_failures,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    stop = stop_on_signals()
    bus = command_bus(args, f"hookbus-runner-{args.module}")
    async with bus, RecordsRunner(bus, settings).running() as runner:
        print(
            f"hookbus runner: module {args.module} on {', '.join(bus.servers)}: "
            f"{len(runner.served)} records serving, {len(runner.waiting)} waiting; ready",
            flush=True,
        )
        await stop.wait()
    print("hookbus runner: stopped", flush=True)
    return 0


def _pins(given: list[str]) -> dict[str, str]:
    from bus._core.errors import ConfigError

    pins = {}
    for item in given:
        name, sep, identity = item.partition("=")
        if not sep or not name:
            raise ConfigError(
                f"--managed {item}: give NAME=IDENTITY (a name alone would serve whatever a draft of it says)"
            )
        pins[name] = identity.lower()
    return pins
