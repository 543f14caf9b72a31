"""Isolated shell hooks: real bubblewrap sandboxes, real processes, limits that bite.

Most tests drive the ShellRunner directly (isolation is a property of how a
hook process is started); one goes through a worker and a real nats-server.
Each isolated case is paired with the same hook run plain, where the escape
works: the tests fail if isolation stops working.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus
from bus._core.envelope import Event
from bus._sandbox.outcome import HookOutcome
from subscribers.shell_hooks._hook_trial import make_event
from subscribers.shell_hooks._hooks_file import HOOKS_FILE, load
from subscribers.shell_hooks._shell import HookResult, ShellRunner
from tests.conftest import StartWorker, hookbus_cmd, require_binary, run_cli
from tests.support.hooks_support import script, write_hooks
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("needs_bwrap")

EVENT = "prx.lifecycle.tool_call"


@pytest.fixture(scope="module")
def needs_bwrap() -> None:
    require_binary("bwrap")
    require_binary("prlimit")


def tool_call() -> Event:
    return make_event(EVENT, {"tool": "shell"}, None)


async def run_hooks(workspace: Path, *actions: dict[str, Any]) -> list[HookResult]:
    """Write the actions as tool_call hooks and run them once, in order, as the worker would."""
    write_hooks(workspace, {"tool_call": list(actions)})
    config = load(workspace / HOOKS_FILE)
    runner = ShellRunner(workspace, kill_grace=0.5)
    runner.default_isolation = config.isolation
    return [await runner.run(entry, tool_call()) for entry in config.entries]


def out(result: HookResult) -> str:
    return result.stdout.decode(errors="replace")


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker`` (anywhere on this machine)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A local HTTP server: its port, and the request lines it was sent."""
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readline())
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached")
        await writer.drain()
        writer.close()

    listening = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield listening.sockets[0].getsockname()[1], requests
    finally:
        listening.close()
        await listening.wait_closed()


async def test_network_is_off_unless_granted(workspace: Path, server: tuple[int, list[bytes]]) -> None:
    port, requests = server
    get = f'exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7\nprintf "GET / HTTP/1.0\\r\\n\\r\\n" >&3\ncat <&3\n'
    (workspace / "get.sh").write_text("#!/bin/bash\n" + get)
    (workspace / "get.sh").chmod(0o755)
    off, on, plain = await run_hooks(
        workspace,
        {"command": "./get.sh", "isolation": {"network": False}},
        {"command": "./get.sh", "isolation": {"network": True}},
        {"command": "./get.sh"},
    )
    assert off.outcome is HookOutcome.FAILED and off.exit_code == 7, off
    assert "reached" in out(on) and "reached" in out(plain)
    assert len(requests) == 2, "only the two hooks with a network reached the server"


def test_worker_environment_other_processes_and_workspace_secrets_are_invisible(workspace: Path) -> None:
    token = workspace / "api-token"
    token.write_text("token-secret-9902\n")
    token.chmod(0o600)
    (workspace / "sub").mkdir()
    snoop = (
        "tr '\\0' '\\n' < /proc/$PPID/environ | grep WORKER_SECRET\n"
        "cat ../api-token api-token 2>/dev/null\n"
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -h WORKER_SECRET\n"
        'echo "processes $(ls /proc | grep -c "^[0-9]")"\n'
        "echo done\n"
    )
    script(workspace, "snoop.sh", snoop)
    hooks = [
        {"id": "iso_sub", "command": "./snoop.sh", "cwd": "sub", "isolation": True},
        {"id": "iso_ws", "command": "./snoop.sh", "isolation": True},
        {"id": "plain", "command": "./snoop.sh", "cwd": "sub"},
    ]
    write_hooks(workspace, {"tool_call": hooks})
    # The worker's secret is in its initial environment: what /proc/<pid>/environ shows.
    done = run_cli("hooks", "test", "tool_call", "--workspace", str(workspace), env={"WORKER_SECRET": "ws-4417"})
    reports = {part.split(" ", 1)[0]: part for part in done.stdout.split("hook ")[1:]}
    for hook in ("iso_sub", "iso_ws"):
        text = reports[hook]
        assert "| done" in text, done.stdout
        assert "ws-4417" not in text and "token-secret-9902" not in text, text
        seen = int(text.split("processes ")[1].split()[0])
        assert seen <= 6, f"a private /proc shows the sandbox's few processes, not {seen}"
    assert "ws-4417" in reports["plain"] and "token-secret-9902" in reports["plain"], "the escape works unisolated"


async def test_an_isolated_hook_works_in_a_private_scratch_directory(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    write = (
        'echo kept > kept && cat kept && pwd\necho leak > ../leak || echo "refused ../leak"\n'
        'echo leak > /work-leak 2>/dev/null || echo "refused /"\necho done\n'
    )
    script(workspace, "write.sh", write)
    (result,) = await run_hooks(workspace, {"command": "./write.sh", "cwd": "sub", "isolation": True})
    assert "kept\n/tmp/hookbus-scratch\n" in out(result) and "done" in out(result), result
    assert "refused /" in out(result)
    assert not (workspace / "sub" / "kept").exists() and not (workspace / "kept").exists()
    assert not (workspace / "leak").exists() and not (workspace / "sub" / "leak").exists()


#: Every file or directory hookbus loads or stores in a workspace, spelled by the constants that name them.
def workspace_state() -> set[str]:
    from bus._cli.up import HISTORY_FILE
    from bus._middleware import timeouts
    from bus.adapters.claude_code._command_file import FILE
    from subscribers.http_api._token import TOKEN_FILE
    from subscribers.journal._store import DB_NAME, JSONL_DIR
    from subscribers.plugins._manifest import PLUGINS_DIR
    from triggers.agent import _budgets as budgets
    from triggers.agent import _hook_turn as hook_turn
    from triggers.engine import _config as config

    names = {HOOKS_FILE, FILE, TOKEN_FILE, DB_NAME, JSONL_DIR, PLUGINS_DIR, budgets.BUDGETS_FILE, HISTORY_FILE}
    names.add(timeouts.MIDDLEWARE_FILE)  # the operator's handler-timeout ceiling
    return names | {config.FILE_NAME, hook_turn.FILE_NAME, "jetstream", "drain", ".hookbus", f"{DB_NAME}-wal"}


async def test_an_isolated_hook_can_create_no_state_file_present_or_missing(workspace: Path) -> None:
    """A trigger, plugin or budget file it could plant would load in the worker, outside any sandbox."""
    names = sorted(workspace_state())
    (workspace / "triggers.yaml").write_text("triggers: []\n")
    plant = "".join(
        f'for d in "$WS" "$WS/sub"; do echo planted >> "$d/{name}" 2>/dev/null && echo "wrote {name}"; done\n'
        for name in names
    )
    plant += 'mkdir -p "$WS/plugins/evil" 2>/dev/null && echo "wrote plugin"\necho done\n'
    script(workspace, "plant.sh", plant)
    (workspace / "sub").mkdir()
    attack = {"command": "./plant.sh", "env": {"WS": str(workspace)}, "isolation": True}
    as_cwd_sub = {**attack, "cwd": "sub"}
    results = await run_hooks(workspace, attack, as_cwd_sub)
    for result in results:
        assert "done" in out(result) and "wrote" not in out(result), result
    assert (workspace / "triggers.yaml").read_text() == "triggers: []\n"
    assert sorted(p.name for p in workspace.iterdir()) == ["hooks.json", "plant.sh", "sub", "triggers.yaml"]
    assert not list((workspace / "sub").iterdir())
    (plain,) = await run_hooks(workspace, {"command": "./plant.sh", "env": {"WS": str(workspace)}})
    assert "wrote triggers.yaml" in out(plain), "the same hook run plain plants them"


async def test_an_isolated_hook_cannot_rewrite_the_script_a_plain_hook_runs(workspace: Path, tmp_path: Path) -> None:
    """Rewritten, the plain hook would run the attacker's code unsandboxed and read api-token."""
    (workspace / "api-token").write_text("token-secret-7321\n")
    (workspace / "api-token").chmod(0o600)
    elsewhere = tmp_path / "trusted-hooks"
    elsewhere.mkdir()
    for where in (workspace, elsewhere):
        (where / "plain.sh").write_text("#!/bin/sh\necho plain\n")
        (where / "plain.sh").chmod(0o755)
    evil = f"#!/bin/sh\ncat {workspace}/api-token\n"
    rewrite = "".join(
        f"printf '%s' '{evil}' > {path} 2>/dev/null && echo rewrote\n"
        f"rm {path} 2>/dev/null && echo removed\n"
        f"mv {path} {path}.old 2>/dev/null && echo moved\n"
        for path in (workspace / "plain.sh", elsewhere / "plain.sh", workspace / "hooks.json")
    )
    script(workspace, "rewrite.sh", rewrite + "echo done\n")
    attack = {"command": "./rewrite.sh", "isolation": True}
    in_elsewhere = {**attack, "cwd": str(elsewhere)}
    results = await run_hooks(
        workspace, attack, in_elsewhere, {"command": "./plain.sh"}, {"command": str(elsewhere / "plain.sh")}
    )
    for attacker in results[:2]:
        assert out(attacker).split() == ["done"], attacker
    for plain in results[2:]:
        assert out(plain) == "plain\n", plain
    (unisolated,) = await run_hooks(workspace, {"command": "./rewrite.sh", "cwd": str(elsewhere)})
    assert "rewrote" in out(unisolated), "the same hook run plain rewrites them"


async def test_an_isolated_hook_sees_no_store_journal_drain_nor_secret(workspace: Path) -> None:
    secrets = {
        "jetstream/jetstream/$G/streams/KV_hookbus_payloads/msgs/1.blk": "eva-payload-secret",
        "journal/2026-12-01.jsonl": "bob-journal-secret",
        "journal.db": "journal-db-secret",
        "drain/0001.json": "drained-secret",
        ".hookbus/drain/0002.json": "dot-drain-secret",
        "api-token": "api-token-secret",
        "ask-link-key": "ask-link-key-secret",
        "journal.key": "journal-key-secret",
        "journal.checkpoints.jsonl": "checkpoints-secret",
        "claude-hooks.json": "claude-config-secret",
        "triggers.yaml": "triggers-secret",
        "sub/notes.txt": "sub-file-secret",
    }
    for name, text in secrets.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text + "\n")
    script(workspace, "read.sh", f"grep -rh 'secre[t]' {workspace} {workspace}/sub 2>/dev/null\necho done\n")
    (isolated,) = await run_hooks(workspace, {"command": "./read.sh", "cwd": "sub", "isolation": True})
    assert out(isolated) == "done\n", isolated
    (plain,) = await run_hooks(workspace, {"command": "./read.sh", "cwd": "sub"})
    assert all(text in out(plain) for text in secrets.values()), "the same hook run plain reads them all"


async def test_a_fork_bomb_is_stopped_by_the_process_limit(workspace: Path) -> None:
    marker = "31.4159"
    bomb = f'i=0\nwhile [ $i -lt 200 ]; do sleep {marker} & i=$((i+1)); done\necho "all 200 started"\n'
    script(workspace, "bomb.sh", bomb)
    (result,) = await run_hooks(
        workspace, {"command": "./bomb.sh", "timeout_ms": 20000, "isolation": {"max_procs": 16}}
    )
    assert "all 200 started" not in out(result), result
    assert b"fork" in result.stderr.lower(), result.stderr
    await wait_until(lambda: not processes_with(marker), what="every process of the sandbox to be gone")


async def test_a_memory_hog_is_stopped(workspace: Path) -> None:
    hog = {"command": sys.executable, "args": ["-c", "b = bytearray(1 << 30); print('got it')"]}
    (isolated,) = await run_hooks(workspace, {**hog, "isolation": {"memory_mb": 256}})
    assert isolated.outcome is HookOutcome.FAILED, isolated
    assert b"MemoryError" in isolated.stderr and "got it" not in out(isolated)


async def test_a_setsid_child_does_not_outlive_an_isolated_hook(workspace: Path) -> None:
    script(workspace, "detach.sh", "setsid sleep 27.1828 &\nsetsid sleep 27.1829 &\necho started\n")
    write_hooks(workspace, {})
    (isolated,) = await run_hooks(workspace, {"command": "./detach.sh", "args": [], "isolation": True})
    assert "started" in out(isolated)
    await wait_until(lambda: not processes_with("27.1828"), what="the isolated hook's setsid child to be gone")
    await run_hooks(workspace, {"command": "./detach.sh"})
    try:
        await wait_until(lambda: processes_with("27.1829"), what="the plain hook's setsid child (it escapes)")
    finally:
        for pid in processes_with("27.182"):
            os.kill(pid, 9)


async def test_a_timeout_kills_everything_in_the_sandbox(workspace: Path) -> None:
    script(workspace, "hang.sh", "sleep 26.535 &\nsleep 26.535\n")
    (result,) = await run_hooks(workspace, {"command": "./hang.sh", "timeout_ms": 300, "isolation": True})
    assert result.outcome is HookOutcome.TIMEOUT, result
    await wait_until(lambda: not processes_with("26.535"), what="the sandbox's processes to be gone")


def test_isolation_asked_and_unavailable_refuses_the_hook(workspace: Path) -> None:
    ran = workspace / "ran"
    script(workspace, "touch.sh", f"echo yes > {ran}\n")
    write_hooks(workspace, {"tool_call": [{"command": "./touch.sh", "isolation": True}]})
    no_bwrap = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not Path(p, "bwrap").exists())
    done = run_cli("hooks", "test", "tool_call", "--workspace", str(workspace), env={"PATH": no_bwrap})
    assert done.returncode == 1
    assert "refused: not run: isolation: bubblewrap (bwrap) is not installed" in done.stdout, done.stdout
    assert not ran.exists()


async def test_the_file_default_isolates_hooks_run_by_the_worker(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    from bus._journal.entries import decode_entry

    entries: list[Any] = []

    async def take(msg: Any) -> None:
        entries.append(decode_entry(msg.data))

    await bus.port.nc.subscribe("hookbus.journal.shell_hook", cb=take)
    script(workspace, "who.sh", "cat /proc/1/comm\n")
    (workspace / HOOKS_FILE).write_text(
        '{"isolation": {"network": false}, "hooks": {"tool_call": [{"id": "iso", "command": "./who.sh"}],'
        ' "agent_end": [{"id": "plain", "command": "./who.sh", "isolation": false}]}}'
    )
    await start_worker()
    await bus.emit(EVENT, {"tool": "x"})
    await bus.emit("prx.lifecycle.agent_end", {"success": True})
    await wait_until(lambda: len(entries) == 2, what="both runs journaled")
    by_hook = {entry.who: entry for entry in entries}
    assert (by_hook["iso"].stdout or "").strip() == "bwrap", by_hook["iso"]
    assert (by_hook["plain"].stdout or "").strip() not in ("", "bwrap"), by_hook["plain"]


def test_hookbus_isolate_runs_any_command_in_the_same_sandbox(tmp_path: Path) -> None:
    (tmp_path / "api-token").write_text("token-secret-5150\n")
    probe = "cat /proc/1/comm; cat api-token; echo written > here; touch /etc/hookbus-isolate-probe || echo ro"
    done = subprocess.run(
        [*hookbus_cmd(), "isolate", "--max-procs", "8", "--", "sh", "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["bwrap", "ro"], done.stdout
    assert (tmp_path / "here").read_text() == "written\n"
    refused = run_cli("isolate", "--max-procs", "1", "--", "true")
    assert refused.returncode != 0 and "max_procs" in refused.stderr
