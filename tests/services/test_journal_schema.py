"""journal.db's schema 6: the chain's hashes as raw bytes, and the migration of a schema 5 journal (hexadecimal)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from bus._core.clock import timestamp_ms
from subscribers.journal._chain import Chains, record_hash
from subscribers.journal._schema import SCHEMA_VERSION, TABLE
from subscribers.journal._store import DB_NAME, JournalStore, Received
from tests.services.test_journal_chain import _BASE_MS, _SWAP, entry, make_journal, sql, verify

#: The entries table as schema 5 declared it: every hash a TEXT column of 64 hexadecimal characters.
V5_TABLE = TABLE.replace("prev BLOB", "prev TEXT").replace("hash BLOB", "hash TEXT")


def as_version_5(workspace: Path) -> None:
    """Rewrite a journal into what schema 5 stored: the same rows, the hashes as lower-case hexadecimal text."""
    db = sqlite3.connect(workspace / DB_NAME)
    names = [row[1] for row in db.execute("PRAGMA table_info(entries)")]
    shown = ", ".join(f"lower(hex({n}))" if n in ("prev", "hash") else n for n in names)
    with db:
        db.execute("ALTER TABLE entries RENAME TO entries_v6")
        db.execute(V5_TABLE)
        db.execute(f"INSERT INTO entries ({', '.join(names)}) SELECT {shown} FROM entries_v6 ORDER BY seq")
        db.execute("DROP TABLE entries_v6")
        db.execute("PRAGMA user_version = 5")
    db.close()


def stored(workspace: Path, what: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(workspace / DB_NAME)
    try:
        return db.execute(f"SELECT {what} FROM entries ORDER BY seq").fetchall()
    finally:
        db.close()


def version(workspace: Path) -> int:
    db = sqlite3.connect(workspace / DB_NAME)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_a_new_journal_stores_each_hash_as_its_32_bytes(workspace: Path) -> None:
    make_journal(workspace, 50)
    assert version(workspace) == SCHEMA_VERSION == 6
    kinds = stored(workspace, "typeof(prev), length(prev), typeof(hash), length(hash)")
    assert kinds[0] == ("blob", 0, "blob", 32)  # the first entry's prev is the empty genesis, not NULL
    assert set(kinds[1:]) == {("blob", 32, "blob", 32)}
    store = JournalStore(workspace / DB_NAME)
    try:
        records = list(store.chained())
    finally:
        store.close()
    assert records[0]["prev"] == "" and all(len(r["hash"]) == 64 and r["hash"] == record_hash(r) for r in records)
    lines = (workspace / "journal" / "middleware.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in lines] == records  # the JSONL copy shows them as it always did


def test_a_version_5_journal_migrates_verifies_and_its_chain_goes_on(workspace: Path) -> None:
    """A schema 5 journal (hexadecimal text hashes) is converted in place on first open: every row reads as it
    did, verify holds against its signed checkpoints, and a sink carries on its chains from the migrated heads."""
    public_key = make_journal(workspace, 300, kinds=("middleware", "trigger"))
    as_version_5(workspace)
    before = stored(workspace, "seq, prev, hash")
    assert all(isinstance(h, str) and len(h) == 64 for _, _, h in before)
    done = verify(workspace, "--public-key", public_key)
    assert done.returncode == 0, done.stderr
    assert "journal holds: 300 entries" in done.stdout and "not signed" not in done.stderr
    assert version(workspace) == SCHEMA_VERSION
    assert set(stored(workspace, "typeof(prev), typeof(hash)")) == {("blob", "blob")}
    assert [(seq, bytes(p).hex(), bytes(h).hex()) for seq, p, h in stored(workspace, "seq, prev, hash")] == before
    store = JournalStore(workspace / DB_NAME)
    chains = Chains(store.heads())
    try:
        last = {r["kind"]: r for r in store.chained()}["middleware"]
        assert chains.head("middleware").hash == last["hash"] and chains.head("middleware").place == last["chain"]
        rows = [Received(entry(i), stream_seq=1000 + i, received=timestamp_ms(_BASE_MS + 10**6 + i)) for i in range(3)]
        fresh, refused = store.insert_many(rows, chains)
    finally:
        store.close()
    assert not refused
    assert [row.chain for _, row in fresh] == [last["chain"] + 1, last["chain"] + 2, last["chain"] + 3]
    assert fresh[0][1].prev == last["hash"]  # linked to the migrated head
    done = verify(workspace, "--public-key", public_key)
    assert done.returncode == 0, done.stderr
    assert "journal holds: 303 entries" in done.stdout
    assert "middleware: the last 3 entries are not signed" in done.stderr


def test_migrating_keeps_a_hash_edited_into_something_else_as_it_was(workspace: Path) -> None:
    """Only hexadecimal that reads back as the very same text is converted: a hash edited to upper case or to
    something not hexadecimal in a schema 5 journal is still found edited after the migration."""
    make_journal(workspace, 100)
    as_version_5(workspace)
    sql(
        workspace,
        "UPDATE entries SET hash = upper(hash) WHERE seq = 40",
        "UPDATE entries SET prev = 'not hex' WHERE seq = 70",
    )
    done = verify(workspace)
    assert done.returncode == 1
    assert "middleware: edited at seq 40 " in done.stderr
    assert version(workspace) == SCHEMA_VERSION
    kinds = {seq: (p, h) for seq, p, h in stored(workspace, "seq, typeof(prev), typeof(hash)")}
    assert kinds[40] == ("blob", "text") and kinds[70] == ("text", "blob") and kinds[41] == ("blob", "blob")
    (edited,) = stored(workspace, "hash")[39]
    assert isinstance(edited, str) and len(edited) == 64 and edited == edited.upper()  # kept as it was written


def _forge(workspace: Path) -> tuple[str, ...]:
    """A row that links to its predecessor with a correct hash of its own, stored as the sink stores hashes."""
    store = JournalStore(workspace / DB_NAME)
    rows = {row["seq"]: row for row in store.chained()}
    store.close()
    forged = {**rows[40], "seq": 1000, "stream_seq": 9999, "decision": "cancel", "id": "forged"}
    forged["prev"] = rows[39]["hash"]
    forged["hash"] = record_hash(forged)
    names = [name for name in forged if name != "seq"]
    values = ", ".join(
        f"X'{forged[n]}'" if n in ("prev", "hash") else "NULL" if forged[n] is None else repr(forged[n]) for n in names
    )
    return (
        "UPDATE entries SET seq = seq + 100000 WHERE seq >= 40",
        f"INSERT INTO entries (seq, {', '.join(names)}) VALUES (40, {values})",
    )


_EDITED_40 = "middleware: edited at seq 40 "


@pytest.mark.parametrize(
    ("tampering", "named"),
    [
        (("UPDATE entries SET decision = 'cancel' WHERE seq = 40",), "middleware: edited at seq 40 "),
        (("UPDATE entries SET hash = zeroblob(32) WHERE seq = 40",), "middleware: edited at seq 40 "),
        (("UPDATE entries SET hash = 'f00' WHERE seq = 40",), "middleware: edited at seq 40 "),
        (
            ("UPDATE entries SET prev = (SELECT hash FROM entries WHERE seq = 38) WHERE seq = 40",),
            "middleware: edited at seq 40 ",
        ),
        (("DELETE FROM entries WHERE seq = 40",), "middleware: removed at before seq 41 (chain place 41"),
        (_SWAP, "middleware: reordered at seq 40 (chain place 41"),
        (None, "middleware: inserted at seq 40 (chain place 40, id forged)"),
    ],
    ids=["edit", "edit-hash-bytes", "edit-hash-text", "relink", "delete", "reorder", "insert"],
)
def test_verify_names_the_entry_changed_after_the_migration(
    workspace: Path, tampering: tuple[str, ...] | None, named: str
) -> None:
    make_journal(workspace, 200)
    as_version_5(workspace)
    assert verify(workspace).returncode == 0  # migrates
    assert version(workspace) == SCHEMA_VERSION
    sql(workspace, *(tampering or _forge(workspace)))
    done = verify(workspace)
    assert done.returncode == 1
    assert named in done.stderr
    assert "journal BROKEN" in done.stdout
