"""``hookbus shadow NAME [--off]`` and ``hookbus shadow report NAME``: any handler, tried on live traffic unapplied.

hookbus shadow guard.no_rm                 # as the operator: it runs, its decisions are journaled, never applied
hookbus shadow report guard.no_rm --since 24h
hookbus shadow guard.no_rm --off           # its decisions apply again

A handler (a module's, or a rule) in shadow is still called on every call it
takes; its cancel, patch or ask is journaled as ``would_cancel`` /
``would_patch`` / ``would_ask`` with the hash of the payload it saw, and the
call goes on as if it had continued. The switch lives in the trust bucket
beside enable/disable (only the operator writes it), so every kernel follows it
within a heartbeat.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Final

from bus._cli.common import add_nats_url
from bus._cli.options import command_bus
from bus._cli.parser import add_command
from bus._cli.workspace import add_workspace, existing
from bus._core.errors import ConfigError

#: Shadow entries a report samples.
SAMPLE: Final = 5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        subparsers,
        "shadow",
        "run a handler on live traffic without applying its decisions; 'shadow report NAME' says what it would do",
        __doc__,
    )
    parser.add_argument("words", nargs="+", metavar="NAME", help="module.handler, or: report module.handler")
    parser.add_argument("--off", action="store_true", help="take it out of shadow: its decisions apply again")
    parser.add_argument("--since", default="24h", metavar="DURATION", help="report: entries of the last DURATION")
    add_nats_url(parser)
    add_workspace(parser, "report: workspace whose journal to read")
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    words = args.words
    if words[0] == "report":
        if len(words) != 2:
            raise ConfigError("usage: hookbus shadow report NAME [--since 24h]")
        return report(args, words[1])
    if len(words) != 1:
        raise ConfigError("usage: hookbus shadow NAME [--off]")
    from bus._middleware.switches import describe
    from bus._switching import shadow_handler

    async with command_bus(args, "hookbus-shadow") as bus:
        record = await shadow_handler(bus, words[0], not args.off)
    print(f"{words[0]}: {describe(record)}")
    return 0


def report(args: argparse.Namespace, name: str) -> int:
    """How many calls ``name`` would have changed in the last ``--since``, by decision, and a sample."""
    from bus._runtime.quantities import parse_duration

    since = datetime.fromtimestamp(datetime.now(UTC).timestamp() - parse_duration(args.since), UTC)
    path = existing(args).path
    counts, sample = shadow_entries(path, name, since.strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    total = sum(counts.values())
    print(f"{name}: {total} call{'s' if total != 1 else ''} would have changed in the last {args.since}")
    for decision in sorted(counts):
        print(f"  {decision}: {counts[decision]}")
    for line in sample:
        print(f"  {line}")
    sys.stdout.flush()
    return 0


def shadow_entries(workspace: object, name: str, stamp: str) -> tuple[dict[str, int], list[str]]:
    """The ``would_*`` entries of ``name`` since ``stamp`` in a workspace's journal: counts and sample lines."""
    from pathlib import Path

    from subscribers.journal._store import DB_NAME, JournalStore, Query

    path = Path(str(workspace)) / DB_NAME
    if not path.exists():
        raise ConfigError(f"no journal at {path}")
    store = JournalStore(path)
    counts: dict[str, int] = {}
    sample: list[str] = []
    after = 0
    try:
        while rows := store.query(Query(who=name, since=stamp, after_seq=after, limit=1000)):
            for seq, row in rows:
                after = max(after, seq)
                entry = row.entry
                if entry.decision.startswith("would_"):
                    counts[entry.decision] = counts.get(entry.decision, 0) + 1
                    if len(sample) < SAMPLE:
                        where = f"{entry.time} {entry.point} agent={entry.agent} session={entry.session}"
                        sample.append(f"{where} {entry.decision}: {entry.cause}")
    finally:
        store.close()
    return counts, sample
