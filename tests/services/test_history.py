"""Recorded history: `hookbus up --record`, `tail --since/--session`, `journal --events`, retention limits."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bus import Bus
from bus._core.clock import now_timestamp
from bus._journal.entries import JournalEntry, publish_entry
from bus._transport.server import NatsServer
from subscribers.history._reader import Skipped, recorded_events
from subscribers.history._subjects import HISTORY_STREAM
from subscribers.history.recorder import HistorySettings, ensure_history
from tests.cli.test_cli import UpProcess
from tests.conftest import hookbus_cmd, run_cli
from tests.support.waiting import wait_until


@pytest.fixture
def recording(workspace: Path, nats_url: str) -> Iterator[UpProcess]:
    up = UpProcess(workspace, "--nats-url", nats_url, "--record", "eva.custom.>", "--record", "prx.>")
    try:
        yield up
    finally:
        up.close()


async def test_tail_since_shows_events_emitted_before_it_started(recording: UpProcess, nats_url: str) -> None:
    assert any("history" in line and "HOOKBUS_HISTORY" in line for line in recording.lines), recording.lines
    async with Bus(nats_url, name="agent") as bus:
        for i in range(5):
            await bus.emit("eva.custom.hist", {"n": i}, session_id="s1")
            await bus.emit("eva.custom.hist", {"n": i}, session_id="s2")
        await bus.flush()
    done = await asyncio.to_thread(
        run_cli, "tail", "eva.custom.hist", "--since", "10m", "--session", "s1", "--json", "--count", "5",
        "--nats-url", nats_url, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [(e["session_id"], e["payload"]["n"]) for e in shown] == [("s1", i) for i in range(5)]


async def test_tail_goes_on_live_after_the_history_without_a_gap(recording: UpProcess, nats_url: str) -> None:
    async with Bus(nats_url, name="agent") as bus:
        await bus.emit("eva.custom.gap", {"n": 0}, session_id="g")
        await bus.flush()
        tail = subprocess.Popen(
            [
                *hookbus_cmd(),
                "tail",
                "eva.custom.gap",
                "--since",
                "1h",
                "--json",
                "--count",
                "3",
                "--nats-url",
                nats_url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert tail.stderr is not None and tail.stdout is not None
            # the live subscription is up once tail says it tails (the history is shown by then)
            first = await asyncio.to_thread(tail.stdout.readline)
            assert orjson.loads(first)["payload"]["n"] == 0
            await asyncio.to_thread(tail.stderr.readline)
            await bus.emit("eva.custom.gap", {"n": 1}, session_id="g")
            await bus.emit("eva.custom.gap", {"n": 2}, session_id="g")
            out, err = await asyncio.to_thread(tail.communicate, timeout=60)
        finally:
            if tail.poll() is None:
                tail.kill()
    assert [orjson.loads(line)["payload"]["n"] for line in out.splitlines()] == [1, 2], err


async def test_journal_joins_a_session_events_and_entries_in_time_order(
    recording: UpProcess, workspace: Path, nats_url: str
) -> None:
    async def next_millisecond() -> None:
        now = now_timestamp()
        await wait_until(lambda: now_timestamp() != now, what="the clock's next millisecond")

    async with Bus(nats_url, name="agent") as bus:
        await bus.emit("eva.custom.step", {"n": 1}, session_id="join")
        await next_millisecond()
        entry = JournalEntry(kind="trigger", point="eva.custom.step", phase="fire", who="notes", decision="fired",
                             session="join")  # fmt: skip
        assert await publish_entry(bus.port, entry)
        await next_millisecond()
        await bus.emit("eva.custom.step", {"n": 2}, session_id="join")
        await bus.emit("eva.custom.step", {"n": 3}, session_id="other")
        await bus.flush()

    def stored() -> bool:
        done = run_cli("journal", "--workspace", str(workspace), "--session", "join", "--json")
        return done.returncode == 0 and entry.id in done.stdout

    await wait_until(lambda: asyncio.to_thread(stored), timeout=30, what="the entry stored by the sink")
    done = await asyncio.to_thread(
        run_cli, "journal", "--workspace", str(workspace), "--session", "join", "--events", "--json",
        "--nats-url", nats_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [(line["type"], line.get("payload", {}).get("n") or line.get("who")) for line in lines] == [
        ("event", 1),
        ("journal", "notes"),
        ("event", 2),
    ]


async def test_the_history_keeps_to_its_size_limit(own_server: NatsServer) -> None:
    limit = 64 * 1024
    async with Bus(own_server.url, name="bus") as bus:
        await ensure_history(bus, HistorySettings(patterns=("eva.custom.sized.>",), max_bytes=limit))
        for i in range(300):  # about 300 KiB: well over the limit
            await bus.emit("eva.custom.sized.x", {"n": i, "text": "y" * 900})
        await bus.flush()
        js = bus.port.jetstream()

        async def all_stored() -> bool:  # the stream stores what the server took on its own time
            return bool((await js.stream_info(HISTORY_STREAM)).state.last_seq == 300)

        await wait_until(all_stored, timeout=15, what="the 300th event stored")
        state = await bus.port.stream_state(HISTORY_STREAM)
        assert state is not None and 0 < state.messages < 300
        info = await js.stream_info(HISTORY_STREAM)
        assert info.state.bytes <= limit
        kept = [event.payload["n"] async for event in recorded_events(bus, 3600, skipped=Skipped())]
    assert kept == list(range(300 - len(kept), 300))  # the newest kept, the oldest dropped first


async def test_recorded_bytes_that_are_not_events_are_skipped_and_counted(own_server: NatsServer) -> None:
    async with Bus(own_server.url, name="bus") as bus:
        await ensure_history(bus, HistorySettings(patterns=("eva.custom.>",)))
        await bus.port.publish_raw("eva.custom.bad", b"\x1b[31mnot an envelope")
        await bus.emit("eva.custom.good", {"n": 1})
        await bus.flush()
        skipped = Skipped()
        kept = [event.subject async for event in recorded_events(bus, 3600, skipped=skipped)]
    assert kept == ["eva.custom.good"] and skipped.count == 1


def test_recording_refuses_patterns_that_would_take_in_plumbing(workspace: Path, nats_url: str) -> None:
    for pattern in (">", "*.>", "hookbus.>", "_INBOX.>"):
        done = run_cli("up", "--workspace", str(workspace), "--nats-url", nats_url, "--record", pattern, timeout=60)
        assert done.returncode == 1 and "--record" in done.stderr, (pattern, done.stderr)
    done = run_cli("up", "--workspace", str(workspace), "--nats-url", nats_url, "--record", "eva.>",
                   "--record-max-age", "soon", timeout=60)  # fmt: skip
    assert done.returncode == 1 and "--record-max-age 'soon' is not a duration" in done.stderr, done.stderr


async def test_tail_without_a_recorded_history_says_so(own_server: NatsServer) -> None:
    done = await asyncio.to_thread(run_cli, "tail", "--since", "10m", "--nats-url", own_server.url)
    assert done.returncode == 1 and "no recorded history" in done.stderr, done.stderr


async def test_the_workspace_history_file_says_what_to_record(workspace: Path, nats_url: str) -> None:
    """Without --record, <workspace>/history.yaml is the same setting; a flag would win over it."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "history.yaml").write_text('record: ["eva.custom.>"]\nmax_age: 2h\nmax_bytes: 10MiB\n')
    up = UpProcess(workspace, "--nats-url", nats_url)
    try:
        [line] = [line for line in up.lines if "HOOKBUS_HISTORY" in line]
        assert "eva.custom.>" in line and "prx" not in line, up.lines
        async with Bus(nats_url, name="agent") as bus:
            await bus.emit("eva.custom.fromfile", {"n": 1}, session_id="f")
            await bus.flush()
        done = await asyncio.to_thread(
            run_cli, "tail", "eva.custom.fromfile", "--since", "10m", "--json", "--count", "1",
            "--nats-url", nats_url, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout.splitlines()[0])["payload"] == {"n": 1}
    finally:
        up.close()


def test_a_bad_history_file_is_refused_naming_the_file_and_field(workspace: Path, nats_url: str) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    for text, why in (
        ('record: ["eva.>"]\nkeep: 3\n', "keep"),
        ('record: [">"]\n', "internal subjects"),
        ('record: ["eva.>"]\nmax_age: soon\n', "'soon' is not a duration"),
    ):
        (workspace / "history.yaml").write_text(text)
        done = run_cli("up", "--workspace", str(workspace), "--nats-url", nats_url, timeout=60)
        assert done.returncode == 1 and why in done.stderr, (text, done.stderr)
        assert "history.yaml" in done.stderr, done.stderr
