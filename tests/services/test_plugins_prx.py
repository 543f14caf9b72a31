"""PRX's plugin material as PRX ships it (tests/fixtures/prx, pinned): its manifests, its WIT world and host
interfaces, and its Python PDK example built with componentize-py, run on real events over a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI

try:
    import wasmtime  # noqa: F401 - the wasm extra
except ImportError:
    if IN_CI:
        raise
    pytest.skip("wasmtime is not installed (pip install 'hookbus[wasm]')", allow_module_level=True)

from bus import Bus
from bus._journal.entries import PROCESS, JournalEntry, decode_entry
from bus._sandbox.outcome import HookOutcome
from bus.testing import EventRecorder
from subscribers.plugins._bus_services import bucket_name
from subscribers.plugins._errors import PluginError
from subscribers.plugins._host import load_code
from subscribers.plugins._manifest import load_manifest
from subscribers.plugins._plugin_log import MAX_LINES_PER_CALL
from subscribers.plugins.plugin_worker import PluginWorker, call_plugin
from subscribers.shell_hooks._hook_trial import make_event
from subscribers.shell_hooks._settings import WorkerSettings
from tests.conftest import run_cli
from tests.support.plugin_support import err_component
from tests.support.prx_build import (
    EXAMPLE,
    FLOODER_APP,
    LOG_FLOODER_APP,
    PRX,
    SLEEPER_APP,
    build_logger_hook,
    componentize_py,
)
from tests.support.waiting import wait_until


def prx_plugin(workspace: Path, manifest: Path, name: str) -> Path:
    folder = workspace / "plugins" / name
    folder.mkdir(parents=True)
    shutil.copy(manifest, folder / "plugin.toml")
    return folder


def test_prx_hook_manifests_load_as_prx_writes_them(workspace: Path) -> None:
    rust = load_manifest(prx_plugin(workspace, PRX / "pdk/rust/examples/audit-hook/plugin.toml", "audit-hook"))
    assert rust.patterns == ("prx.lifecycle.*",), "[[capabilities.events]] pattern"
    assert (rust.memory_bytes, rust.timeout_ms, rust.fuel) == (8 * 1024 * 1024, 500, 50_000_000)
    assert rust.interfaces == {"log", "config", "kv", "events"} and rust.ignored == ()
    go = load_manifest(
        prx_plugin(workspace, PRX / "pdk/go/examples/event-forwarder-hook/plugin.toml", "event-forwarder-hook")
    )
    assert go.patterns == ("events.>",), "the Go PDK's trigger, PRX's two-token prefix form"
    assert dict(go.config) == {"forward_topic": "events.forwarded", "add_metadata": "false"}
    assert (go.memory_bytes, go.timeout_ms, go.fuel) == (4 * 1024 * 1024, 200, 10_000_000)
    assert "kv" not in go.interfaces, "not in its permissions"
    python = load_manifest(prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook"))
    assert python.patterns == (">",), "capability = hook, no patterns: every event (the decorator filters)"
    assert python.interfaces == {"log", "config", "kv", "events"}


def test_what_has_no_meaning_here_is_named_and_what_cannot_be_honoured_refuses(workspace: Path) -> None:
    folder = prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook")
    text = (folder / "plugin.toml").read_text()
    extra = '\n[[capabilities]]\ntype = "tool"\nname = "t"\n\n[resources]\npool_size = 2\n'
    (folder / "plugin.toml").write_text(text + extra)
    (folder / "plugin.wasm").write_text(err_component("no"))  # any component: the listing is about the manifest
    listed = run_cli("plugins", "--workspace", str(workspace))
    assert "ignored (no meaning on this host): capabilities[0] (tool: not a hook); resources.pool_size" in listed.stdout
    (folder / "plugin.toml").write_text(text.replace('required = ["kv", "events"]', 'required = ["http-outbound"]'))
    with pytest.raises(PluginError, match="'http-outbound' is not offered"):
        load_manifest(folder)


@pytest.fixture(scope="module")
def logger_hook_wasm() -> Path:
    tool = componentize_py()
    if tool is None:
        if IN_CI:
            raise AssertionError("componentize-py is not installed (the test extra)")
        pytest.skip("componentize-py is not installed")
    try:
        return build_logger_hook(tool)
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"componentize-py failed: {exc.stderr.decode(errors='replace')[-2000:]}") from None


@pytest.fixture
async def journal(bus: Bus) -> list[JournalEntry]:
    """The shell_hook journal entries published from now on (with or without the publisher's origin token)."""
    entries: list[JournalEntry] = []

    async def take(msg: Any) -> None:
        entries.append(decode_entry(msg.data, msg.subject))

    await bus.port.nc.subscribe("hookbus.journal.shell_hook", cb=take)
    await bus.port.nc.subscribe("hookbus.journal.shell_hook.>", cb=take)
    await bus.flush()
    return entries


@pytest.fixture
async def worker(bus: Bus, workspace: Path, logger_hook_wasm: Path) -> AsyncIterator[PluginWorker]:
    folder = prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook")
    shutil.copy(logger_hook_wasm, folder / "plugin.wasm")
    js = bus.port.nc.jetstream()
    with contextlib.suppress(Exception):  # from an earlier test on the same server
        await js.delete_key_value(bucket_name("logger-hook"))
    plugins = PluginWorker(bus, workspace, WorkerSettings(queue=None, poll_interval_s=0.05))
    await plugins.start()
    yield plugins
    await plugins.stop()


async def test_prx_python_pdk_plugin_runs_on_real_events(
    bus: Bus, worker: PluginWorker, journal: list[JournalEntry], caplog: Any
) -> None:
    caplog.set_level("DEBUG", logger="hookbus.plugins")
    assert worker.plugins.running()["logger-hook"].kind == "component"
    audit = EventRecorder()
    await bus.subscribe("eva.plugin.logger-hook.>", audit)
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"}, session_id="s1")
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell"}, session_id="s1")
    events = await audit.wait_for(2)
    assert [e.subject for e in events] == ["eva.plugin.logger-hook.prx.audit.event_received"] * 2
    assert [e.payload["count"] for e in events] == [1, 2], "the PDK's kv.increment, through the plugin's bucket"
    assert all(e.depth == 1 for e in events), "the handled event's depth + 1"
    kv = await bus.port.nc.jetstream().key_value(bucket_name("logger-hook"))
    assert (await kv.get("event_count/tool_call")).value == b"2"
    # ">" (PRX's Python PDK names no patterns) brings it its own audit events too: its decorator drops them.
    await wait_until(lambda: worker.stats.runs >= 2, what="the two runs")
    assert worker.stats.failures == 0
    said = [r.getMessage() for r in caplog.records if r.name == "hookbus.plugins"]
    assert "plugin logger-hook: logger-hook: received event 'tool_call'" in said

    # Each log line is a journal entry too, before its run's entry, from the worker's process.
    def tool_calls() -> list[JournalEntry]:
        return [e for e in journal if e.point == "prx.lifecycle.tool_call"]

    await wait_until(lambda: sum(e.phase == "plugin" for e in tool_calls()) >= 2, what="the runs' entries")
    first = [e for e in tool_calls() if e.trace_id == tool_calls()[0].trace_id]
    assert [(e.phase, e.decision, e.cause) for e in first] == [
        ("log", "info", "logger-hook: received event 'tool_call'"),
        ("log", "debug", "logger-hook: tool_call count = 1"),
        ("plugin", "ok", None),
    ], "a run's lines, then the run"
    line = first[0]
    assert (line.kind, line.who, line.session, line.depth, line.process) == (
        "shell_hook",
        "plugin:logger-hook",
        "s1",
        0,
        PROCESS,
    )


async def test_a_plugins_bucket_refuses_rollup_and_purge_and_is_capped(bus: Bus, worker: PluginWorker) -> None:
    await bus.emit("prx.lifecycle.agent_start", {})
    js = bus.port.nc.jetstream()
    name = bucket_name("logger-hook")

    async def made() -> bool:
        try:
            await js.stream_info(f"KV_{name}")
        except Exception:  # not yet
            return False
        return True

    await wait_until(made, what="the plugin's bucket")
    config = (await js.stream_info(f"KV_{name}")).config
    assert config.allow_rollup_hdrs is False and config.deny_purge is True
    assert config.max_bytes == 10 * 1024 * 1024, "PRX's default max_kv_storage_mb"


async def test_a_component_sleeping_in_a_wasi_host_call_is_reported_at_its_limit(
    workspace: Path, logger_hook_wasm: Path
) -> None:
    """WASI preview 2's clocks are wasmtime's: no epoch reaches a sleep there, the result still comes at the limit."""
    tool = componentize_py()
    assert tool is not None
    folder = prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook")
    (folder / "plugin.toml").write_text(
        (folder / "plugin.toml").read_text() + "\n[resources]\nmax_execution_time_ms = 500\n"
    )
    shutil.copy(build_logger_hook(tool, SLEEPER_APP), folder / "plugin.wasm")
    code = load_code(load_manifest(folder))
    event = make_event("prx.lifecycle.tool_call", {}, None)
    result = await asyncio.wait_for(call_plugin(code, event, "tool_call"), 20)
    assert result.outcome is HookOutcome.TIMEOUT, result
    assert result.reason == "stopped at its time limit of 500 ms (left inside a host call)"
    refused = await call_plugin(code, event, "tool_call")
    assert refused.reason == "not run: its last call is still inside a host call, past its time limit"


async def test_a_plugin_cannot_flood_the_bus_or_forge_log_lines(
    bus: Bus, workspace: Path, logger_hook_wasm: Path, caplog: Any
) -> None:
    tool = componentize_py()
    assert tool is not None
    folder = prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook")
    shutil.copy(build_logger_hook(tool, FLOODER_APP), folder / "plugin.wasm")
    flood = EventRecorder()
    await bus.subscribe("eva.plugin.logger-hook.flood", flood)
    plugins = PluginWorker(bus, workspace, WorkerSettings(queue=None, poll_interval_s=0.05))
    await plugins.start()
    try:
        await bus.emit("prx.lifecycle.tool_call", {})
        await wait_until(lambda: plugins.stats.runs >= 1, timeout=60, what="the run")
    finally:
        await plugins.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "hookbus.plugins" and "refused" in r.getMessage()]
    assert said and "refused 50" in said[0], said
    assert "\n" not in said[0] and "\x1b" not in said[0], "one visible line"
    await bus.flush()
    first = [e for e in await flood.wait_for(100) if e.depth == 1]  # its own events bring it more runs, deeper
    assert len(first) == 100, "the first call published 100 of its 150"


async def test_a_plugin_logging_in_a_loop_reaches_the_journal_bounded_and_cannot_forge_fields(
    bus: Bus, workspace: Path, logger_hook_wasm: Path, journal: list[JournalEntry], caplog: Any
) -> None:
    caplog.set_level("DEBUG", logger="hookbus.plugins")
    tool = componentize_py()
    assert tool is not None
    folder = prx_plugin(workspace, EXAMPLE / "plugin.toml", "logger-hook")
    shutil.copy(build_logger_hook(tool, LOG_FLOODER_APP), folder / "plugin.wasm")
    plugins = PluginWorker(bus, workspace, WorkerSettings(queue=None, poll_interval_s=0.05))
    await plugins.start()
    try:
        await bus.emit("prx.lifecycle.tool_call", {}, session_id="s9")
        await wait_until(lambda: any(e.phase == "plugin" for e in journal), timeout=60, what="the run's entry")
    finally:
        await plugins.stop()
    await bus.flush()
    lines = [e for e in journal if e.phase == "log"]
    assert len(lines) == MAX_LINES_PER_CALL + 1, "the first lines, and one counting the rest"
    assert [e.decision for e in lines[-2:]] == ["info", "dropped"]
    assert (
        lines[-1].cause == f"{500 - MAX_LINES_PER_CALL} more log lines dropped (at most {MAX_LINES_PER_CALL} per event)"
    )
    forged = lines[0]
    assert (forged.kind, forged.who, forged.point, forged.process) == (
        "shell_hook",
        "plugin:logger-hook",
        "prx.lifecycle.tool_call",
        PROCESS,
    ), "the plugin chose the text, nothing else"
    assert forged.decision == "error" and forged.session == "s9"
    assert forged.cause is not None and "\n" not in forged.cause and "\x1b" not in forged.cause
    assert forged.cause.startswith('x\\x0a{"kind": "trigger"'), forged.cause
    said = [
        r.getMessage() for r in caplog.records if r.name == "hookbus.plugins" and "plugin logger-hook" in r.getMessage()
    ]
    assert len([m for m in said if ": line " in m]) == MAX_LINES_PER_CALL - 1, "the worker's log is bounded alike"
    assert any(m.endswith(f"{500 - MAX_LINES_PER_CALL} more log lines dropped (at most 20 per event)") for m in said)
