"""``hookbus journal``: query the journal; ``hookbus journal-sink``: run only the sink."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from bus._cli.common import (
    add_metrics_port,
    add_nats_url,
    hint_event,
    hint_stage,
    serve_metrics,
    stop_on_signals,
)
from bus._cli.journal_verify import register as register_verify
from bus._cli.options import SERVICE_CONNECT_S, command_bus
from bus._cli.workspace import add_workspace, existing
from bus._cli.workspace import resolve as resolve_workspace
from bus._core.catalog import closest
from bus._core.errors import ConfigError
from bus._journal.entries import JournalEntry, canonical_time
from bus._runtime.visible import visible_lines

if TYPE_CHECKING:
    from subscribers.journal._store import JournalStore

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
    add_workspace(query, "workspace whose journal.db to read")
    query.add_argument("--point", help="stage or subject, e.g. tool.call")
    query.add_argument("--who", "--handler", dest="who", help="handler, hook or trigger name")
    query.add_argument("--decision", help="continue, cancel, patch, timeout, failed, absent, denied, fired, ...")
    query.add_argument("--session", help="only this session's entries")
    query.add_argument(
        "--kind", choices=["middleware", "shell_hook", "subscriber", "trigger"], help="only entries of this kind"
    )
    query.add_argument("--since", help="received from this time on, e.g. 2026-11-30T10:00:00Z")
    query.add_argument("--until", help="received before this time")
    query.add_argument("--limit", type=int, default=50, help="newest N entries (default: 50)")
    query.add_argument(
        "--after",
        type=int,
        metavar="SEQ",
        help="every entry after row SEQ (the 'seq' of each --json line), oldest first, --limit ignored: "
        "an exporter resumes from the last line it shipped",
    )
    query.add_argument("--json", action="store_true", help="one JSON object per line")
    query.add_argument("--follow", "-f", action="store_true", help="keep printing new entries")
    query.add_argument(
        "--events",
        action="store_true",
        help="with --session: the session's recorded events (hookbus up --record) and its entries, in time order",
    )
    query.add_argument(
        "--events-since", default="7d", metavar="DURATION", help="how far back --events reads the history (default: 7d)"
    )
    query.add_argument(
        "--count", type=int, default=0, metavar="N", help="exit after N entries (with --follow: wait for them)"
    )
    add_nats_url(query)  # --events reads the recorded history from the bus
    query.set_defaults(func=run_query)
    register_verify(query)

    sink = subparsers.add_parser(
        "journal-sink",
        help="run only the journal sink (stream -> SQLite + JSONL) against an existing NATS",
        description=(
            "Run only the journal sink: consume the journal stream of an existing NATS (JetStream) into the "
            "workspace's journal.db (SQLite) and JSONL files, for 'hookbus journal' to query. 'hookbus up' runs "
            "one itself."
        ),
    )
    add_workspace(sink, "workspace where journal.db and the JSONL files go, created if missing")
    sink.add_argument(
        "--group",
        metavar="NAME",
        help=(
            "share one durable consumer with every sink of group NAME (one per workspace): each entry is stored "
            "by one of them; each chains and signs its own share (hookbus journal verify says so)"
        ),
    )
    sink.add_argument("--host", default="127.0.0.1", help="address /metrics binds (default: 127.0.0.1)")
    add_metrics_port(sink)
    add_nats_url(sink, connect_s=SERVICE_CONNECT_S)  # a service may start before its server
    sink.set_defaults(func=run_sink)


async def run_query(args: argparse.Namespace) -> int:
    from subscribers.journal._store import DB_NAME, JournalStore, Query, dumps_line

    if args.decision is not None:
        check_decision(args.decision)  # before the workspace: a wrong filter is wrong anywhere
    workspace = existing(args)
    path: Path = workspace.path / DB_NAME
    if not path.exists():  # noqa: ASYNC240 - one stat before anything runs
        raise ConfigError(
            f"no journal at {path} (workspace {workspace.source}): "
            f"is 'hookbus up --workspace {workspace.path}' running?"
        )
    if args.limit < 1:
        raise ConfigError(f"--limit {args.limit} must be at least 1")
    store = JournalStore(path)
    if args.events:
        from bus._cli.session_timeline import print_timeline

        try:
            return await print_timeline(args, store)
        finally:
            store.close()
    if args.point:
        _hint_point(args.point)
    filters = {k: getattr(args, k) for k in ("point", "who", "decision", "session", "kind")}
    for bound in ("since", "until"):
        value = getattr(args, bound)
        filters[bound] = canonical_time(value) if value else None
    after, limit, printed = 0, args.limit, 0
    resuming = args.after is not None
    table = _Table(("received", *_COLUMNS))
    try:
        if resuming:
            after, limit = _cursor(store, args.after), _PAGE
        while True:
            rows = store.query(Query(**filters, after_seq=after, limit=limit, oldest=resuming))
            if not args.json:
                table.fit([[row.received, *(getattr(row.entry, c) for c in _COLUMNS)] for _, row in rows])
            for seq, row in rows:
                if args.json:
                    print(dumps_line(seq, row), flush=True)
                else:
                    print(table.line([row.received, *(getattr(row.entry, c) for c in _COLUMNS)]), flush=True)
                    for line in output_lines(row.entry):
                        print(line, flush=True)
                printed += 1
                if printed == args.count:
                    return 0
            if rows:
                after = rows[-1][0]
            elif after == 0 and not args.follow:
                print(f"(no journal entry in {path} matches; workspace {workspace.source})", file=sys.stderr)
            if resuming and len(rows) == limit:
                continue  # a cursor's backlog: the next page now, in order
            if not args.follow:
                return 0
            resuming, limit = True, _PAGE  # following: everything new since the last poll, oldest first
            await asyncio.sleep(0.5)
    finally:
        store.close()


#: Rows a poll or a cursor's page reads at most.
_PAGE = 10_000


def _cursor(store: JournalStore, after: int) -> int:
    """``--after``: a row number of this database; one past its last row came from another one."""
    if after < 0:
        raise ConfigError(f"--after {after} must be 0 or a row number (the 'seq' of a --json line)")
    last = store.last_seq()
    if after > last:
        raise ConfigError(
            f"--after {after} is past the last row of {store.path} ({last}): "
            "a cursor is a row number of one journal.db; is this the one it came from?"
        )
    return after


def output_lines(entry: JournalEntry) -> list[str]:
    """A shell hook run's kept output, under its row: each line escaped, prefixed with its stream."""
    lines: list[str] = []
    for stream in ("stdout", "stderr"):
        text = getattr(entry, stream)
        if text:
            lines.extend(f"    {stream} | {line}" for line in visible_lines(text))
    return lines


def _hint_point(point: str) -> None:
    """A --point that is neither a stage nor an event but looks like one: say which, on stderr."""
    from bus._core.catalog import is_catalogued, pattern_hint, suggest_stage
    from bus._core.stages import Stage

    if is_catalogued(point) or point in Stage._value2member_map_:
        return
    if suggest_stage(point) is not None:
        hint_stage(point, (), "hookbus journal")
    elif pattern_hint(point) is not None:
        hint_event(point, "hookbus journal")


def check_decision(value: str) -> None:
    """A --decision nobody writes is refused (naming the valid ones), not answered with an empty table."""
    from subscribers.journal._decisions import known_decisions

    valid = known_decisions()
    if value not in valid:
        meant = closest(value, valid)
        hint = f"; did you mean {meant}?" if meant else ""
        raise ConfigError(f"--decision {value!r} is not a journal decision{hint} (valid: {', '.join(valid)})")


class _Table:
    """Columns padded to their widest cell so far; the header comes with the first rows, the last column is free."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self._header: list[str] | None = [c.upper() for c in columns]
        self._widths = [len(c) for c in columns]

    def fit(self, rows: list[list[object]]) -> None:
        """Widen the columns for these rows and print the header if it is still due."""
        for row in rows:
            for index, value in enumerate(row[:-1]):
                self._widths[index] = max(self._widths[index], len(_cell(value)))
        if self._header is not None:
            print(self._pad(self._header), flush=True)
            self._header = None

    def line(self, row: list[object]) -> str:
        return self._pad([_cell(value) for value in row])

    def _pad(self, cells: list[str]) -> str:
        return "  ".join([*(c.ljust(w) for c, w in zip(cells[:-1], self._widths, strict=False)), cells[-1]])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], str(value))


async def run_sink(args: argparse.Namespace) -> int:
    from bus._presence import component, presence
    from subscribers.journal.sink import JournalSink

    stop = stop_on_signals()
    async with AsyncExitStack() as stack:
        metrics = serve_metrics(stack, args.host, args.metrics_port)
        bus = await stack.enter_async_context(command_bus(args, "hookbus-journal-sink"))
        sink = JournalSink(bus, resolve_workspace(args).path, group=args.group)
        parts = [component("journal_sink", "journal", str(sink.store.path))]
        await stack.enter_async_context(presence(bus, "hookbus journal-sink", parts))
        print(f"journal sink: {sink.store.path}" + (f", metrics {metrics}" if metrics else ""), flush=True)
        print(f"journal key: {sink.key.public_key}", flush=True)
        if sink.group:
            print(f"journal sink group {sink.group}: consumer {sink.durable}, this journal keeps a share", flush=True)
        await sink.run(stop)
    return 0
