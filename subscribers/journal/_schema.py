"""``journal.db``'s schema: its tables, its version, and the migration of a database of any older version.

A database opened by the store is brought to :data:`SCHEMA_VERSION` in one
``BEGIN IMMEDIATE`` transaction (one process migrates, the others then see
the new version). Version 6 stores the chain's hashes (``prev``, ``hash``) as
their 32 raw bytes instead of 64 hexadecimal characters: a row is some 84
bytes smaller. What is hashed does not change; the store turns them back into
hexadecimal when it reads them, so a row's JSON form, its hash and
``hookbus journal verify`` are what they were.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from bus._journal.entries import DECIDER_FIELDS, JournalEntry

#: Version 1 keyed rows by the entry's own id (which anyone could pre-claim); 2 by the stream sequence;
#: 3 added the shell hooks' output columns (stdout, stderr); 4 the hash chain (chain, prev, hash) and checkpoints;
#: 5 who decided (version, rule, payload_sha256, changed, fail_mode, kernel); 6 stores prev and hash as raw bytes.
SCHEMA_VERSION: Final = 6
COLUMNS: Final = tuple(JournalEntry.__dataclass_fields__)
PLACE: Final = ("stream", "stream_seq", "received", "origin")
#: The hash chain's fields (subscribers.journal._chain): the entry's place in its kind's chain,
#: the hash of the one before, its own hash.
CHAIN_FIELDS: Final = ("chain", "prev", "hash")
ALL: Final = PLACE + COLUMNS + CHAIN_FIELDS
#: Columns later versions added to the table, ALTERed into an older one (the chain's place is an integer).
_ADDED: Final = ("stdout", "stderr", "chain", "prev", "hash", *DECIDER_FIELDS)
_TYPES: Final = {
    "duration_ms": "REAL", "depth": "INTEGER", "stream_seq": "INTEGER", "chain": "INTEGER", "prev": "BLOB",
    "hash": "BLOB",
}  # fmt: skip
INDEXED: Final = ("point", "who", "decision", "session", "kind")
TABLE: Final = f"""
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    {", ".join(f"{name} {_TYPES.get(name, 'TEXT')}" for name in ALL)},
    UNIQUE (stream, stream_seq)
)
"""
#: Signed checkpoints (subscribers.journal._checkpoints): one row per signature, as its JSON fields (the hash in
#: hexadecimal, as signed).
_CHECKPOINTS: Final = """
CREATE TABLE IF NOT EXISTS checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, chain INTEGER, hash TEXT, time TEXT, sink TEXT,
    public_key TEXT, signature TEXT
)
"""
_INDEXES: Final = [
    *(f"CREATE INDEX IF NOT EXISTS entries_{c} ON entries ({c}, received)" for c in INDEXED),
    "CREATE INDEX IF NOT EXISTS entries_received ON entries (received)",
]


def version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection) -> None:
    """Create the schema in an empty database or bring an older one to :data:`SCHEMA_VERSION`.

    Runs inside the caller's ``BEGIN IMMEDIATE``; a database another process migrated meanwhile is left alone.
    """
    found = version(db)
    if found == SCHEMA_VERSION:
        return
    columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
    if not columns:
        db.execute(TABLE)
    elif "stream_seq" not in columns:
        _from_version_1(db, columns)
    else:
        for name in _ADDED:
            if name not in columns:  # fixed names and types
                db.execute(f"ALTER TABLE entries ADD COLUMN {name} {_TYPES.get(name, 'TEXT')}")
        if {"prev", "hash"} <= columns:
            _hashes_to_bytes(db)
    db.execute(_CHECKPOINTS)
    for statement in _INDEXES:
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _from_version_1(db: sqlite3.Connection, old_columns: set[str]) -> None:
    """Version 1 rows keep their numbers; their receive time is the time they claimed (all there is)."""
    for index in ("point", "who", "decision", "session", "time"):
        db.execute(f"DROP INDEX IF EXISTS entries_{index}")
    db.execute("ALTER TABLE entries RENAME TO entries_v1")
    db.execute(TABLE)
    names = ", ".join(name for name in COLUMNS if name in old_columns)
    db.execute(f"INSERT INTO entries (seq, received, {names}) SELECT seq, time, {names} FROM entries_v1 ORDER BY seq")
    db.execute("DROP TABLE entries_v1")


def _hashes_to_bytes(db: sqlite3.Connection) -> None:
    """Version 4 and 5 rows' hexadecimal ``prev`` and ``hash`` as raw bytes, in place (one UPDATE).

    Only a value that reads back as the very same text is converted (:func:`stored_digest`): a hash someone
    edited into something else (not hexadecimal, upper case) stays text and is still found edited. The columns
    keep their declared type (SQLite cannot change it); a column of TEXT affinity keeps a BLOB as it is.
    """
    db.create_function("hookbus_digest_bytes", 1, stored_digest, deterministic=True)
    try:
        db.execute(
            "UPDATE entries SET prev = hookbus_digest_bytes(prev), hash = hookbus_digest_bytes(hash) "
            "WHERE typeof(prev) = 'text' OR typeof(hash) = 'text'"
        )
    finally:
        db.create_function("hookbus_digest_bytes", 1, None)


def stored_digest(digest: str | None) -> bytes | str | None:
    """A hash as stored: its raw bytes when it is lower-case hexadecimal (as the chain writes it), else as it is."""
    if isinstance(digest, str):
        try:
            raw = bytes.fromhex(digest)
        except ValueError:
            return digest
        if raw.hex() == digest:
            return raw
    return digest


def shown_digest(stored: Any) -> Any:
    """A hash as read: hexadecimal again (a value someone wrote as text comes back as it was written)."""
    return stored.hex() if isinstance(stored, bytes) else stored
