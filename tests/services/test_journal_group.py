"""Journal sinks as a group: several sinks share one durable consumer, each entry stored by exactly one."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from bus import Bus, NatsServer
from bus._core.errors import ConfigError
from bus._journal.entries import JournalEntry, ensure_journal_stream, publish_entry
from subscribers.journal._groups import durable_for_group, group_of
from subscribers.journal._store import DB_NAME, JournalStore
from subscribers.journal.sink import JournalSink
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until

N = 400


def whos(workspace: Path) -> list[str]:
    store = JournalStore(workspace / DB_NAME)
    try:
        return [str(row["who"]) for row in store.chained()]
    finally:
        store.close()


async def test_two_sinks_of_a_group_store_each_entry_exactly_once(bus: Bus, tmp_path: Path) -> None:
    await ensure_journal_stream(bus.port)
    group = f"g{tmp_path.name[-8:].replace('_', '')}"
    sinks = [JournalSink(bus, tmp_path / name, group=group, batch=10) for name in ("a", "b")]
    assert sinks[0].durable == sinks[1].durable == durable_for_group(group)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(sink.run(stop)) for sink in sinks]
    try:
        for i in range(N):
            await publish_entry(
                bus.port,
                JournalEntry(kind="middleware", point="tool.call", phase="request", who=f"e{i}", decision="continue"),
            )
        await wait_until(lambda: sum(sink.stored for sink in sinks) >= N, 60, "the group to store every entry")
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    stored = {name: whos(tmp_path / name) for name in ("a", "b")}
    together = stored["a"] + stored["b"]
    assert sorted(together) == sorted(f"e{i}" for i in range(N))  # every entry, none twice across the stores
    assert stored["a"] and stored["b"], "both sinks took a share"
    for name, sink in zip(("a", "b"), sinks, strict=True):
        done = run_cli("journal", "verify", "--workspace", str(tmp_path / name), "--public-key", sink.key.public_key)
        assert done.returncode == 0, done.stderr
        assert f"journal holds: {len(stored[name])} entries" in done.stdout
        assert f"one of the sinks of group {group}" in done.stderr  # each chain is its own, and says so
        store = JournalStore(tmp_path / name / DB_NAME)
        places = [row["chain"] for row in store.chained()]
        store.close()
        assert places == list(range(1, len(stored[name]) + 1))


def test_a_group_name_is_one_consumer_token() -> None:
    assert group_of(durable_for_group("fleet-1")) == "fleet-1"
    assert group_of("hookbus-journal-0123456789ab") is None
    for bad in ("", "a.b", "a b", "x" * 65, "a>"):
        with pytest.raises(ConfigError):
            durable_for_group(bad)


async def test_two_sink_processes_of_a_group_share_the_journal(own_server: NatsServer, tmp_path: Path) -> None:
    env = {**os.environ, "NATS_URL": own_server.url}
    sinks: list[subprocess.Popen[str]] = []
    async with Bus(own_server.url) as bus:
        await ensure_journal_stream(bus.port)
        try:
            for name in ("a", "b"):
                cmd = [*hookbus_cmd(), "journal-sink", "--workspace", str(tmp_path / name), "--group", "fleet"]
                sink = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
                sinks.append(sink)
                assert sink.stdout is not None
                lines = [await asyncio.to_thread(sink.stdout.readline) for _ in range(3)]
                assert "journal sink group fleet: consumer hookbus-journal-group-fleet" in lines[2], lines
            for i in range(200):
                await publish_entry(
                    bus.port,
                    JournalEntry(kind="trigger", point="tool.call", phase="run", who=f"p{i}", decision="fired"),
                )
            await bus.flush()

            def stored() -> int:
                return sum(len(whos(tmp_path / name)) for name in ("a", "b") if (tmp_path / name / DB_NAME).exists())

            await wait_until(lambda: stored() >= 200, 60, "the group's processes to store every entry")
        finally:
            for sink in sinks:
                sink.terminate()
            for sink in sinks:
                sink.communicate(timeout=20)
    assert [sink.returncode for sink in sinks] == [0, 0]
    assert sorted(whos(tmp_path / "a") + whos(tmp_path / "b")) == sorted(f"p{i}" for i in range(200))
