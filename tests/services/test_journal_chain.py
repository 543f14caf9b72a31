"""The tamper-evident journal: hash chains per kind, signed checkpoints, ``hookbus journal verify``."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest

from bus import Bus, NatsServer
from bus._core.clock import timestamp_ms
from bus._journal.entries import JournalEntry, ensure_journal_stream, publish_entry
from subscribers.journal._chain import Chains, record_hash
from subscribers.journal._checkpoints import Checkpointer, JournalKey
from subscribers.journal._store import DB_NAME, JournalStore, JsonlWriter, Received
from subscribers.journal.sink import JournalSink
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until

_BASE_MS = 1_796_119_200_000  # 2026-12-01T10:00:00Z


def entry(i: int, kind: str = "middleware") -> JournalEntry:
    return JournalEntry(kind=kind, point="tool.call", phase="request", who=f"h{i % 5}", decision="continue")


def make_journal(workspace: Path, count: int, kinds: tuple[str, ...] = ("middleware",), every: int = 100) -> str:
    """A journal as the sink stores it (real store, chains and key): return the public key."""
    store = JournalStore(workspace / DB_NAME)
    jsonl = JsonlWriter(workspace / "journal")
    chains = Chains(store.heads())
    key = JournalKey.of_workspace(workspace)
    checkpointer = Checkpointer(key, "test-sink", {}, every_entries=every, every_s=3600)
    try:
        for start in range(0, count, 500):
            rows = [
                Received(entry(i, kinds[i % len(kinds)]), stream_seq=i + 1, received=timestamp_ms(_BASE_MS + i * 1000))
                for i in range(start, min(count, start + 500))
            ]
            fresh, refused = store.insert_many(rows, chains)
            assert not refused
            jsonl.write(fresh)
            for checkpoint in checkpointer.due(chains):
                store.add_checkpoint(checkpoint)
                jsonl.write_checkpoints([checkpoint])
        for checkpoint in checkpointer.due(chains, final=True):
            store.add_checkpoint(checkpoint)
            jsonl.write_checkpoints([checkpoint])
    finally:
        store.close()
    return key.public_key


def verify(workspace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("journal", "verify", "--workspace", str(workspace), *extra, timeout=120)


def sql(workspace: Path, *statements: str) -> None:
    db = sqlite3.connect(workspace / DB_NAME)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()


def test_an_untouched_journal_of_100000_entries_verifies(workspace: Path) -> None:
    public_key = make_journal(workspace, 100_000, kinds=("middleware", "trigger"), every=1000)
    done = verify(workspace, "--public-key", public_key)
    assert done.returncode == 0, done.stderr
    assert "journal holds: 100000 entries, 100 checkpoints" in done.stdout
    for kind in ("middleware", "trigger"):  # rotated at 10 MiB: the live file holds the newest, checked alone
        done = run_cli("journal", "verify", "--jsonl", str(workspace / "journal" / f"{kind}.jsonl"))
        assert done.returncode == 0, done.stderr


_SWAP = (
    "UPDATE entries SET seq = -1 WHERE seq = 40",
    "UPDATE entries SET seq = 40 WHERE seq = 41",
    "UPDATE entries SET seq = 41 WHERE seq = -1",
)


@pytest.mark.parametrize(
    ("tampering", "named"),
    [
        (("UPDATE entries SET decision = 'cancel' WHERE seq = 40",), "middleware: edited at seq 40 "),
        (("UPDATE entries SET hash = 'f00' WHERE seq = 40",), "middleware: edited at seq 40 "),
        (("DELETE FROM entries WHERE seq = 40",), "middleware: removed at before seq 41 (chain place 41"),
        (_SWAP, "middleware: reordered at seq 40 (chain place 41"),
    ],
    ids=["edit", "edit-hash", "delete", "reorder"],
)
def test_verify_names_the_entry_changed_in_sqlite(workspace: Path, tampering: tuple[str, ...], named: str) -> None:
    make_journal(workspace, 200)
    assert verify(workspace).returncode == 0
    sql(workspace, *tampering)
    done = verify(workspace)
    assert done.returncode == 1
    assert named in done.stderr
    assert "journal BROKEN" in done.stdout


def test_verify_names_an_inserted_entry_that_fits_the_chain(workspace: Path) -> None:
    """An operator forging a row that links to its predecessor, with a correct hash of its own, is found."""
    make_journal(workspace, 200)
    store = JournalStore(workspace / DB_NAME)
    rows = {row["seq"]: row for row in store.chained()}
    store.close()
    forged = {**rows[40], "seq": 1000, "stream_seq": 9999, "decision": "cancel", "id": "forged"}
    forged["prev"] = rows[39]["hash"]
    forged["chain"] = rows[40]["chain"]
    forged["hash"] = record_hash(forged)
    names = [name for name in forged if name != "seq"]
    sql(
        workspace,
        "UPDATE entries SET seq = seq + 100000 WHERE seq >= 40",
        f"INSERT INTO entries (seq, {', '.join(names)}) VALUES (40, {', '.join('?' * len(names))})".replace(
            "?", "{}"
        ).format(*(_literal(forged[n]) for n in names)),
    )
    done = verify(workspace)
    assert done.returncode == 1
    assert "middleware: inserted at seq 40 (chain place 40, id forged)" in done.stderr


def test_a_rewritten_chain_fails_at_its_checkpoint(workspace: Path) -> None:
    """Recomputing every hash after an edit still leaves the signed checkpoints unmatched."""
    make_journal(workspace, 200)
    store = JournalStore(workspace / DB_NAME)
    rows = list(store.chained())
    store.close()
    prev = rows[38]["hash"]
    db = sqlite3.connect(workspace / DB_NAME)
    with db:
        for row in rows[39:]:
            row = {**row, "decision": "cancel" if row["seq"] == 40 else row["decision"], "prev": prev}
            row["hash"] = record_hash(row)
            prev = row["hash"]
            db.execute(
                "UPDATE entries SET decision = ?, prev = ?, hash = ? WHERE seq = ?",
                (row["decision"], row["prev"], row["hash"], row["seq"]),
            )
    db.close()
    done = verify(workspace)
    assert done.returncode == 1
    assert "middleware: rewritten at seq 200 (chain place 200" in done.stderr  # its only checkpoint


def test_a_forged_checkpoint_and_a_cut_tail_are_named(workspace: Path) -> None:
    make_journal(workspace, 200)
    sql(workspace, "DELETE FROM entries WHERE seq > 150")
    done = verify(workspace)
    assert done.returncode == 1
    assert "middleware: removed at checkpoint of chain place 200" in done.stderr
    sql(workspace, "UPDATE checkpoints SET chain = 150, hash = (SELECT hash FROM entries WHERE seq = 150)")
    done = verify(workspace)
    assert "forged checkpoint" in done.stderr
    other = JournalKey.of_workspace(workspace.parent / "elsewhere").public_key
    done = verify(workspace, "--public-key", other)
    assert "signed by another key" in done.stderr


def _jsonl_tamper(lines: list[bytes], how: str) -> list[bytes]:
    if how == "edit":
        record = orjson.loads(lines[39])
        lines[39] = orjson.dumps({**record, "decision": "cancel"}) + b"\n"
    elif how == "delete":
        del lines[39]
    elif how == "reorder":
        lines[39], lines[40] = lines[40], lines[39]
    elif how == "insert":
        record = orjson.loads(lines[39])
        forged = {**record, "id": "forged", "decision": "cancel"}
        forged["hash"] = record_hash(forged)
        lines.insert(39, orjson.dumps(forged) + b"\n")
    return lines


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("edit", "middleware: edited at seq 40 "),
        ("delete", "middleware: removed at before seq 41 "),
        ("reorder", "middleware: reordered at seq 41 (chain place 41"),
        ("insert", "middleware: inserted at seq 40 (chain place 40, id forged)"),
    ],
)
def test_verify_names_the_entry_changed_in_jsonl(workspace: Path, how: str, named: str) -> None:
    make_journal(workspace, 200)
    path = workspace / "journal" / "middleware.jsonl"
    assert run_cli("journal", "verify", "--jsonl", str(path)).returncode == 0
    path.write_bytes(b"".join(_jsonl_tamper(path.read_bytes().splitlines(keepends=True), how)))
    done = run_cli("journal", "verify", "--jsonl", str(path))
    assert done.returncode == 1
    assert named in done.stderr


def test_since_checks_from_the_middle(workspace: Path) -> None:
    make_journal(workspace, 600)
    done = verify(workspace, "--since", "2026-12-01T10:05:00Z")
    assert done.returncode == 0, done.stderr
    assert "journal holds: 300 entries" in done.stdout


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


async def test_a_restarted_sink_process_continues_the_chain(own_server: NatsServer, workspace: Path) -> None:
    env = {**os.environ, "NATS_URL": own_server.url}
    cmd = [*hookbus_cmd(), "journal-sink", "--workspace", str(workspace)]
    async with Bus(own_server.url) as bus:
        await ensure_journal_stream(bus.port)
        for round_ in range(2):
            sink = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
            try:
                assert sink.stdout is not None
                await asyncio.to_thread(sink.stdout.readline)
                key_line = await asyncio.to_thread(sink.stdout.readline)
                assert key_line.startswith("journal key: ed25519:")
                for i in range(300):
                    await publish_entry(bus.port, entry(i, "middleware" if i % 3 else "trigger"))
                await bus.flush()
                await wait_until(lambda n=round_: _count(workspace) == 300 * (n + 1), 60, "the sink to store")
            finally:
                sink.terminate()
                sink.communicate(timeout=20)
            assert sink.returncode == 0
    done = verify(workspace, "--public-key", key_line.split(": ", 1)[1].strip())
    assert done.returncode == 0, done.stderr
    assert "journal holds: 600 entries" in done.stdout
    assert "not signed" not in done.stderr  # a stopping sink signs its tail
    store = JournalStore(workspace / DB_NAME)
    places = [row["chain"] for row in store.chained() if row["kind"] == "trigger"]
    store.close()
    assert places == list(range(1, 201))  # one chain across both runs


def _count(workspace: Path) -> int:
    store = JournalStore(workspace / DB_NAME)
    try:
        return store.count()
    finally:
        store.close()


async def test_two_sinks_chain_and_sign_independently(bus: Bus, tmp_path: Path) -> None:
    await ensure_journal_stream(bus.port)
    sinks = [JournalSink(bus, tmp_path / name) for name in ("a", "b")]
    assert sinks[0].key.public_key != sinks[1].key.public_key
    stop = asyncio.Event()
    tasks = [asyncio.create_task(sink.run(stop)) for sink in sinks]
    try:
        for i in range(50):
            await publish_entry(bus.port, entry(i))
        await wait_until(lambda: _both(sinks), 30, "both sinks to store")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    for name, sink in zip(("a", "b"), sinks, strict=True):
        done = verify(tmp_path / name, "--public-key", sink.key.public_key)
        assert done.returncode == 0, done.stderr
    crossed = verify(tmp_path / "a", "--public-key", sinks[1].key.public_key)
    assert crossed.returncode == 1
    assert "signed by another key" in crossed.stderr
    assert oct((tmp_path / "a" / "journal.key").stat().st_mode & 0o777) == "0o600"


async def _both(sinks: list[JournalSink]) -> bool:
    return all(sink.stored >= 50 for sink in sinks)


def test_a_journal_from_before_who_decided_migrates_and_still_verifies(workspace: Path) -> None:
    """A schema 4 journal (no who-decided columns) gets them on first open; its rows hash as they did."""
    from bus._journal.entries import DECIDER_FIELDS
    from subscribers.journal._schema import SCHEMA_VERSION

    public_key = make_journal(workspace, 300)
    sql(workspace, *(f"ALTER TABLE entries DROP COLUMN {name}" for name in DECIDER_FIELDS), "PRAGMA user_version = 4")
    done = verify(workspace, "--public-key", public_key)
    assert done.returncode == 0, done.stderr
    assert "journal holds: 300 entries" in done.stdout
    db = sqlite3.connect(workspace / DB_NAME)
    columns = {row[1] for row in db.execute("PRAGMA table_info(entries)")}
    version = db.execute("PRAGMA user_version").fetchone()[0]
    db.close()
    assert set(DECIDER_FIELDS) <= columns and version == SCHEMA_VERSION


def test_a_batch_with_deciders_redeliveries_and_a_refused_row_chains_as_stored(tmp_path: Path) -> None:
    """The batch path and the row-by-row one link alike: who-decided fields, a row stored already, one sent twice
    in a batch and a batch SQLite refuses a row of. Every stored row's hash is its JSON form's, in journal.db and
    in JSONL, its places follow each other and its ``prev`` is the hash before."""
    store = JournalStore(tmp_path / DB_NAME)
    jsonl = JsonlWriter(tmp_path / "journal")
    chains = Chains()
    decided = {"version": "1.2", "rule": "no-rm", "payload_sha256": "ab" * 32, "changed": "input", "kernel": "h:1"}

    def row(i: int) -> Received:
        made = JournalEntry(
            kind="middleware", point="tool.call", phase="request", who=f"h{i}", decision="cancel", **decided
        )
        return Received(made, stream_seq=i, received=timestamp_ms(_BASE_MS))

    try:
        first, _ = store.insert_many([row(1), row(2), row(2)], chains)  # the same stream place twice in a batch
        again, _ = store.insert_many([row(2), row(3)], chains)  # a redelivery beside a new row
        sql(  # a row SQLite refuses (as a full column would)
            tmp_path,
            "CREATE TRIGGER refuse BEFORE INSERT ON entries WHEN NEW.who = 'bad' BEGIN SELECT RAISE(ABORT, 'no'); END",
        )
        bad = Received(JournalEntry(kind="middleware", point="p", phase="q", who="bad", decision="d"), 99, "t")
        last, refused = store.insert_many([row(4), bad, row(5)], chains)
        assert [r.stream_seq for r, _ in refused] == [99]
        stored = first + again + last
        assert [r.entry.who for _, r in stored] == ["h1", "h2", "h3", "h4", "h5"]
        assert [r.chain for _, r in stored] == [1, 2, 3, 4, 5]
        jsonl.write(stored)
        from_db = list(store.chained())
        lines = (tmp_path / "journal" / "middleware.jsonl").read_bytes().splitlines()
        from_jsonl = [orjson.loads(line) for line in lines]
        assert from_db == from_jsonl
        for before, record in zip([None, *from_db], from_db, strict=False):
            assert record["hash"] == record_hash(record) and record["rule"] == "no-rm"
            assert record["prev"] == (before["hash"] if before else "")
        assert [seq for seq, _ in stored] == [record["seq"] for record in from_db]
    finally:
        store.close()


def test_the_hashed_form_is_the_json_form_without_seq_and_hash() -> None:
    """``hashed_json`` names its keys one by one: with every field of an entry set, it is exactly the row's JSON
    form (``entry_json``) without ``seq`` and ``hash``, so a field added to entries cannot go unhashed."""
    from dataclasses import fields

    from subscribers.journal._store import entry_json, hashed_json

    values = {f.name: f"{f.name}-value" for f in fields(JournalEntry)}
    values.update(kind="middleware", duration_ms=1.5, depth=3)
    entry = JournalEntry(**values)
    row = Received(entry, stream_seq=7, received="r", stream="s", origin="o").with_link(4, "p" * 64, "h" * 64)
    shown = entry_json(12, row)
    assert set(shown) - {"seq", "hash"} == set(values) | {"stream", "stream_seq", "received", "origin", "chain", "prev"}
    assert hashed_json(row, 4, "p" * 64) == {k: v for k, v in shown.items() if k not in ("seq", "hash")}
    assert record_hash(shown) == record_hash({**shown, "seq": 1, "hash": "x"})


@pytest.mark.parametrize("deciders", ["none", "some", "all"])
def test_the_hashed_form_is_encoded_in_sorted_key_order(deciders: str) -> None:
    """The chain hashes sorted-key JSON; ``hashed_json`` gives its keys in that order so that it is not sorted
    again: with no, some or every who-decided field set, its plain encoding is the sorted one, byte for byte."""
    from bus._journal.entries import DECIDER_FIELDS
    from subscribers.journal._chain import linked
    from subscribers.journal._store import hashed_json

    chosen = {"none": (), "some": ("rule", "kernel"), "all": DECIDER_FIELDS}[deciders]
    made = JournalEntry(
        kind="middleware", point="tool.call", phase="request", who="h", decision="cancel", cause="c", stdout="o",
        **{name: f"{name}-value" for name in chosen},
    )  # fmt: skip
    row = Received(made, stream_seq=7, received="r", stream="s", origin="o")
    body = hashed_json(row, 3, "p" * 64)
    assert list(body) == sorted(body)
    assert orjson.dumps(body) == orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    stored, _ = linked(row, Chains().head("middleware"), hashed_json)
    assert stored.hash == record_hash({**body, "chain": 1, "prev": "", "seq": 9, "hash": "x"})
