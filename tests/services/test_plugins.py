"""WASM plugin hooks: real modules (WAT compiled by wasmtime), a real worker and a real nats-server."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import IN_CI

try:
    import wasmtime  # noqa: F401 - the wasm extra: skip on a laptop without it, fail under CI=true
except ImportError:
    if IN_CI:
        raise
    pytest.skip("wasmtime is not installed (pip install 'hookbus[wasm]')", allow_module_level=True)

from bus import Bus
from bus._journal.entries import JournalEntry, decode_entry
from bus._sandbox.outcome import HookOutcome
from bus.testing import EventRecorder
from subscribers.plugins._errors import PluginError
from subscribers.plugins._host import load_code
from subscribers.plugins._manifest import load_manifest
from subscribers.plugins.plugin_worker import PluginWorker, call_plugin
from subscribers.shell_hooks import _hook_metrics as metrics
from subscribers.shell_hooks._hook_trial import make_event
from subscribers.shell_hooks._settings import WorkerSettings
from tests.conftest import run_cli
from tests.support.plugin_support import (
    FIFO_READER,
    LOOP,
    LOOP_COMPONENT,
    MEMORIES_HOG,
    MEMORY_HOG,
    RECORDER,
    TABLE_HOG,
    err_component,
    sleeper,
    write_plugin,
)
from tests.support.waiting import wait_until

GRANT = """
[[capabilities]]
type = "filesystem"
path = "audit"
guest = "/audit"
writable = true
"""

StartPlugins = Callable[..., Any]


@pytest.fixture
async def start_plugins(bus: Bus, workspace: Path) -> AsyncIterator[StartPlugins]:
    workers: list[PluginWorker] = []

    async def start() -> PluginWorker:
        worker = PluginWorker(bus, workspace, WorkerSettings(queue=None, poll_interval_s=0.05))
        await worker.start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        await worker.stop()


@pytest.fixture
async def journal(bus: Bus) -> list[JournalEntry]:
    entries: list[JournalEntry] = []

    async def take(msg: Any) -> None:
        entries.append(decode_entry(msg.data))

    await bus.port.nc.subscribe("hookbus.journal.shell_hook", cb=take)
    return entries


def recorder_plugin(workspace: Path, events: str) -> Path:
    folder = write_plugin(workspace, "audit", RECORDER.read_text(), GRANT, events)
    (folder / "audit").mkdir()
    return folder / "audit" / "events.log"


def logged(log: Path) -> list[tuple[str, dict[str, Any]]]:
    if not log.exists():
        return []
    complete = log.read_text().split("\n")[:-1]  # the plugin may be writing the last line right now
    lines = [line.split("\t", 1) for line in complete]
    return [(name, orjson.loads(payload)) for name, payload in lines]


async def test_a_plugin_records_the_union_of_its_capabilities_through_its_granted_directory(
    bus: Bus, workspace: Path, start_plugins: StartPlugins
) -> None:
    second_block = '\n[[capabilities]]\ntype = "hook"\nevents = ["prx.lifecycle.*", "eva.custom.*"]'
    log = recorder_plugin(workspace, '["tool_call"]\n' + second_block)
    seen = EventRecorder()
    await bus.subscribe("prx.lifecycle.tool_call", seen)
    await start_plugins()
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"}, session_id="s1")  # in both blocks: once
    await bus.emit("eva.turn.completed", {"n": 1})  # in neither
    await bus.emit("eva.custom.deploy", {"env": "prod"})
    await bus.emit("prx.lifecycle.agent_start", {"agent": "a"})
    expected = {"agent_start", "custom.deploy", "tool_call"}
    await wait_until(lambda: {name for name, _ in logged(log)} >= expected, what="the three events")
    # Barriers after them on both of the plugin's other subscriptions (each delivers in order).
    await bus.emit("prx.lifecycle.agent_end", {})
    await bus.emit("eva.custom.end", {})
    await wait_until(lambda: len(logged(log)) >= 5, what="the barriers")
    names = [name for name, _ in logged(log)]
    assert sorted(names) == ["agent_end", "agent_start", "custom.deploy", "custom.end", "tool_call"]
    raw = (await seen.wait_for(1))[0].raw
    tool_call = next(payload for name, payload in logged(log) if name == "tool_call")
    assert tool_call == orjson.loads(raw), "payload-json is the envelope a shell hook reads"


async def test_err_from_a_component_is_logged_journaled_and_counted(
    bus: Bus, workspace: Path, start_plugins: StartPlugins, journal: list[JournalEntry], caplog: Any
) -> None:
    write_plugin(workspace, "grumpy", err_component("disk quota: no"), events='["tool_call", "agent_end"]')
    worker = await start_plugins()
    assert worker.plugins.running()["grumpy"].kind == "component"
    await bus.emit("prx.lifecycle.tool_call", {"tool": "x"}, session_id="s2")
    await bus.emit("prx.lifecycle.agent_end", {"success": True})
    await wait_until(lambda: len(journal) == 2, what="two journal entries")
    by_point = {entry.point: entry for entry in journal}
    failed, ok = by_point["prx.lifecycle.tool_call"], by_point["prx.lifecycle.agent_end"]
    assert (failed.who, failed.phase, failed.decision) == ("plugin:grumpy", "plugin", "failed")
    assert failed.cause == "Err: disk quota: no" and failed.session == "s2"
    assert ok.decision == "ok" and ok.cause is None
    assert worker.stats.failures == 1 and worker.stats.runs == 2
    assert any("disk quota: no" in record.getMessage() for record in caplog.records)
    stats = {(row["hook"], row["point"]): row for row in metrics.snapshot()}
    assert stats["plugin:grumpy", "prx.lifecycle.tool_call"]["failures"] >= 1


async def test_a_plugin_that_loops_is_stopped_at_its_time_limit_and_runs_again(workspace: Path) -> None:
    folder = write_plugin(workspace, "spin", LOOP, "[resources]\ntimeout_ms = 100\n")
    code = load_code(load_manifest(folder))
    event = make_event("prx.lifecycle.tool_call", {}, None)
    for _ in range(2):  # the trapped instance is replaced: the next event is stopped the same way, not stuck
        result = await call_plugin(code, event, "prx.lifecycle.tool_call")
        assert result.outcome is HookOutcome.TIMEOUT
        assert result.reason == "stopped at its time limit of 100 ms"


async def test_a_plugin_growing_past_its_memory_limit_is_stopped(workspace: Path) -> None:
    folder = write_plugin(workspace, "hog", MEMORY_HOG, "[resources]\nmemory_mb = 2\n")
    code = load_code(load_manifest(folder))
    result = await call_plugin(code, make_event("prx.lifecycle.tool_call", {}, None), "tool_call")
    assert result.outcome is HookOutcome.FAILED
    assert result.reason is not None and "memory at its limit of 2 MiB" in result.reason


async def test_a_plugin_without_a_grant_cannot_open_a_file(workspace: Path) -> None:
    folder = write_plugin(workspace, "nogrant", RECORDER.read_text())
    (folder / "audit").mkdir()
    code = load_code(load_manifest(folder))
    result = await call_plugin(code, make_event("prx.lifecycle.tool_call", {}, None), "tool_call")
    assert result.outcome is HookOutcome.FAILED
    assert result.reason == "Err: cannot open events.log (no directory granted?)"
    assert not list(workspace.rglob("events.log"))


async def test_hot_reload_keeps_the_last_good_version_over_a_broken_one(
    bus: Bus, workspace: Path, start_plugins: StartPlugins, journal: list[JournalEntry]
) -> None:
    folder = write_plugin(workspace, "versioned", err_component("version one"))
    worker = await start_plugins()

    async def cause_of_next_run() -> str | None:
        count = len(journal)
        await bus.emit("prx.lifecycle.tool_call", {})
        await wait_until(lambda: len(journal) > count, what="the run's journal entry")
        return journal[-1].cause

    assert await cause_of_next_run() == "Err: version one"
    (folder / "plugin.wat").write_text("(component (this is not wat")
    state = worker.plugins.plugins["versioned"]
    await wait_until(lambda: state.error is not None, what="the broken version to be refused")
    assert "plugin.wat is not a usable module" in state.error
    assert await cause_of_next_run() == "Err: version one", "the last good version still runs"
    (folder / "plugin.wat").write_text(err_component("version two"))
    await wait_until(lambda: state.error is None, what="the new version to load")
    assert await cause_of_next_run() == "Err: version two"


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        ('[[capabilities]]\ntype = "network"\n', "network is not offered to WASM plugins"),
        ('[[capabilities]]\ntype = "clock"\n', "capabilities[1].type: 'clock' is not one of"),
        ('[[capabilities]]\ntype = "filesystem"\npath = "missing"\n', "capabilities[1].path:"),
        ("[resources]\nmemory_mb = 65\n", "memory_mb"),
    ],
)
def test_manifest_problems_are_named(workspace: Path, tail: str, problem: str) -> None:
    folder = write_plugin(workspace, "bad", LOOP, tail)
    with pytest.raises(PluginError, match="plugin bad:") as caught:
        load_manifest(folder)
    assert problem in str(caught.value)


def test_a_bad_pattern_and_a_foreign_name_are_refused(workspace: Path) -> None:
    with pytest.raises(PluginError, match=r"events\[0\]"):
        load_manifest(write_plugin(workspace, "pat", LOOP, events='["a..b"]'))
    folder = write_plugin(workspace, "named", LOOP)
    (folder / "plugin.toml").write_text((folder / "plugin.toml").read_text().replace('"named"', '"other"'))
    with pytest.raises(PluginError, match="differs from its folder name"):
        load_manifest(folder)


def test_cli_lists_plugins_and_tests_one(workspace: Path) -> None:
    write_plugin(workspace, "grumpy", err_component("nope"))
    listed = run_cli("plugins", "--workspace", str(workspace))
    assert listed.returncode == 0, listed.stderr
    assert "grumpy 1.0.0 (component, plugin.wat): prx.lifecycle.tool_call" in listed.stdout
    tested = run_cli("plugins", "test", "grumpy", "tool_call", '{"tool": "x"}', "--workspace", str(workspace))
    assert tested.returncode == 1
    assert "plugin grumpy (component) on prx.lifecycle.tool_call: failed: Err: nope" in tested.stdout


async def test_workers_sharing_a_queue_run_each_event_once(bus: Bus, workspace: Path) -> None:
    log = recorder_plugin(workspace, '["tool_call", "prx.lifecycle.*"]')
    settings = WorkerSettings(queue=f"q-{uuid.uuid4().hex[:8]}", poll_interval_s=0.05)
    workers = [await PluginWorker(bus, workspace, settings).start() for _ in range(2)]
    try:
        for index in range(6):
            await bus.emit("prx.lifecycle.tool_call", {"n": index})
        await bus.emit("prx.lifecycle.agent_end", {"last": True})  # after the six: the barrier
        await wait_until(lambda: any(name == "agent_end" for name, _ in logged(log)), what="the barrier event")
        await wait_until(lambda: len(logged(log)) >= 7, what="all seven events")
        assert sorted(payload["payload"].get("n", -1) for _, payload in logged(log)) == [-1, 0, 1, 2, 3, 4, 5]
        assert sum(worker.stats.received for worker in workers) == 7
    finally:
        for worker in workers:
            await worker.stop()


async def test_stopping_the_worker_stops_a_plugin_mid_call(
    bus: Bus, workspace: Path, journal: list[JournalEntry]
) -> None:
    write_plugin(workspace, "spin", LOOP)  # the default time limit: 30 s
    worker = await PluginWorker(bus, workspace, WorkerSettings(queue=None)).start()
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: worker.stats.received == 1, what="the event to reach the plugin")
    codes = worker.plugins.running().values()
    await wait_until(lambda: any(code._lock.locked() for code in codes), what="the plugin's call to start")
    await asyncio.wait_for(worker.stop(), 10)  # not the plugin's 30 s
    await wait_until(lambda: journal, what="the run's journal entry")
    assert journal[0].cause == "stopped: the worker is stopping"


async def test_plugins_spinning_to_their_time_limits_leave_the_loops_default_threads_free(
    bus: Bus, workspace: Path
) -> None:
    """The journal sink's writes and shell hooks' waits in ``hookbus up`` use those threads."""
    spinning = min(32, (os.cpu_count() or 1) + 4)  # the size of asyncio's default thread pool
    for index in range(spinning):
        write_plugin(workspace, f"spin{index}", LOOP)  # the default time limit: 30 s
    worker = await PluginWorker(bus, workspace, WorkerSettings(queue=None)).start()
    try:
        await bus.emit("prx.lifecycle.tool_call", {})
        codes = worker.plugins.running().values()
        await wait_until(lambda: sum(code._lock.locked() for code in codes) == spinning, what="every plugin's call")
        await asyncio.wait_for(asyncio.to_thread(lambda: None), 10)  # not after the plugins' 30 s
    finally:
        await asyncio.wait_for(worker.stop(), 10)


# --- bounded in every way: time inside host calls, memory beyond one linear memory, a stop that never waits ---


async def test_a_plugin_sleeping_in_poll_oneoff_is_stopped_at_its_time_limit(workspace: Path) -> None:
    """Epoch interruption never reaches a host call: the sleep is the host's, and waits at most until the deadline."""
    folder = write_plugin(workspace, "sleepy", sleeper(12), "[resources]\ntimeout_ms = 500\n")
    code = load_code(load_manifest(folder))
    result = await asyncio.wait_for(call_plugin(code, make_event("prx.lifecycle.tool_call", {}, None), "tc"), 8)
    assert result.outcome is HookOutcome.TIMEOUT, result
    assert result.reason == "stopped at its time limit of 500 ms"
    short = write_plugin(workspace, "nap", sleeper(0.01))  # a sleep within the limit still sleeps and returns
    nap = await call_plugin(load_code(load_manifest(short)), make_event("prx.lifecycle.tool_call", {}, None), "tc")
    assert nap.outcome is HookOutcome.OK, nap


async def test_a_plugin_blocked_in_a_host_call_is_reported_at_its_limit_and_left_behind(workspace: Path) -> None:
    """A host call that no cap reaches (a read of a FIFO in its grant): the result still comes at the limit."""
    folder = write_plugin(
        workspace, "piped", FIFO_READER, GRANT.replace("/audit", "/d") + "[resources]\ntimeout_ms = 300\n"
    )
    (folder / "audit").mkdir()
    fifo = folder / "audit" / "fifo"
    os.mkfifo(fifo)
    code = load_code(load_manifest(folder))
    event = make_event("prx.lifecycle.tool_call", {}, None)
    result = await asyncio.wait_for(call_plugin(code, event, "tc"), 10)
    assert result.outcome is HookOutcome.TIMEOUT, result
    assert result.reason == "stopped at its time limit of 300 ms (left inside a host call)"
    refused = await asyncio.wait_for(call_plugin(code, event, "tc"), 10)
    assert refused.reason == "not run: its last call is still inside a host call, past its time limit"
    writer = os.open(fifo, os.O_WRONLY)  # the reader wakes: the left-behind call traps at its passed deadline
    os.close(writer)
    await wait_until(lambda: not code._lock.locked(), what="the left-behind call to end")
    again = await asyncio.wait_for(call_plugin(code, event, "tc"), 10)
    assert again.outcome is HookOutcome.TIMEOUT and again.reason is not None
    assert "left inside a host call" in again.reason, "it runs again (and blocks again on the empty FIFO)"


async def test_stopping_the_worker_wakes_a_sleeping_plugin_and_never_joins_its_thread(
    bus: Bus, workspace: Path, journal: list[JournalEntry]
) -> None:
    """Ctrl-C of ``hookbus up``: the interpreter joins a ThreadPoolExecutor's threads at exit, a sleeping one too."""
    write_plugin(workspace, "sleepy", sleeper(3600))  # the default time limit: 30 s
    worker = await PluginWorker(bus, workspace, WorkerSettings(queue=None)).start()
    code = worker.plugins.running()["sleepy"]
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(code._lock.locked, what="the plugin's call")
    await asyncio.wait_for(worker.stop(), 10)
    await wait_until(lambda: not code._lock.locked(), timeout=5, what="the sleep to end with the stop")
    await wait_until(lambda: journal, what="the run's journal entry")
    assert journal[0].cause == "stopped: the worker is stopping"
    plugin_threads = [t for t in threading.enumerate() if t.name.startswith("hookbus-plugin")]
    assert plugin_threads and all(thread.daemon for thread in plugin_threads), "an exit never waits for them"


async def test_a_plugin_cannot_grow_a_table_past_its_bound(workspace: Path) -> None:
    folder = write_plugin(workspace, "tables", TABLE_HOG, "[resources]\nmemory_mb = 64\n")
    result = await call_plugin(load_code(load_manifest(folder)), make_event("prx.lifecycle.x", {}, None), "x")
    assert result.outcome is HookOutcome.OK, f"table.grow by 40M elements (~300 MiB) must be refused: {result}"


async def test_a_plugin_cannot_hold_more_than_one_memory(workspace: Path) -> None:
    folder = write_plugin(workspace, "memories", MEMORIES_HOG, "[resources]\nmemory_mb = 64\n")
    result = await call_plugin(load_code(load_manifest(folder)), make_event("prx.lifecycle.x", {}, None), "x")
    assert result.outcome is HookOutcome.FAILED, f"five 60 MiB memories under a 64 MiB limit: {result}"
    assert result.reason is not None and result.reason.startswith("cannot be instantiated:")
    assert "memor" in result.reason


# --- local runs pass payloads whole up to the claim-check cap (the bus's 64 KiB limit is the bus's) ---

BIG = orjson.dumps({"blob": "x" * 3_000_000}).decode()


def test_hookbus_plugins_test_passes_a_3_mb_payload_whole(workspace: Path) -> None:
    log = recorder_plugin(workspace, '["tool_call"]')
    tested = run_cli("plugins", "test", "audit", "tool_call", "-", "--workspace", str(workspace), input=BIG)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    [(name, envelope)] = logged(log)
    assert name == "tool_call" and len(envelope["payload"]["blob"]) == 3_000_000
    assert not envelope.get("truncated")


def test_hookbus_hooks_test_passes_a_3_mb_payload_whole(workspace: Path) -> None:
    out = workspace / "size"
    script = workspace / "size.sh"
    script.write_text(f'#!/bin/sh\nwc -c < "$ZERO_HOOK_PAYLOAD_FILE" > {out}\n')
    script.chmod(0o755)
    hooks = {"hooks": {"tool_call": [{"command": str(script)}]}}
    (workspace / "hooks.json").write_bytes(orjson.dumps(hooks))
    tested = run_cli("hooks", "test", "tool_call", "-", "--workspace", str(workspace), input=BIG)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert int(out.read_text()) > 3_000_000, "the hook read the whole payload"


def test_hookbus_test_module_passes_a_3_mb_payload_whole(tmp_path: Path) -> None:
    module = tmp_path / "sizer.py"
    module.write_text(
        "from typing import Any\nfrom bus import Cancel, Decision, Module\nmodule = Module('sizer')\n\n\n"
        "@module.stage('pre_tool_use', priority=10)\n"
        "async def sizer(stage: str, payload: dict[str, Any]) -> Decision:\n"
        "    return Cancel(f\"size {len(payload.get('blob', ''))}\")\n"
    )
    tested = run_cli("test-module", str(module), "pre_tool_use", "-", input=BIG)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert '"reason":"size 3000000"' in tested.stdout, tested.stdout[:500]


async def test_a_component_that_loops_is_reported_as_timed_out(workspace: Path) -> None:
    folder = write_plugin(workspace, "spinc", LOOP_COMPONENT, "[resources]\ntimeout_ms = 100\n")
    result = await call_plugin(load_code(load_manifest(folder)), make_event("prx.lifecycle.x", {}, None), "x")
    assert result.outcome is HookOutcome.TIMEOUT, result
    assert result.reason == "stopped at its time limit of 100 ms"
