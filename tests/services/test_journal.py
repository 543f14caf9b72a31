"""The journal: entries over the bus, captured by JetStream, stored once in SQLite and JSONL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import orjson
import pytest

from bus import Bus, NatsServer
from bus._core.errors import JournalError
from bus._journal.entries import STREAM, JournalEntry, decode_entry, ensure_journal_stream, publish_entry
from subscribers.journal._store import DB_NAME, JournalStore, JsonlWriter, Query, Received
from subscribers.journal.sink import JournalSink, durable_for
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until


def entry(**overrides: object) -> JournalEntry:
    fields: dict[str, object] = {
        "kind": "middleware",
        "point": "tool.call",
        "phase": "request",
        "who": "guard",
        "decision": "cancel",
        "cause": "rm -rf",
        "duration_ms": 1.5,
        "session": "s1",
    }
    fields.update(overrides)
    return JournalEntry(**fields)  # type: ignore[arg-type]


def received(*entries: JournalEntry, first: int = 1) -> list[Received]:
    """Rows as the sink makes them, numbered from ``first`` and received when they claim."""
    return [Received(e, stream_seq=first + i, received=e.time) for i, e in enumerate(entries)]


async def wait_count(store_path: Path, count: int, timeout: float = 30.0) -> int:
    async def poll() -> int:
        while True:
            if store_path.exists():
                store = JournalStore(store_path)
                try:
                    n = store.count()
                finally:
                    store.close()
                if n >= count:
                    return n
            await asyncio.sleep(0.1)

    return await asyncio.wait_for(poll(), timeout)


def test_entry_round_trip_and_validation() -> None:
    original = entry()
    assert decode_entry(original.encode()) == original
    with pytest.raises(JournalError, match="kind"):
        entry(kind="gossip")
    for raw, reason in [
        (b"nope", "not JSON"),
        (b"[]", "JSON object"),
        (orjson.dumps({**orjson.loads(original.encode()), "who": 3}), "'who'"),
        (orjson.dumps({**orjson.loads(original.encode()), "duration_ms": "slow"}), "'duration_ms'"),
        (orjson.dumps({**orjson.loads(original.encode()), "depth": -1}), "'depth'"),
    ]:
        with pytest.raises(JournalError, match=reason):
            decode_entry(raw)


async def test_sink_stores_entries_from_the_bus(bus: Bus, workspace: Path) -> None:
    await ensure_journal_stream(bus.port)
    sink = JournalSink(bus, workspace, durable="test-sink-basic")
    stop = asyncio.Event()
    task = asyncio.create_task(sink.run(stop))
    try:
        await publish_entry(bus.port, entry(who="a", decision="continue"))
        await bus.port.publish_raw("hookbus.journal.middleware", b"not an entry")
        await publish_entry(
            bus.port,
            entry(kind="shell_hook", point="prx.lifecycle.tool_call", phase="run", who="audit.sh", decision="ok"),
        )
        await wait_count(workspace / DB_NAME, 2)
    finally:
        stop.set()
        await task
    assert sink.rejected == 1
    store = JournalStore(workspace / DB_NAME)
    rows = [row.entry for _, row in store.query(Query())]
    store.close()
    assert [(e.kind, e.who, e.decision) for e in rows] == [
        ("middleware", "a", "continue"),
        ("shell_hook", "audit.sh", "ok"),
    ]
    jsonl = sorted((workspace / "journal").glob("*.jsonl"))
    assert [path.name for path in jsonl] == ["middleware.jsonl", "shell_hook.jsonl"]  # one file per kind
    assert [len(path.read_text().splitlines()) for path in jsonl] == [1, 1]


async def test_sink_killed_mid_stream_loses_none_and_duplicates_none(own_server: NatsServer, workspace: Path) -> None:
    async with Bus(own_server.url) as bus:
        await ensure_journal_stream(bus.port)
        await _kill_and_restart_sink(bus, own_server.url, workspace)


async def _kill_and_restart_sink(bus: Bus, nats_url: str, workspace: Path) -> None:
    env = {**os.environ, "NATS_URL": nats_url}
    cmd = [*hookbus_cmd(), "journal-sink", "--workspace", str(workspace)]
    sink = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        await asyncio.to_thread(sink.stdout.readline)
        ids = []
        for i in range(10_000):
            e = entry(who=f"h{i % 7}", session=f"s{i}")
            ids.append(e.id)
            await publish_entry(bus.port, e)
            if i == 3_000:
                await bus.flush()
                await wait_count(workspace / DB_NAME, 1)
                sink.send_signal(signal.SIGKILL)  # no chance to ack or close anything
                sink.communicate()
        await bus.flush()
        sink = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        await wait_count(workspace / DB_NAME, 10_000, timeout=60)
        # A duplicate would come from a batch the killed sink fetched and never acknowledged, redelivered
        # after the ack wait: only once the consumer has nothing pending or unacknowledged is the store final.
        await wait_until(lambda: _all_acknowledged(bus, workspace), 60, "the sink to acknowledge everything")
    finally:
        sink.send_signal(signal.SIGTERM)
        sink.communicate(timeout=20)
    assert sink.returncode == 0
    store = JournalStore(workspace / DB_NAME)
    stored = [row.entry.id for _, row in store.query(Query(limit=20_000))]
    store.close()
    assert len(stored) == 10_000
    assert sorted(stored) == sorted(ids)
    lines = [
        orjson.loads(line)["id"]
        for f in (workspace / "journal").glob("*.jsonl*")
        for line in f.read_text().splitlines()
    ]
    assert len(set(lines)) == len(lines)  # never twice in JSONL either


async def _all_acknowledged(bus: Bus, workspace: Path) -> bool:
    info = await bus.port.nc.jetstream().consumer_info(STREAM, durable_for(workspace))
    return info.num_pending == 0 and info.num_ack_pending == 0


async def test_journal_cli_filters(workspace: Path) -> None:
    store = JournalStore(workspace / DB_NAME)
    store.insert_many(
        received(
            entry(who="guard", decision="cancel", session="s1", time="2026-01-01T10:00:00.000Z"),
            entry(who="guard", decision="continue", session="s2", time="2026-01-01T11:00:00.000Z"),
            entry(who="redact", decision="patch", point="memory.save", session="s1", time="2026-01-01T12:00:00.000Z"),
            entry(
                kind="trigger",
                who="spend",
                point="eva.spend.day",
                phase="fire",
                decision="fired",
                session=None,
                time="2026-01-01T13:00:00.000Z",
            ),
        )
    )
    store.close()
    ws = str(workspace)

    def who(*args: str) -> list[str]:
        done = run_cli("journal", "--workspace", ws, "--json", *args)
        assert done.returncode == 0, done.stderr
        return [orjson.loads(line)["who"] + ":" + orjson.loads(line)["decision"] for line in done.stdout.splitlines()]

    assert who() == ["guard:cancel", "guard:continue", "redact:patch", "spend:fired"]
    assert who("--point", "memory.save") == ["redact:patch"]
    assert who("--who", "guard", "--decision", "continue") == ["guard:continue"]
    assert who("--session", "s1") == ["guard:cancel", "redact:patch"]
    assert who("--since", "2026-01-01T11:00:00Z", "--until", "2026-01-01T13:00:00Z") == [
        "guard:continue",
        "redact:patch",
    ]
    assert who("--kind", "trigger") == ["spend:fired"]
    assert who("--limit", "1") == ["spend:fired"]
    table = run_cli("journal", "--workspace", ws)
    assert table.stdout.splitlines()[0].split()[:4] == ["RECEIVED", "TIME", "KIND", "POINT"]  # columns aligned
    assert "memory.save" in table.stdout
    missing = run_cli("journal", "--workspace", str(workspace / "nowhere"))
    assert missing.returncode == 1 and f"workspace {workspace / 'nowhere'} (from --workspace) does not exist" in (
        missing.stderr
    )
    no_journal = run_cli("journal", "--workspace", str(workspace.parent))
    assert no_journal.returncode == 1 and f"no journal at {workspace.parent / DB_NAME}" in no_journal.stderr


async def test_journal_follow_prints_new_entries(workspace: Path) -> None:
    store = JournalStore(workspace / DB_NAME)
    store.insert_many(received(entry(who="old")))
    proc = subprocess.Popen(
        [*hookbus_cmd(), "journal", "--workspace", str(workspace), "--json", "--follow"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.to_thread(proc.stdout.readline)
        assert orjson.loads(first)["who"] == "old"
        store.insert_many(received(entry(who="new"), first=2))
        second = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 10)
        assert orjson.loads(second)["who"] == "new"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
        store.close()


def test_jsonl_rotates_by_size(tmp_path: Path) -> None:
    writer = JsonlWriter(tmp_path, max_bytes=2_000, keep=2)
    for seq, row in enumerate(received(*(entry() for _ in range(40))), 1):
        writer.write([(seq, row)])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 3  # the live file and two rotated ones, the oldest dropped
    assert all(p.stat().st_size <= 2_000 + 400 for p in tmp_path.iterdir())


async def test_sinks_of_two_workspaces_each_store_every_entry(own_server: NatsServer, tmp_path: Path) -> None:
    async with Bus(own_server.url) as bus:
        await ensure_journal_stream(bus.port)
        sinks = [JournalSink(bus, tmp_path / name) for name in ("machine-a", "machine-b")]
        assert sinks[0].durable != sinks[1].durable
        stop = asyncio.Event()
        tasks = [asyncio.create_task(sink.run(stop)) for sink in sinks]
        try:
            for i in range(50):
                await publish_entry(bus.port, entry(who=f"h{i}"))
            for sink in sinks:
                await wait_count(sink.store.path, 50)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert [sink.stored for sink in sinks] == [50, 50]


def test_after_resumes_from_a_cursor_in_order_past_any_page(workspace: Path) -> None:
    store = JournalStore(workspace / DB_NAME)
    store.insert_many(received(*(entry(who=f"h{i}") for i in range(10_050))))
    store.close()
    done = run_cli("journal", "--workspace", str(workspace), "--json", "--after", "5", timeout=120)
    assert done.returncode == 0, done.stderr
    seqs = [orjson.loads(line)["seq"] for line in done.stdout.splitlines()]
    assert seqs == list(range(6, 10_051))  # every row after the cursor, once, in order: --limit does not cut it
    past = run_cli("journal", "--workspace", str(workspace), "--json", "--after", "20000")
    assert past.returncode == 1
    assert "--after 20000 is past the last row" in past.stderr


async def test_a_restarted_exporter_resumes_without_gaps_or_duplicates(workspace: Path) -> None:
    store = JournalStore(workspace / DB_NAME)
    store.insert_many(received(*(entry(who=f"a{i}") for i in range(5))))
    shipped: list[dict[str, object]] = []

    async def export(after: int, count: int) -> None:
        cmd = [*hookbus_cmd(), "journal", "--workspace", str(workspace), "--json", "--follow", "--after", str(after)]
        proc = subprocess.Popen([*cmd, "--count", str(count)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            for _ in range(count):
                line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
                shipped.append(orjson.loads(line))
        finally:
            proc.terminate()
            proc.communicate(timeout=10)

    await export(0, 3)  # stops mid-backlog
    store.insert_many(received(*(entry(who=f"b{i}") for i in range(4)), first=6))  # written while it was down
    cursor = shipped[-1]["seq"]
    assert isinstance(cursor, int)
    resumed = asyncio.create_task(export(cursor, 7))
    await wait_until(lambda: len(shipped) >= 9, 30, "the exporter to catch up")
    store.insert_many(received(entry(who="c0"), first=10))  # arrives while it follows
    await resumed
    store.close()
    assert [row["seq"] for row in shipped] == list(range(1, 11))
    assert [row["who"] for row in shipped] == [*(f"a{i}" for i in range(5)), *(f"b{i}" for i in range(4)), "c0"]
