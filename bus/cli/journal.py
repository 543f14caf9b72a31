"""``hookbus journal``: query the journal; ``hookbus journal-sink``: run only the sink."""

from __future__ import annotations

import argparse
import asyncio
import re
from contextlib import AsyncExitStack
from pathlib import Path

from bus.cli.common import add_metrics_port, add_nats_url, connection_args, serve_metrics, stop_on_signals
from bus.client import Bus
from bus.core.errors import ConfigError
from bus.journal.entries import canonical_time

_COLUMNS = ("time", "kind", "point", "phase", "who", "decision", "duration_ms", "session", "cause")
#: Control characters an entry may carry (terminal escapes, fake line breaks) are shown escaped.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    query = subparsers.add_parser(
        "journal",
        help="query the journal of interventions and reactions",
        description=(
            "Query the workspace journal (SQLite). Filters combine with AND; times are RFC 3339 UTC, "
            "--since and --until compare the server's receive time."
        ),
    )
    query.add_argument("--workspace", type=Path, default=Path(".hookbus"))
    query.add_argument("--point", help="stage or subject, e.g. tool.call")
    query.add_argument("--who", "--handler", dest="who", help="handler, hook or trigger name")
    query.add_argument("--decision", help="continue, cancel, patch, timeout, failed, absent, denied, fired, ...")
    query.add_argument("--session")
    query.add_argument("--kind", choices=["middleware", "shell_hook", "subscriber", "trigger"])
    query.add_argument("--since", help="received from this time on, e.g. 2026-11-30T10:00:00Z")
    query.add_argument("--until", help="received before this time")
    query.add_argument("--limit", type=int, default=50, help="newest N entries (default: 50)")
    query.add_argument("--json", action="store_true", help="one JSON object per line")
    query.add_argument("--follow", "-f", action="store_true", help="keep printing new entries")
    query.set_defaults(func=run_query)

    sink = subparsers.add_parser(
        "journal-sink",
        help="run only the journal sink (stream -> SQLite + JSONL) against an existing NATS",
    )
    sink.add_argument("--workspace", type=Path, default=Path(".hookbus"))
    sink.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_metrics_port(sink)
    add_nats_url(sink)
    sink.set_defaults(func=run_sink)


async def run_query(args: argparse.Namespace) -> int:
    from subscribers.journal.store import DB_NAME, JournalStore, Query, dumps_line

    path: Path = args.workspace / DB_NAME
    if not path.exists():  # noqa: ASYNC240 - one stat before anything runs
        raise ConfigError(f"no journal at {path}: is 'hookbus up --workspace {args.workspace}' running?")
    if args.limit < 1:
        raise ConfigError(f"--limit {args.limit} must be at least 1")
    store = JournalStore(path)
    filters = {k: getattr(args, k) for k in ("point", "who", "decision", "session", "kind")}
    for bound in ("since", "until"):
        value = getattr(args, bound)
        filters[bound] = canonical_time(value) if value else None
    after, limit = 0, args.limit
    if not args.json:
        print("  ".join(c.upper() for c in ("received", *_COLUMNS)), flush=True)
    try:
        while True:
            rows = store.query(Query(**filters, after_seq=after, limit=limit))
            for seq, row in rows:
                if args.json:
                    print(dumps_line(seq, row), flush=True)
                else:
                    values = [row.received, *(getattr(row.entry, c) for c in _COLUMNS)]
                    print("  ".join(_cell(v) for v in values), flush=True)
            if rows:
                after = rows[-1][0]
            if not args.follow:
                return 0
            limit = 10_000  # following: everything new since the last poll
            await asyncio.sleep(0.5)
    finally:
        store.close()


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], str(value))


async def run_sink(args: argparse.Namespace) -> int:
    from subscribers.journal.sink import JournalSink

    stop = stop_on_signals()
    async with AsyncExitStack() as stack:
        metrics = serve_metrics(stack, args.host, args.metrics_port)
        bus = await stack.enter_async_context(Bus(args.nats_url, name="hookbus-journal-sink", **connection_args(args)))
        sink = JournalSink(bus, args.workspace.resolve())
        print(f"journal sink: {sink.store.path}" + (f", metrics {metrics}" if metrics else ""), flush=True)
        await sink.run(stop)
    return 0
