"""Hook output where people look: the ends of stdout and stderr in the journal, and `hookbus up`'s failure lines."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from pathlib import Path

import orjson

from bus import Bus
from bus._journal.entries import OUTPUT_CAP, JournalEntry, decode_checked
from subscribers.journal._store import DB_NAME, JournalStore, Query, Received
from subscribers.shell_hooks._failures import FailurePrinter
from tests.cli.test_cli import UpProcess
from tests.conftest import StartWorker, run_cli
from tests.support.hooks_support import script, write_hooks
from tests.support.waiting import wait_until


def shell_entry(**fields: object) -> JournalEntry:
    base: dict[str, object] = {
        "kind": "shell_hook",
        "point": "prx.lifecycle.tool_call",
        "phase": "run",
        "who": "audit",
        "decision": "failed",
        "cause": "exit code 3",
    }
    base.update(fields)
    return JournalEntry(**base)  # type: ignore[arg-type]


async def test_the_journal_entry_of_a_run_keeps_the_end_of_stdout_and_stderr(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    script(
        workspace,
        "noisy.sh",
        'i=0; while [ $i -lt 200 ]; do echo "line $i of stdout"; i=$((i+1)); done\n'
        "printf 'warning: \\033[31mred\\n' >&2\necho 'disk full' >&2\nexit 3\n",
    )
    write_hooks(workspace, {"tool_call": [{"id": "noisy", "command": "./noisy.sh"}]})
    entries: list[JournalEntry] = []

    async def take(msg: object) -> None:
        entries.append(decode_checked(msg.data, msg.subject)[0])  # type: ignore[attr-defined]

    sub = await bus.port.subscribe_raw("hookbus.journal.shell_hook", take)
    await bus.flush()
    await start_worker(output_tail_bytes=100)
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"})
    await wait_until(lambda: entries, what="the run's journal entry")
    await sub.unsubscribe()
    [entry] = entries
    assert entry.decision == "failed" and entry.cause == "exit code 3"
    assert entry.stdout is not None and entry.stdout.endswith("line 199 of stdout\n")
    assert len(entry.stdout.encode()) <= 100 and "line 0 of" not in entry.stdout, "only the last 100 bytes"
    assert entry.stderr == "warning: \x1b[31mred\ndisk full\n", "kept as printed: shown escaped where it is shown"


async def test_a_quiet_run_carries_no_output(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    script(workspace, "quiet.sh", "exit 0\n")
    write_hooks(workspace, {"tool_call": [{"id": "quiet", "command": "./quiet.sh"}]})
    entries: list[bytes] = []

    async def take(msg: object) -> None:
        entries.append(msg.data)  # type: ignore[attr-defined]

    sub = await bus.port.subscribe_raw("hookbus.journal.shell_hook", take)
    await bus.flush()
    await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: entries, what="the run's journal entry")
    await sub.unsubscribe()
    wire = orjson.loads(entries[0])
    assert wire["decision"] == "ok" and wire["stdout"] is None and wire["stderr"] is None


def test_the_receiver_recaps_output_keeping_its_end_and_no_nul() -> None:
    hostile = shell_entry(stdout="x" * 100_000 + "THE END", stderr="a\x00b").encode()
    entry, cut = decode_checked(hostile, "hookbus.journal.shell_hook.worker")
    assert entry.stdout is not None and len(entry.stdout) == OUTPUT_CAP
    assert entry.stdout.startswith("…") and entry.stdout.endswith("THE END")
    assert entry.stderr == "a\ufffdb"
    assert cut == ("stdout",)
    wrong = orjson.loads(shell_entry().encode())
    wrong["stdout"] = 42
    try:
        decode_checked(orjson.dumps(wrong), "hookbus.journal.shell_hook")
    except Exception as exc:  # the schema names the field
        assert "stdout" in str(exc)
    else:
        raise AssertionError("a number as stdout was taken")


def test_hookbus_journal_shows_a_runs_output_escaped_under_its_row(workspace: Path) -> None:
    store = JournalStore(workspace / DB_NAME)
    entry = shell_entry(stdout="ok so far\n", stderr="\x1b[2Jcleared?\nreal error\n")
    store.insert_many([Received(entry, stream_seq=1, received=entry.time)])
    store.close()
    done = run_cli("journal", "--workspace", str(workspace), "--kind", "shell_hook")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2:] == ["    stdout | ok so far", "    stderr | \\x1b[2Jcleared?", "    stderr | real error"]
    as_json = run_cli("journal", "--workspace", str(workspace), "--kind", "shell_hook", "--json")
    row = orjson.loads(as_json.stdout)
    assert row["stderr"] == "\x1b[2Jcleared?\nreal error\n" and row["stdout"] == "ok so far\n"


def test_a_journal_of_the_previous_schema_gains_the_output_columns(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    store = JournalStore(path)
    store.insert_many([Received(shell_entry(who="before"), stream_seq=1, received="2026-01-01T00:00:00.000Z")])
    store.close()
    db = sqlite3.connect(path)  # what version 2 was: the same table without the output columns
    db.execute("ALTER TABLE entries DROP COLUMN stdout")
    db.execute("ALTER TABLE entries DROP COLUMN stderr")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    store = JournalStore(path)
    store.insert_many(
        [Received(shell_entry(who="after", stderr="boom"), stream_seq=2, received="2026-01-01T00:00:01.000Z")]
    )
    rows = [row.entry for _, row in store.query(Query())]
    store.close()
    assert [(e.who, e.stderr) for e in rows] == [("before", None), ("after", "boom")]


def test_failure_lines_show_the_end_of_stderr_and_are_rate_limited() -> None:
    now = [100.0]
    out = io.StringIO()
    printer = FailurePrinter(out, burst=2, interval=10.0, clock=lambda: now[0])
    subject = "hookbus.journal.shell_hook.worker"
    ok = shell_entry(decision="ok", cause=None).encode()
    failing = shell_entry(stderr="starting\nstill going\n\nfatal: disk full\n").encode()
    printer.take(ok, subject)
    printer.take(b"not json", subject)
    for _ in range(5):
        printer.take(failing, subject)
    now[0] += 10.0
    printer.take(
        shell_entry(who="late", decision="timeout", cause="timed out after 2000 ms", stderr=None).encode(), subject
    )
    line = (
        "hookbus up: hook audit on prx.lifecycle.tool_call failed (exit code 3): "
        "starting | still going | fatal: disk full"
    )
    assert out.getvalue().splitlines() == [
        line,
        line,
        "hookbus up: hook late on prx.lifecycle.tool_call timeout (timed out after 2000 ms): (no stderr)"
        " (and 3 more failing runs not shown: hookbus journal --kind shell_hook)",
    ]


async def test_hookbus_up_prints_a_line_per_failing_run(workspace: Path) -> None:
    script(workspace, "fails.sh", "echo 'cannot reach the audit server' >&2\nexit 3\n")
    write_hooks(workspace, {"eva.custom.deploy": [{"id": "audit", "command": "./fails.sh"}]})
    up = UpProcess(workspace)
    try:
        async with Bus(up.nats_url) as bus:
            await bus.emit("eva.custom.deploy", {})
        assert up.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(up.proc.stdout.readline), 30)
        assert line.rstrip("\n") == (
            "hookbus up: hook audit on eva.custom.deploy failed (exit code 3): cannot reach the audit server"
        )
    finally:
        up.close()


def test_the_output_tail_is_configurable_and_bounded() -> None:
    done = run_cli(
        "worker", "--output-tail", "100000", "--connect-timeout", "0.2", env={"NATS_URL": "nats://127.0.0.1:1"}
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[0] == "hookbus: error: --output-tail 100000 must be in 0..8192"
