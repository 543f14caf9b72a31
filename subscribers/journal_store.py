"""Where journal entries end up: SQLite (the record, queried by ``hookbus journal``) and JSONL.

SQLite runs in WAL mode with an index per query filter; inserting an entry
whose id is already stored does nothing, which is what makes redelivery after
a crash harmless. JSONL files are written per producing process and rotated
by size, for tools that read logs rather than databases.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bus.journal import JournalEntry

DB_NAME: Final = "journal.db"
JSONL_DIR: Final = "journal"
DEFAULT_JSONL_MAX_BYTES: Final = 10 * 1024 * 1024
DEFAULT_JSONL_KEEP: Final = 5

_COLUMNS: Final = tuple(JournalEntry.__dataclass_fields__)
_TYPES: Final = {"duration_ms": "REAL", "depth": "INTEGER"}
_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    {", ".join(f"{name} {_TYPES.get(name, 'TEXT')}" for name in _COLUMNS)},
    UNIQUE (id)
);
CREATE INDEX IF NOT EXISTS entries_point ON entries (point, time);
CREATE INDEX IF NOT EXISTS entries_who ON entries (who, time);
CREATE INDEX IF NOT EXISTS entries_decision ON entries (decision, time);
CREATE INDEX IF NOT EXISTS entries_session ON entries (session, time);
CREATE INDEX IF NOT EXISTS entries_time ON entries (time);
"""


@dataclass(frozen=True, slots=True)
class Query:
    """Filters of ``hookbus journal``; None means no filter on that column."""

    point: str | None = None
    who: str | None = None
    decision: str | None = None
    session: str | None = None
    kind: str | None = None
    since: str | None = None
    until: str | None = None
    after_seq: int = 0
    limit: int = 100


class JournalStore:
    """The SQLite journal in a workspace. Safe to share between threads (one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def insert_many(self, entries: Iterable[JournalEntry]) -> list[JournalEntry]:
        """Store entries in one transaction; return those that were new."""
        # Column names come from the dataclass, values are bound: nothing user-made is spliced in.
        sql = f"INSERT OR IGNORE INTO entries ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        fresh: list[JournalEntry] = []
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for entry in entries:
                    row = asdict(entry)
                    if self._db.execute(sql, [row[name] for name in _COLUMNS]).rowcount:
                        fresh.append(entry)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return fresh

    def query(self, query: Query) -> list[tuple[int, JournalEntry]]:
        """Entries matching ``query``, oldest first, with their sequence numbers."""
        where: list[str] = ["seq > ?"]
        params: list[object] = [query.after_seq]
        for column in ("point", "who", "decision", "session", "kind"):
            value = getattr(query, column)
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if query.since:
            where.append("time >= ?")
            params.append(query.since)
        if query.until:
            where.append("time < ?")
            params.append(query.until)
        # Columns are fixed names and every value is a bound parameter.
        sql = (
            f"SELECT seq, {', '.join(_COLUMNS)} FROM ("
            f"SELECT * FROM entries WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?) ORDER BY seq"
        )
        with self._lock:
            rows = self._db.execute(sql, [*params, query.limit]).fetchall()
        return [(row[0], JournalEntry(**dict(zip(_COLUMNS, row[1:], strict=True)))) for row in rows]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class JsonlWriter:
    """Appends entries to ``<dir>/<process>.jsonl``, rotating each file by size."""

    def __init__(
        self, directory: Path, max_bytes: int = DEFAULT_JSONL_MAX_BYTES, keep: int = DEFAULT_JSONL_KEEP
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.keep = keep
        directory.mkdir(parents=True, exist_ok=True)

    def path_for(self, process: str) -> Path:
        return self.directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', process)}.jsonl"

    def write(self, entries: Iterable[JournalEntry]) -> None:
        by_file: dict[Path, list[bytes]] = {}
        for entry in entries:
            by_file.setdefault(self.path_for(entry.process), []).append(entry.encode() + b"\n")
        for path, lines in by_file.items():
            self._rotate_if_full(path)
            with open(path, "ab") as out:
                out.writelines(lines)

    def _rotate_if_full(self, path: Path) -> None:
        if not path.exists() or path.stat().st_size < self.max_bytes:
            return
        for index in range(self.keep - 1, 0, -1):
            older = path.with_suffix(f".jsonl.{index}")
            if older.exists():
                older.replace(path.with_suffix(f".jsonl.{index + 1}"))
        path.replace(path.with_suffix(".jsonl.1"))
        oldest = path.with_suffix(f".jsonl.{self.keep + 1}")
        oldest.unlink(missing_ok=True)


def entry_json(seq: int, entry: JournalEntry) -> dict[str, Any]:
    """An entry as printed by ``hookbus journal --json``."""
    return {"seq": seq, **asdict(entry)}


def dumps_line(seq: int, entry: JournalEntry) -> str:
    return orjson.dumps(entry_json(seq, entry)).decode()
