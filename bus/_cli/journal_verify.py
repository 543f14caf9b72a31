"""``hookbus journal verify``: check the journal's hash chains and signed checkpoints, offline."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bus._cli.workspace import add_workspace, existing
from bus._core.errors import ConfigError
from bus._journal.entries import canonical_time


def register(parent: argparse.ArgumentParser) -> None:
    commands = parent.add_subparsers(dest="journal_command", metavar="{verify}")
    verify = commands.add_parser(
        "verify",
        help="check the journal's hash chains and signed checkpoints; name the first entry changed",
        description=(
            "Check journal.db (or JSONL files) offline: every entry's hash, its link to the one before in its "
            "kind's chain, and the sink's signed checkpoints. Names the first entry edited, removed, reordered or "
            "inserted. Exit 0 if the journal holds, 1 if not."
        ),
    )
    add_workspace(verify, "workspace whose journal.db (and journal.key, checkpoints) to check")
    verify.add_argument("--since", help="only entries received from this time on (their chain taken from there)")
    verify.add_argument(
        "--jsonl", action="append", type=Path, metavar="FILE", help="check this JSONL file instead (repeatable)"
    )
    verify.add_argument(
        "--checkpoints",
        type=Path,
        metavar="FILE",
        help="checkpoints for --jsonl (default: the workspace's journal.checkpoints.jsonl)",
    )
    verify.add_argument(
        "--public-key",
        help="the key the checkpoints must be signed by (ed25519:..., printed by hookbus up); "
        "default: the workspace's journal.key",
    )
    verify.set_defaults(func=run_verify)


async def run_verify(args: argparse.Namespace) -> int:
    from subscribers.journal._checkpoints import KEY_NAME, JournalKey
    from subscribers.journal._store import CHECKPOINTS_JSONL, DB_NAME, JournalStore
    from subscribers.journal._verify import verify

    since = canonical_time(args.since) if args.since else None
    public_key: str | None = args.public_key
    if args.jsonl:
        files: list[Path] = args.jsonl
        beside = args.checkpoints or files[0].parent.parent / CHECKPOINTS_JSONL
        kinds = {path.name.split(".")[0] for path in files}  # <kind>.jsonl, rotated <kind>.jsonl.N
        checkpoints = [cp for cp in _lines(beside) if cp.get("kind") in kinds] if beside.exists() else []
        records = [r for path in files for r in _lines(path) if since is None or str(r.get("received")) >= since]
        if public_key is None:
            key_file = files[0].parent.parent / KEY_NAME
            public_key = JournalKey.of_workspace(key_file.parent).public_key if key_file.exists() else None
        report = verify(records, checkpoints, public_key, from_start=since is None and _starts(records))
        source = ", ".join(map(str, files))
    else:
        workspace = existing(args)
        path = workspace.path / DB_NAME
        if not path.exists():
            raise ConfigError(f"no journal at {path} (workspace {workspace.source})")
        if public_key is None and (workspace.path / KEY_NAME).exists():
            public_key = JournalKey.of_workspace(workspace.path).public_key
        store = JournalStore(path)
        try:
            report = verify(store.chained(since), store.checkpoints(), public_key, from_start=since is None)
        finally:
            store.close()
        source = str(path)
    for finding in report.findings:
        print(f"journal verify: {finding}", file=sys.stderr)
    for kind, count in sorted(report.unsigned.items()):
        print(f"journal verify: {kind}: the last {count} entries are not signed by a checkpoint yet", file=sys.stderr)
    for group in report.groups:
        print(
            f"journal verify: one of the sinks of group {group}: its chains are its own, over the entries it took; "
            "the group's other sinks hold the rest (verify each one's journal)",
            file=sys.stderr,
        )
    if report.unchained:
        print(f"journal verify: {report.unchained} entries from before the chain (not checked)", file=sys.stderr)
    state = "holds" if report.ok else "BROKEN"
    print(
        f"journal {state}: {report.entries} entries, {report.checkpoints} checkpoints in {source}"
        f"{f'; key {public_key}' if public_key else '; no key to check the signatures against'}"
    )
    return 0 if report.ok else 1


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        yield orjson.loads(line)
                    except orjson.JSONDecodeError:
                        raise ConfigError(f"{path}:{number} is not a JSON line: the file was damaged") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _starts(records: list[dict[str, Any]]) -> bool:
    """Whether the first record of each kind starts its chain (not a file rotated in the middle)."""
    firsts: dict[str, Any] = {}
    for record in records:
        firsts.setdefault(str(record.get("kind")), record.get("chain"))
    return all(place in (1, None) for place in firsts.values())
