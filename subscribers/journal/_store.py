"""Where journal entries end up: SQLite (the record, queried by ``hookbus journal``) and JSONL.

Rows are keyed by where the entry sits in the JetStream stream (the stream's
creation time and the message's stream sequence), never by anything the
entry claims: redelivery after a crash stores nothing twice, and nobody can
pre-claim the key of another's entry. Each row keeps the server's receive
time beside the time the entry claims, and the publisher's NATS user where
the subject names it. SQLite runs in WAL mode with an index per query
filter. JSONL files are one per kind, named by the sink, rotated by size, for
tools that read logs rather than databases. Both are owner-only files.
"""

from __future__ import annotations

import operator
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from bus._journal.entries import DECIDER_FIELDS, KINDS, JournalEntry
from bus._runtime.private_files import append_private, private_dir, private_file, restrict
from subscribers.journal._chain import Chains, Link, link_all, linked
from subscribers.journal._schema import (
    ALL,
    COLUMNS,
    INDEXED,
    PLACE,
    SCHEMA_VERSION,
    migrate,
    shown_digest,
    stored_digest,
    version,
)

DB_NAME: Final = "journal.db"
JSONL_DIR: Final = "journal"
DEFAULT_JSONL_MAX_BYTES: Final = 10 * 1024 * 1024
DEFAULT_JSONL_KEEP: Final = 5
#: Beside the JSONL directory, not in it: whatever reads ``journal/*.jsonl`` reads entries only.
CHECKPOINTS_JSONL: Final = "journal.checkpoints.jsonl"
BUSY_TIMEOUT_MS: Final = 10_000

_COLUMNS: Final = COLUMNS  # the entry's own fields, then the row's place, then its chain fields: ALL
_PLACE: Final = PLACE
_ALL: Final = ALL
#: An entry's column values, in order, in one call (a C loop rather than a getattr per column).
_entry_values: Final = operator.attrgetter(*_COLUMNS)
#: The columns every row's JSON form has, and the who-decided ones it has only when set.
_BASE_COLUMNS: Final = tuple(name for name in _COLUMNS if name not in DECIDER_FIELDS)
_base_values: Final = operator.attrgetter(*_BASE_COLUMNS)
_decider_values: Final = operator.attrgetter(*DECIDER_FIELDS)
_NO_DECIDERS: Final = (None,) * len(DECIDER_FIELDS)
_UNLINKED: Final = (None, None)
# Column names are fixed, values are bound: nothing anyone sent is spliced in.
_INSERT: Final = f"INSERT INTO entries ({', '.join(_ALL)}) VALUES ({', '.join('?' * len(_ALL))})"
_INSERT_OR_IGNORE: Final = _INSERT.replace("INSERT", "INSERT OR IGNORE", 1)
CHECKPOINT_FIELDS: Final = ("kind", "chain", "hash", "time", "sink", "public_key", "signature")


@dataclass(slots=True)
class Received:
    """An entry as the sink took it off the stream.

    ``stream`` tells streams apart (a stream deleted and made again counts its
    sequence from 1 again), ``stream_seq`` is the entry's place in it,
    ``received`` the server's time for it and ``origin`` the publisher's NATS
    user from the subject (None where the subject has none).

    Not frozen, yet never changed once made (:meth:`with_link` makes a new one): a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, ten times the cost, twice per chained row.
    """

    entry: JournalEntry
    stream_seq: int
    received: str
    stream: str = ""
    origin: str | None = None
    chain: int | None = None
    prev: str | None = None
    hash: str | None = None
    #: The bytes the chain hashed (the JSON form without ``seq`` and ``hash``, sorted keys): the JSONL line
    #: is spliced from them, not encoded again.
    hashed: bytes | None = field(default=None, compare=False, repr=False)
    #: ``prev`` and ``hash`` as journal.db stores them (raw bytes), from the chain's own digests: not converted
    #: from the hexadecimal again.
    stored: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)

    def values(self) -> list[Any]:
        # attributes, not asdict(): that deep-copies, at several times the cost
        stored = self.stored
        if stored is None:  # unchained (None, None), or a row made by hand
            unlinked = self.hash is None and self.prev is None
            stored = _UNLINKED if unlinked else (stored_digest(self.prev), stored_digest(self.hash))
        return [
            self.stream,
            self.stream_seq,
            self.received,
            self.origin,
            *_entry_values(self.entry),
            self.chain,
            *stored,  # raw bytes in journal.db (subscribers.journal._schema)
        ]

    def with_link(
        self, chain: int, prev: str, digest: str, hashed: bytes | None = None, stored: tuple[Any, Any] | None = None
    ) -> Received:
        """This row with its chain fields (built directly: ``dataclasses.replace`` costs several times more)."""
        return Received(
            self.entry, self.stream_seq, self.received, self.stream, self.origin, chain, prev, digest, hashed, stored
        )


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
    #: The oldest ``limit`` rows after ``after_seq`` rather than the newest: a cursor's pages, in order.
    oldest: bool = False


class JournalStore:
    """The SQLite journal in a workspace. Safe to share between threads (one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)
        private_file(path)  # SQLite gives its -wal and -shm files the database file's mode
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # A reader (hookbus journal) and the sink share the file: wait for a lock rather than fail.
        self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        if version(self._db) != SCHEMA_VERSION:
            self._migrate()
        for suffix in ("-wal", "-shm"):  # made 0600 by SQLite after the database; older ones may not be
            restrict(path.with_name(path.name + suffix))

    def _migrate(self) -> None:
        """Create the schema, or bring an older database to this version (subscribers.journal._schema)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one process migrates; the others then see the new version
            try:
                migrate(self._db)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def insert_many(
        self, rows: Iterable[Received], chains: Chains | None = None
    ) -> tuple[list[tuple[int, Received]], list[tuple[Received, str]]]:
        """Store rows in one transaction: return the new ones with their numbers, and those SQLite refused.

        With ``chains`` each new row is linked into its kind's chain (a
        redelivered row, skipped, takes no place in it); the returned rows
        carry their chain fields, for the JSONL copy.

        A row already stored (same stream place) is skipped quietly: that is a
        redelivery. A row SQLite refuses is returned with the reason and the
        rest go on; a database that cannot be written at all (disk full,
        locked) raises ``sqlite3.OperationalError`` and stores nothing.

        The batch is written with one ``executemany`` under the write lock
        (``BEGIN IMMEDIATE``: the new rows' numbers follow each other), the
        rows already stored found by one query per stream first; only a batch
        with a row SQLite refuses is written again row by row, to name it.
        """
        rows = list(rows)
        fresh: list[tuple[int, Received]] = []
        refused: list[tuple[Received, str]] = []
        with self._lock:
            before = chains.snapshot() if chains is not None else {}
            self._db.execute("BEGIN IMMEDIATE")
            try:
                done = self._insert_batch(rows, chains)
                if done is None:  # a row refused: back to before the batch, and row by row
                    if chains is not None:
                        chains.restore(before)
                    fresh, refused = self._insert_each(rows, chains)
                else:
                    fresh = done
                self._db.execute("COMMIT")
            except BaseException:
                if chains is not None:
                    chains.restore(before)  # nothing stored: the chains stand where they stood
                if self._db.in_transaction:  # some errors (disk full, I/O) have rolled it back already
                    self._db.execute("ROLLBACK")
                raise
        return fresh, refused

    def _new_rows(self, rows: list[Received]) -> list[Received]:
        """``rows`` but those stored already (or twice in ``rows``): one range query per stream."""
        spans: dict[str, tuple[int, int]] = {}
        for row in rows:
            low, high = spans.get(row.stream, (row.stream_seq, row.stream_seq))
            spans[row.stream] = (min(low, row.stream_seq), max(high, row.stream_seq))
        seen: set[tuple[str, int]] = set()
        sql = "SELECT stream, stream_seq FROM entries WHERE stream = ? AND stream_seq BETWEEN ? AND ?"
        for stream, (low, high) in spans.items():
            seen.update(self._db.execute(sql, (stream, low, high)))
        new: list[Received] = []
        for row in rows:
            place = (row.stream, row.stream_seq)
            if place not in seen:
                seen.add(place)
                new.append(row)
        return new

    def _insert_batch(self, rows: list[Received], chains: Chains | None) -> list[tuple[int, Received]] | None:
        """The new rows stored in one ``executemany``, with their numbers; None (nothing kept) if one is refused."""
        try:
            new = self._new_rows(rows)
        except (OverflowError, ValueError, sqlite3.InterfaceError):  # a stream place SQLite cannot take
            return None
        if not new:
            return []
        if chains is not None:
            new = link_all(new, chains, hashed_json)
        self._db.execute("SAVEPOINT batch")
        changes = self._db.total_changes
        try:
            self._db.executemany(_INSERT, [row.values() for row in new])
        except sqlite3.OperationalError:
            raise
        except (sqlite3.Error, OverflowError, ValueError):
            self._db.execute("ROLLBACK TO batch")
            self._db.execute("RELEASE batch")
            return None
        if self._db.total_changes - changes != len(new):  # never under the write lock; if so, row by row
            self._db.execute("ROLLBACK TO batch")
            self._db.execute("RELEASE batch")
            return None
        self._db.execute("RELEASE batch")
        last = int(self._db.execute("SELECT last_insert_rowid()").fetchone()[0])
        return list(zip(range(last - len(new) + 1, last + 1), new, strict=True))

    def _insert_each(
        self, rows: list[Received], chains: Chains | None
    ) -> tuple[list[tuple[int, Received]], list[tuple[Received, str]]]:
        """Row by row, in the open transaction: a row SQLite refuses is named with its reason, the rest stored."""
        fresh: list[tuple[int, Received]] = []
        refused: list[tuple[Received, str]] = []
        for row in rows:
            head: Link | None = None
            if chains is not None:
                row, head = linked(row, chains.head(row.entry.kind), hashed_json)
            try:
                cursor = self._db.execute(_INSERT_OR_IGNORE, row.values())
            except sqlite3.OperationalError:
                raise
            except (sqlite3.Error, OverflowError, ValueError) as exc:
                refused.append((row, repr(exc)))
                continue
            if cursor.rowcount and cursor.lastrowid is not None:
                fresh.append((cursor.lastrowid, row))
                if chains is not None and head is not None:
                    chains.heads[row.entry.kind] = head
        return fresh, refused

    def heads(self) -> dict[str, Link]:
        """Where each kind's chain stands in this database: a restarted sink goes on from there."""
        sql = (
            "SELECT kind, chain, hash FROM entries WHERE seq IN "
            "(SELECT max(seq) FROM entries WHERE chain IS NOT NULL GROUP BY kind)"
        )
        with self._lock:
            return {kind: Link(place, str(shown_digest(digest))) for kind, place, digest in self._db.execute(sql)}

    def chained(self, since: str | None = None) -> Iterator[dict[str, Any]]:
        """Every row in its JSON form, in row order (for verifying); ``since`` a receive time."""
        names = ", ".join(_ALL)
        where, params = ("WHERE received >= ?", [since]) if since else ("", [])
        with self._lock:
            cursor = self._db.execute(f"SELECT seq, {names} FROM entries {where} ORDER BY seq", params)
            while batch := cursor.fetchmany(5000):
                for values in batch:
                    yield entry_json(values[0], _row(values[1:]))

    def add_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        names = ", ".join(CHECKPOINT_FIELDS)
        with self._lock:
            self._db.execute(
                f"INSERT INTO checkpoints ({names}) VALUES ({', '.join('?' * len(CHECKPOINT_FIELDS))})",
                [checkpoint[name] for name in CHECKPOINT_FIELDS],
            )

    def checkpoints(self) -> list[dict[str, Any]]:
        names = ", ".join(CHECKPOINT_FIELDS)
        with self._lock:
            found = self._db.execute(f"SELECT {names} FROM checkpoints ORDER BY id").fetchall()
        return [dict(zip(CHECKPOINT_FIELDS, map(shown_digest, values), strict=True)) for values in found]

    def query(self, query: Query) -> list[tuple[int, Received]]:
        """Rows matching ``query``, oldest first, with their numbers; ``since``/``until`` are receive times."""
        where: list[str] = ["seq > ?"]
        params: list[object] = [query.after_seq]
        for column in INDEXED:
            value = getattr(query, column)
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if query.since:
            where.append("received >= ?")
            params.append(query.since)
        if query.until:
            where.append("received < ?")
            params.append(query.until)
        # Columns are fixed names and every value is a bound parameter.
        names = ", ".join(_ALL)
        order = "" if query.oldest else " DESC"
        sql = (
            f"SELECT seq, {names} FROM ("
            f"SELECT * FROM entries WHERE {' AND '.join(where)} ORDER BY seq{order} LIMIT ?) ORDER BY seq"
        )
        with self._lock:
            found = self._db.execute(sql, [*params, query.limit]).fetchall()
        return [(values[0], _row(values[1:])) for values in found]

    def last_seq(self) -> int:
        """The number of the newest row (0 when empty): where a cursor past it points is another database."""
        with self._lock:
            return int(self._db.execute("SELECT coalesce(max(seq), 0) FROM entries").fetchone()[0])

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _row(values: tuple[Any, ...]) -> Received:
    stream, stream_seq, received, origin = values[: len(_PLACE)]
    end = len(_PLACE) + len(_COLUMNS)
    entry = JournalEntry(**dict(zip(_COLUMNS, values[len(_PLACE) : end], strict=True)))
    chain, prev, digest = values[end:]
    received = received or entry.time
    return Received(
        entry, stream_seq or 0, received, stream or "", origin, chain, shown_digest(prev), shown_digest(digest)
    )


class JsonlWriter:
    """Appends rows to ``<dir>/<kind>.jsonl``, rotating each file by size.

    The names come from the fixed list of kinds, never from an entry, so no
    entry can make a name too long or odd, and a one-shot process (``hookbus
    intercept``) adds no file of its own.
    """

    def __init__(
        self, directory: Path, max_bytes: int = DEFAULT_JSONL_MAX_BYTES, keep: int = DEFAULT_JSONL_KEEP
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.keep = keep
        self._paths: dict[str, Path] = {}
        private_dir(directory)

    def path_for(self, kind: str) -> Path:
        if kind not in KINDS:  # decoding refuses other kinds; this keeps the rule next to the file name
            raise ValueError(f"no journal file for kind {kind!r}")
        path = self._paths.get(kind)
        if path is None:  # a Path per row costs as much as the row's JSON: one per kind
            path = self._paths[kind] = self.directory / f"{kind}.jsonl"
        return path

    def write(self, rows: Iterable[tuple[int, Received]]) -> None:
        by_file: dict[Path, list[bytes]] = {}
        for seq, row in rows:
            if row.hashed is not None:  # the hashed bytes as they are, between the row number and the hash
                line = b'{"seq":%d,%s,"hash":"%s"}\n' % (seq, row.hashed[1:-1], str(row.hash).encode())
            else:
                line = orjson.dumps(entry_json(seq, row)) + b"\n"
            by_file.setdefault(self.path_for(row.entry.kind), []).append(line)
        for path, lines in by_file.items():
            self._rotate_if_full(path)
            append_private(path, b"".join(lines))

    def write_checkpoints(self, checkpoints: list[dict[str, Any]]) -> None:
        """Append signed checkpoints to ``journal.checkpoints.jsonl`` beside the directory (small: never rotated)."""
        data = b"".join(orjson.dumps(checkpoint) + b"\n" for checkpoint in checkpoints)
        append_private(self.directory.parent / CHECKPOINTS_JSONL, data)

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


def entry_json(seq: int, row: Received) -> dict[str, Any]:
    """A row as printed by ``hookbus journal --json`` and written to JSONL.

    The fields saying who decided are left out when empty: a row stored before they existed hashes as it did.
    """
    entry = row.entry
    body = {
        "seq": seq,
        "stream": row.stream,
        "stream_seq": row.stream_seq,
        "received": row.received,
        "origin": row.origin,
        **dict(zip(_BASE_COLUMNS, _base_values(entry), strict=True)),
        "chain": row.chain,
        "prev": row.prev,
        "hash": row.hash,
    }
    deciders = _decider_values(entry)
    if deciders != _NO_DECIDERS:  # one comparison for the rows that have none (all but middleware's)
        for name, value in zip(DECIDER_FIELDS, deciders, strict=True):
            if value is not None:
                body[name] = value
    return body


def hashed_json(row: Received, chain: int, prev: str) -> dict[str, Any]:
    """:func:`entry_json` of ``row`` at ``chain`` after ``prev`` without ``seq`` and ``hash``: what the chain hashes.

    Its keys come in sorted order, so ``orjson.dumps`` of it gives the sorted-key JSON the chain hashes without
    sorting again (a quarter of the encoding's cost, once per stored row). Built apart rather than copied from
    :func:`entry_json` and cut, as one dict display: a third faster than zipping names with values. Its keys are
    ``_BASE_COLUMNS`` and the place's (tests hold it to :func:`entry_json` and to ``OPT_SORT_KEYS``).
    """
    e = row.entry
    deciders = _decider_values(e)
    if deciders == _NO_DECIDERS:  # one comparison for the rows that have none (all but middleware's)
        return {
            "agent": e.agent, "cause": e.cause, "chain": chain, "decision": e.decision, "depth": e.depth,
            "duration_ms": e.duration_ms, "id": e.id, "identity": e.identity, "kind": e.kind, "origin": row.origin,
            "phase": e.phase, "point": e.point, "prev": prev, "process": e.process, "received": row.received,
            "session": e.session, "stderr": e.stderr, "stdout": e.stdout, "stream": row.stream,
            "stream_seq": row.stream_seq, "time": e.time, "trace_id": e.trace_id, "who": e.who,
        }  # fmt: skip
    version, rule, payload_sha256, changed, fail_mode, kernel = deciders
    body = {
        "agent": e.agent, "cause": e.cause, "chain": chain, "changed": changed, "decision": e.decision,
        "depth": e.depth, "duration_ms": e.duration_ms, "fail_mode": fail_mode, "id": e.id, "identity": e.identity,
        "kernel": kernel, "kind": e.kind, "origin": row.origin, "payload_sha256": payload_sha256, "phase": e.phase,
        "point": e.point, "prev": prev, "process": e.process, "received": row.received, "rule": rule,
        "session": e.session, "stderr": e.stderr, "stdout": e.stdout, "stream": row.stream,
        "stream_seq": row.stream_seq, "time": e.time, "trace_id": e.trace_id, "version": version, "who": e.who,
    }  # fmt: skip
    for name, value in zip(DECIDER_FIELDS, deciders, strict=True):
        if value is None:  # left out when empty, as in entry_json; deleting keeps the others' order
            del body[name]
    return body


def dumps_line(seq: int, row: Received) -> str:
    return orjson.dumps(entry_json(seq, row)).decode()
