"""A journal nobody can stop, poison or forge: each attack runs for real against a real server and sink.

Every hostile entry is published on the bus, then a valid one: the valid one
is stored, the hostile one counted (rejected by reason, or stored clamped),
and the sink goes on.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from bus import Bus, NatsServer
from bus._core.errors import JournalError
from bus._journal.entries import CAUSE_CAP, STREAM, TEXT_CAP, JournalEntry, decode_checked, ensure_journal_stream
from bus._transport.publisher import ordered_flush
from bus.testing import free_port
from subscribers.journal._store import DB_NAME, JournalStore, Query, Received
from subscribers.journal.sink import JournalSink
from tests.conftest import as_user as url
from tests.conftest import hookbus_cmd, run_cli, shipped_permissions
from tests.support.waiting import wait_until


def good(who: str, **fields: Any) -> dict[str, Any]:
    """A valid entry as a JSON object, to spoil one field of."""
    return orjson.loads(
        JournalEntry(
            kind="middleware", point="tool.call", phase="request", who=who, decision="cancel", **fields
        ).encode()
    )


def rejected(reason: str) -> float:
    return REGISTRY.get_sample_value("hookbus_journal_entries_rejected_total", {"reason": reason}) or 0.0


def clamped() -> float:
    return REGISTRY.get_sample_value("hookbus_journal_entries_clamped_total") or 0.0


class RunningSink:
    """A JournalSink on a real bus, in this process, with what it stored readable."""

    def __init__(self, bus: Bus, workspace: Path) -> None:
        self.bus = bus
        self.sink = JournalSink(bus, workspace, durable=f"attack-{os.urandom(4).hex()}")
        self.workspace = workspace

    def rows(self) -> list[Received]:
        store = JournalStore(self.workspace / DB_NAME)
        try:
            return [row for _, row in store.query(Query(limit=10_000))]
        finally:
            store.close()

    def whos(self) -> list[str]:
        return [row.entry.who for row in self.rows()]

    async def publish(self, data: bytes, subject: str = "hookbus.journal.middleware") -> None:
        await self.bus.port.nc.publish(subject, data)

    async def stored(self, who: str) -> Received:
        """Wait for the entry of ``who`` to be stored (valid entries follow every attack)."""
        await self.bus.flush()
        await wait_until(lambda: who in self.whos(), timeout=20, what=f"entry {who!r} stored")
        [row] = [row for row in self.rows() if row.entry.who == who]
        return row


@pytest.fixture
async def sink(bus: Bus, workspace: Path) -> AsyncIterator[RunningSink]:
    await ensure_journal_stream(bus.port)
    await bus.port.nc.jetstream().purge_stream(STREAM)  # entries of earlier tests on this server are not this test's
    running = RunningSink(bus, workspace)
    stop = asyncio.Event()
    task = asyncio.create_task(running.sink.run(stop))
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert task.exception() is None


HOSTILE: list[tuple[str, Callable[[], bytes], str]] = [
    ("depth 2**63", lambda: orjson.dumps({**good("x"), "depth": 2**63}), "invalid"),
    ("depth 2**64-1", lambda: orjson.dumps({**good("x"), "depth": 2**64 - 1}), "invalid"),
    ("depth -1", lambda: orjson.dumps({**good("x"), "depth": -1}), "invalid"),
    ("depth 1e300", lambda: orjson.dumps({**good("x"), "depth": 1e300}), "invalid"),
    (
        "duration 2**64",
        lambda: orjson.dumps(good("x")).replace(b'"duration_ms":null', b'"duration_ms":18446744073709551616'),
        "invalid",
    ),
    ("time in year 0", lambda: orjson.dumps({**good("x"), "time": "0000-01-01T00:00:00Z"}), "invalid"),
    ("time not a time", lambda: orjson.dumps({**good("x"), "time": "yesterday"}), "invalid"),
    ("who a number", lambda: orjson.dumps({**good("x"), "who": 2**63}), "invalid"),
    ("not UTF-8", lambda: orjson.dumps(good("x")).replace(b'"x"', b'"\xff\xfe"'), "malformed"),
    ("lone surrogate", lambda: orjson.dumps(good("x")).replace(b'"x"', b'"\\ud800"'), "malformed"),
    ("not JSON", lambda: b"\x00\x01 not json", "malformed"),
    ("an array", lambda: b"[1, 2]", "malformed"),
    ("unknown kind", lambda: orjson.dumps({**good("x"), "kind": "gossip"}), "kind"),
]


@pytest.mark.parametrize(("name", "make", "reason"), HOSTILE, ids=[name for name, _, _ in HOSTILE])
async def test_hostile_entry_is_counted_and_the_next_one_stored(
    sink: RunningSink, name: str, make: Callable[[], bytes], reason: str
) -> None:
    before = rejected(reason)
    await sink.publish(make())
    await sink.publish(orjson.dumps(good("after")))
    await sink.stored("after")
    assert rejected(reason) == before + 1
    assert sink.sink.rejected == 1 and sink.whos() == ["after"]


async def test_another_kind_on_a_kind_subject_is_refused(sink: RunningSink) -> None:
    """A publisher allowed only hookbus.journal.middleware.<user> cannot write trigger entries there."""
    before = rejected("kind")
    forged = orjson.dumps({**good("forged"), "kind": "trigger"})
    await sink.publish(forged, "hookbus.journal.middleware.agent-bob")
    await sink.publish(orjson.dumps(good("after")), "hookbus.journal.middleware.agent-bob")
    row = await sink.stored("after")
    assert rejected("kind") == before + 1
    assert row.origin == "agent-bob"  # the user the subject (and so the permissions) name
    assert "forged" not in sink.whos()


async def test_long_texts_are_cut_and_names_never_come_from_an_entry(sink: RunningSink) -> None:
    """A 300-character process (once ENAMETOOLONG for the JSONL file) and a 100 kB cause are stored cut."""
    before = clamped()
    long_process = "p" * 300 + "/../../etc"
    await sink.publish(orjson.dumps({**good("long"), "process": long_process, "cause": "c" * 100_000}))
    await sink.publish(orjson.dumps({**good("nul\x00byte"), "session": "s\x00"}))
    await sink.publish(orjson.dumps(good("after")))
    await sink.stored("after")
    assert clamped() == before + 1
    [long_row] = [row for row in sink.rows() if row.entry.who == "long"]
    assert len(long_row.entry.process) == TEXT_CAP and long_row.entry.process.endswith("…")
    assert len(long_row.entry.cause or "") == CAUSE_CAP
    assert "nul\ufffdbyte" in sink.whos()
    journal = sink.workspace / "journal"
    # The JSONL line follows the database row: wait for "after" there too before listing the files.
    await wait_until(lambda: b'"after"' in _read(journal / "middleware.jsonl"), what="the JSONL line of 'after'")
    files = sorted(path.name for path in journal.iterdir())
    assert files == ["middleware.jsonl"]  # named by the sink, whatever the entries said
    assert sink.sink.rejected == 0


async def test_the_journal_table_shows_control_characters_escaped(sink: RunningSink) -> None:
    """A cause with a terminal escape and a line break cannot paint the operator's terminal or fake a row."""
    await sink.publish(orjson.dumps({**good("painter"), "cause": "\x1b[2J\x1b[31mok\nFAKE ROW"}))
    await sink.stored("painter")
    table = run_cli("journal", "--workspace", str(sink.workspace))
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and len(table.stdout.splitlines()) == 2  # the header and one row
    assert "\\x1b[2J\\x1b[31mok\\nFAKE ROW" in table.stdout


async def test_nobody_can_pre_claim_an_entry_id(sink: RunningSink) -> None:
    """Entries that claim the ids of entries still to come suppress nothing: rows are keyed by stream place."""
    ids = [f"victim-{i}" for i in range(20)]
    for entry_id in ids:
        await sink.publish(orjson.dumps({**good("squatter"), "id": entry_id}))
    for entry_id in ids:
        await sink.publish(orjson.dumps({**good(f"real-{entry_id}"), "id": entry_id}))
    await sink.stored(f"real-{ids[-1]}")
    rows = sink.rows()
    assert [row.entry.who for row in rows].count("squatter") == 20
    assert {row.entry.id for row in rows if row.entry.who.startswith("real-")} == set(ids)
    assert [row.stream_seq for row in rows] == sorted({row.stream_seq for row in rows})


async def test_a_backdated_entry_shows_when_the_server_received_it(sink: RunningSink) -> None:
    floor = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "")
    await sink.publish(orjson.dumps({**good("backdated"), "time": "2001-01-01T00:00:00Z"}))
    row = await sink.stored("backdated")
    assert row.entry.time == "2001-01-01T00:00:00.000Z"  # what it claims, kept
    assert row.received >= floor  # when the server took it: now, not 2001
    hits = run_cli("journal", "--workspace", str(sink.workspace), "--json", "--since", floor[:10])
    assert [orjson.loads(line)["who"] for line in hits.stdout.splitlines()] == ["backdated"]


async def test_a_deleted_consumer_is_made_again(sink: RunningSink) -> None:
    await sink.publish(orjson.dumps(good("before")))
    await sink.stored("before")
    await sink.bus.port.nc.jetstream().delete_consumer(STREAM, sink.sink.durable)
    await sink.publish(orjson.dumps(good("after deletion")))
    await sink.stored("after deletion")


async def test_a_stream_made_again_counts_from_1_and_nothing_is_taken_for_a_duplicate(sink: RunningSink) -> None:
    await sink.publish(orjson.dumps(good("first stream")))
    first = await sink.stored("first stream")
    await sink.bus.port.nc.jetstream().delete_stream(STREAM)
    await ensure_journal_stream(sink.bus.port)  # as hookbus up would on its next start
    for i in range(1, first.stream_seq + 1):  # up to the sequence the first stream's entry has
        await sink.publish(orjson.dumps(good(f"second stream {i}")))
    same_place = await sink.stored(f"second stream {first.stream_seq}")
    assert same_place.stream_seq == first.stream_seq and same_place.stream != first.stream
    assert len(sink.rows()) == first.stream_seq + 1


async def test_journal_sink_process_counts_poison_on_its_metrics(own_server: NatsServer, workspace: Path) -> None:
    """The real ``hookbus journal-sink`` process: depth 2**63 (once a crash on every restart), then a valid entry."""
    port = free_port()
    env = {**os.environ, "NATS_URL": own_server.url}
    cmd = [*hookbus_cmd(), "journal-sink", "--workspace", str(workspace), "--metrics-port", str(port)]
    async with Bus(own_server.url) as bus:
        await ensure_journal_stream(bus.port)
        await bus.port.nc.publish("hookbus.journal.middleware", orjson.dumps({**good("x"), "depth": 2**63}))
        await bus.port.nc.publish("hookbus.journal.middleware", orjson.dumps(good("valid")))
        await bus.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            await asyncio.to_thread(proc.stdout.readline)
            await wait_until(lambda: _stored_whos(workspace) == ["valid"], timeout=20, what="the valid entry stored")
            metrics = await asyncio.to_thread(_scrape, port)
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert 'hookbus_journal_entries_rejected_total{reason="invalid"} 1.0' in metrics
    assert "hookbus_journal_entries_stored_total 1.0" in metrics
    assert "field 'depth': expected `int` <= 2147483647" in err  # logged, with what was wrong


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server running deploy/nats/permissions.conf as shipped."""
    config = shipped_permissions(tmp_path_factory.mktemp("shipped"))
    with NatsServer(config_file=config, jetstream=False) as started:
        yield started


async def test_the_sink_user_stores_past_poison_from_an_agent(shipped: NatsServer, workspace: Path) -> None:
    """On the shipped permissions: the bus role makes the stream, the sink runs as ``sink``, agent bob publishes
    poison on the one journal subject he may use, then a valid entry: it is stored, named as bob's."""
    async with Bus(url(shipped, "bus")) as bus_role:
        await ensure_journal_stream(bus_role.port)
    before = rejected("invalid")
    async with Bus(url(shipped, "sink")) as sink_bus, Bus(url(shipped, "agent-bob")) as bob:
        sink = JournalSink(sink_bus, workspace)
        stop = asyncio.Event()
        task = asyncio.create_task(sink.run(stop))
        try:
            subject = "hookbus.journal.middleware.agent-bob"
            await bob.port.publish_raw(subject, orjson.dumps({**good("poison"), "depth": 2**63}))
            await bob.port.publish_raw(subject, orjson.dumps(good("valid")))
            await bob.flush()
            await wait_until(lambda: sink.stored == 1, timeout=20, what="bob's valid entry stored")
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
    assert rejected("invalid") == before + 1 and sink.rejected == 1
    store = JournalStore(workspace / DB_NAME)
    try:
        [(_, row)] = store.query(Query())
    finally:
        store.close()
    assert (row.entry.who, row.origin) == ("valid", "agent-bob")


#: Each role of the shipped permissions and the journal subjects it may publish on (its own, named for it).
OWN_JOURNAL: dict[str, tuple[str, ...]] = {
    "agent-bob": ("middleware",),
    "module-guard": (),
    "module-records": ("middleware",),
    "worker": ("shell_hook", "subscriber", "trigger"),
    "sink": (),
    "bus": ("middleware", "shell_hook", "subscriber", "trigger"),
}
KINDS = ("middleware", "shell_hook", "subscriber", "trigger")


async def test_no_role_journals_as_another_and_what_it_journals_is_chained_as_its_own(
    shipped: NatsServer, workspace: Path
) -> None:
    """Every role of the shipped permissions publishes entries as every other user (and as none) for every kind,
    each claiming to be agent eva's kernel: the server refuses them all. What a role journals on its own subjects,
    claiming the same, the sink stores and chains as it is, with the origin naming the role; the chain verifies."""
    from subscribers.journal._checkpoints import JournalKey
    from subscribers.journal._verify import verify

    async with Bus(url(shipped, "bus")) as bus_role:
        await ensure_journal_stream(bus_role.port)
    claims = {
        "agent": "agent-eva",
        "process": "kernel:agent-eva",
        "session": "eva-session",
        "kernel": "eva-host:1",  # who-decided fields are claims too: the origin, not these, names the publisher
        "version": "eva-module-version",
    }
    denied: dict[str, list[str]] = {role: [] for role in OWN_JOURNAL}

    forged_subjects: dict[str, list[str]] = {}
    expected: set[tuple[str, str, str]] = set()
    async with Bus(url(shipped, "sink")) as sink_bus:
        sink = JournalSink(sink_bus, workspace)
        stop = asyncio.Event()
        task = asyncio.create_task(sink.run(stop))
        try:
            for role, own in OWN_JOURNAL.items():

                async def refused(exc: Exception, role: str = role) -> None:
                    denied[role].append(str(exc))

                nc = await nats.connect(url(shipped, role), error_cb=refused, allow_reconnect=False)
                try:
                    others = [user for user in (*OWN_JOURNAL, "agent-eva") if user != role]
                    subjects = [f"hookbus.journal.{kind}.{user}" for kind in KINDS for user in others]
                    subjects += [f"hookbus.journal.{kind}" for kind in KINDS]
                    subjects += [f"hookbus.journal.{kind}.{role}" for kind in KINDS if kind not in own]
                    forged_subjects[role] = subjects
                    for subject in subjects:
                        kind = subject.split(".")[2]
                        entry = {**good(f"forged-by-{role}", **claims), "kind": kind}
                        await nc.publish(subject, orjson.dumps(entry))
                    for kind in own:
                        entry = {**good(f"own-{role}-{kind}", **claims), "kind": kind}
                        await nc.publish(f"hookbus.journal.{kind}.{role}", orjson.dumps(entry))
                        expected.add((f"own-{role}-{kind}", kind, role))
                    await ordered_flush(nc, 5)  # nats-py's own flush may return before the server saw them
                finally:
                    await nc.close()

            def ours() -> set[tuple[str, str, str]]:
                return {(w, k, o) for w, k, o in _stored(workspace) if w.startswith(("own-", "forged-"))}

            await wait_until(lambda: ours() >= expected, timeout=20, what="every role's own entries stored")

            # The server tells at least one role it was refused (its notices can be lost when a connection
            # closes first); the stored set below is the proof: the stream takes every hookbus.journal.>
            # subject, so anything let through would be stored.
            await wait_until(lambda: any(denied.values()), timeout=10, what="a role told it was refused")
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
    assert ours() == expected  # nothing forged stored; each own entry under its publisher's name
    store = JournalStore(workspace / DB_NAME)
    try:
        rows = [row for _, row in store.query(Query(limit=1000)) if row.entry.who.startswith("own-")]
        assert all((row.entry.agent, row.entry.process) == ("agent-eva", "kernel:agent-eva") for row in rows)
        assert all((row.entry.kernel, row.entry.version) == ("eva-host:1", "eva-module-version") for row in rows)
        assert {row.origin for row in rows} == {role for role, own in OWN_JOURNAL.items() if own}  # as vouched
        assert all(row.chain is not None and row.hash for row in rows)  # chained as stored, claims and all
        report = verify(store.chained(), store.checkpoints(), JournalKey.of_workspace(workspace).public_key)
    finally:
        store.close()
    assert report.ok and not report.unsigned, report


def _stored(workspace: Path) -> set[tuple[str, str, str]]:
    if not (workspace / DB_NAME).exists():
        return set()
    store = JournalStore(workspace / DB_NAME)
    try:
        return {(row.entry.who, row.entry.kind, row.origin or "") for _, row in store.query(Query(limit=1000))}
    finally:
        store.close()


def _stored_whos(workspace: Path) -> list[str]:
    if not (workspace / DB_NAME).exists():
        return []
    store = JournalStore(workspace / DB_NAME)
    try:
        return [row.entry.who for _, row in store.query(Query())]
    finally:
        store.close()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


V1_SCHEMA = """
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT, point TEXT, phase TEXT, who TEXT, decision TEXT, cause TEXT, duration_ms REAL, session TEXT,
    agent TEXT, depth INTEGER, trace_id TEXT, identity TEXT, process TEXT, time TEXT, id TEXT,
    UNIQUE (id)
);
CREATE INDEX entries_point ON entries (point, time);
CREATE INDEX entries_who ON entries (who, time);
CREATE INDEX entries_decision ON entries (decision, time);
CREATE INDEX entries_session ON entries (session, time);
CREATE INDEX entries_time ON entries (time);
"""


def test_a_version_1_journal_is_migrated_and_keeps_its_rows(workspace: Path) -> None:
    """journal.db files written before rows were keyed by stream place still answer ``hookbus journal``."""
    db = sqlite3.connect(workspace / DB_NAME)
    db.executescript(V1_SCHEMA)
    for seq, who in ((3, "old-a"), (7, "old-b")):
        db.execute(
            "INSERT INTO entries (seq, kind, point, phase, who, decision, depth, process, time, id) "
            "VALUES (?, 'middleware', 'tool.call', 'request', ?, 'cancel', 0, 'h:1', '2026-01-01T10:00:00.000Z', ?)",
            (seq, who, f"id-{who}"),
        )
    db.commit()
    db.close()
    done = run_cli("journal", "--workspace", str(workspace), "--json")
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [(line["seq"], line["who"], line["received"]) for line in lines] == [
        (3, "old-a", "2026-01-01T10:00:00.000Z"),
        (7, "old-b", "2026-01-01T10:00:00.000Z"),
    ]
    store = JournalStore(workspace / DB_NAME)
    try:  # an id seen before no longer blocks a row: only the stream place does
        reused = JournalEntry(kind="trigger", point="p", phase="fire", who="new", decision="fired", id="id-old-a")
        fresh, refused = store.insert_many([Received(reused, stream_seq=1, received="2026-02-01T00:00:00.000Z")])
        assert [seq for seq, _ in fresh] == [8] and refused == []
        again, _ = store.insert_many([Received(reused, stream_seq=1, received="2026-02-01T00:00:00.000Z")])
        assert again == []  # a redelivery of the same stream place
    finally:
        store.close()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**200), 2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.text(min_size=5_000, max_size=6_000),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=10,
)
FIELDS = list(JournalEntry.__dataclass_fields__)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
    st.sampled_from([b"", b"\x00", b"\xff\xfe", b"\xc3"]),
)
def test_fuzzed_entries_never_stop_the_store(
    tmp_path_factory: pytest.TempPathFactory, spoil: dict[str, Any], junk: bytes
) -> None:
    """Hostile values in any field (huge integers, NUL, long strings, bytes that are not UTF-8) go through
    the sink's decoder into SQLite: each is stored or refused with a reason, and a valid entry after it is stored."""
    store = JournalStore(tmp_path_factory.mktemp("fuzz") / DB_NAME)
    try:
        data = json.dumps({**good("x"), **spoil}, ensure_ascii=False).encode()  # integers of any size
        if junk:
            data = data[:-1] + b', "junk": "' + junk + b'"}'
        rows: list[Received] = []
        try:
            entry, _ = decode_checked(data, "hookbus.journal.middleware")
        except JournalError as exc:
            assert exc.reason in ("malformed", "invalid", "kind") and str(exc)
        else:
            rows.append(Received(entry, stream_seq=1, received="2026-01-01T00:00:00.000Z"))
        valid, _ = decode_checked(orjson.dumps(good("valid")), "hookbus.journal.middleware")
        rows.append(Received(valid, stream_seq=2, received="2026-01-01T00:00:00.000Z"))
        fresh, refused = store.insert_many(rows)
        assert refused == []
        assert [row.entry.who for _, row in fresh][-1] == "valid" and len(fresh) == len(rows)
    finally:
        store.close()


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""
