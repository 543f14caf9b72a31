"""``hookbus replay``: back-test a module file on the recorded calls of a stage, locally.

    hookbus replay --since 24h --stage tool.call --module guard.py
    hookbus replay --since 7d --stage tool.call --rules rules/guards.yaml   # exits 1 if any call differs

Reads the recorded events (``hookbus up --record``) and the workspace
journal, closes its connection, then runs the module's handlers of the stage
on each call in this process and prints how its decisions differ from what
happened: counts by decision and the first differing calls (``--json`` for
scripts). A replay never emits on the live bus: the module is loaded only
after the connection is closed, its handlers get no bus (``ctx.bus`` is
None), and ``NATS_URL`` points to a closed port while it runs, so a
``Bus()`` it opens reaches nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._cli.parser import add_command
from bus._cli.workspace import add_workspace, existing
from bus._core.errors import ConfigError
from bus._core.stages import validate_stage
from bus._runtime.quantities import parse_duration
from bus._runtime.visible import visible
from bus._transport.connection import URL_ENV

#: Journal entries read at most.
MAX_ENTRIES = 1_000_000


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "replay",
        "back-test a module file on recorded calls of a stage (locally; never on the live bus)",
        __doc__,
    )
    parser.add_argument("--since", required=True, metavar="DURATION", help="recorded calls of the last DURATION (24h)")
    parser.add_argument("--stage", required=True, help="the stage whose calls to replay (tool.call)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--module", metavar="FILE[:NAME]", help="the module file (guard.py)")
    which.add_argument(
        "--rules",
        action="append",
        metavar="FILE",
        help="a rule file (repeatable): exits 1 when any call would be decided differently (a CI check)",
    )
    parser.add_argument("--show", type=int, default=10, metavar="N", help="differing calls to print (default: 10)")
    parser.add_argument("--json", action="store_true", help="one JSON object: counts and the first differing calls")
    add_workspace(parser, "workspace whose journal says what happened")
    add_nats_url(parser)
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from bus._cli.serve import load_module, split_target
    from subscribers.history._backtest import calls_of, replay, replay_rules, stage_source
    from subscribers.history._reader import recorded_events
    from subscribers.journal._store import DB_NAME, JournalStore, Query

    stage = validate_stage(args.stage)
    stage_source(stage)
    since_s = parse_duration(args.since, "--since")
    if args.show < 0:
        raise ConfigError(f"--show {args.show} must be 0 or more")
    rules = None
    if args.rules:
        from bus._middleware.rules.book import load_files

        rules = load_files(args.rules)  # refused with file and line before anything is read
    else:
        path, name = split_target(args.module)
        if not path.is_file():
            raise ConfigError(f"--module {path}: no such file")
    journal = existing(args).path / DB_NAME
    entries = []
    if journal.exists():
        store = JournalStore(journal)
        try:
            entries = [row.entry for _, row in store.query(Query(kind="middleware", point=stage, limit=MAX_ENTRIES))]
        finally:
            store.close()
    async with command_bus(args, "hookbus-replay") as bus:
        events = [event async for event in recorded_events(bus, since_s)]
    calls = calls_of(stage, events, entries)
    if rules is not None:
        report = replay_rules(rules, stage, calls)
    else:
        with _no_live_bus():
            module = load_module(Path(path), name)
            report = await replay(module, stage, calls)
    if args.json:
        print(orjson.dumps(report.as_json(args.show)).decode())
    else:
        _print(report.as_json(args.show), journal.exists())
    return 1 if rules is not None and report.differing else 0


@contextmanager
def _no_live_bus() -> Iterator[None]:
    """NATS_URL names a port nothing listens on while the module runs (bound, never listening: refused)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        before = os.environ.get(URL_ENV)
        os.environ[URL_ENV] = f"nats://127.0.0.1:{closed.getsockname()[1]}"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(URL_ENV, None)
            else:
                os.environ[URL_ENV] = before


def _print(report: dict[str, Any], journal: bool) -> None:
    recorded, replayed = report["recorded"], report["replayed"]
    print(f"{report['calls']} recorded calls of {report['stage']}; {report['differing']} decided differently")
    print(f"{'decision':<10} {'recorded':>9} {'replayed':>9}")
    for decision in recorded:
        print(f"{decision:<10} {recorded[decision]:>9} {replayed[decision]:>9}")
    if not journal:
        print("(no journal in the workspace: every recorded call counted as continue)", file=sys.stderr)
    for call in report["first_differing"]:
        payload = visible(orjson.dumps(call["payload"]).decode())
        why = f" ({visible(call['replayed_why'])})" if call["replayed_why"] else ""
        session = visible(call["session"] or "-")
        print(f"  {call['time']} session={session} {call['recorded']} -> {call['replayed']}{why} {payload}")
