"""Shell hooks against hostile events and hostile neighbours: real worker, real hook processes, real nats-server."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from bus import Bus
from bus._journal.entries import SUBJECT_PREFIX
from subscribers.shell_hooks._errors import HookConfigError
from subscribers.shell_hooks._hooks_config import parse_api_hook
from subscribers.shell_hooks._hooks_file import load
from tests.cli.test_cli import UpProcess
from tests.conftest import StartWorker, run_cli
from tests.support.hooks_support import script, wait_for_file, wait_until, write_hooks


@pytest.fixture
async def start_worker(start_worker: StartWorker) -> StartWorker:
    """The shared fixture, with a short drain: these hooks hang on purpose, stopping need not wait for them."""

    async def start(**options: Any) -> Any:
        options.setdefault("drain_timeout", 0.5)
        return await start_worker(**options)

    return start


@pytest.fixture
async def journal(bus: Bus) -> list[dict[str, Any]]:
    """Journal entries published on the bus (as JSON objects), as they arrive."""
    entries: list[dict[str, Any]] = []

    async def keep(msg: Msg) -> None:
        entries.append(orjson.loads(msg.data))

    await bus.port.nc.subscribe(f"{SUBJECT_PREFIX}.>", cb=keep)
    await bus.flush()
    return entries


def envelope(event: str, **changes: Any) -> bytes:
    fields = {"event": event, "timestamp": "2026-01-01T00:00:00.000Z", "session_id": "s1", "payload": {}}
    return json.dumps({**fields, "id": "e-1", "depth": 0, **changes}).encode()


def env_of(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


async def test_a_nul_byte_from_the_event_refuses_the_run_with_a_journal_entry(
    bus: Bus, raw: Client, workspace: Path, start_worker: StartWorker, journal: list[dict[str, Any]]
) -> None:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    ran = workspace / "ran"
    script(workspace, "mark.sh", f'echo "$ZERO_HOOK_SESSION" >> "{ran}"\n')
    write_hooks(workspace, {"tool_call": [{"id": "mark", "command": "./mark.sh"}]})
    worker = await start_worker()
    await raw.publish("prx.lifecycle.tool_call", envelope("tool_call", session_id="evil\u0000rest"))
    await raw.publish("prx.lifecycle.tool_call", envelope("tool_call", session_id="after"))
    await raw.flush()
    await wait_for_file(ran)
    await wait_until(lambda: worker.stats.refusals == 1 and worker.stats.runs == 1, what="one refusal, one run")
    assert ran.read_text() == "after\n", "only the clean event ran its hook"
    await wait_until(lambda: len([e for e in journal if e["who"] == "mark"]) == 2, what="both runs journaled")
    refused = next(e for e in journal if e["who"] == "mark" and e["decision"] == "refused")
    assert "ZERO_HOOK_SESSION" in refused["cause"] and "NUL" in refused["cause"]
    gc.collect()
    assert errors == [], "no receive path leaves an unretrieved task exception"
    asyncio.get_running_loop().set_exception_handler(None)


async def test_the_hook_environment_keeps_loader_and_interpreter_variables_out(
    bus: Bus, workspace: Path, start_worker: StartWorker, nats_url: str
) -> None:
    out = workspace / "out"
    out.mkdir()
    script(workspace, "dump.sh", f'env > "{out}/env"\necho done > "{out}/done"\n')
    evil = {
        "LD_AUDIT": "/evil.so",
        "PYTHONPATH": "/evil",
        "PYTHONSTARTUP": "/evil.py",
        "BASH_ENV": "/evil.sh",
        "ENV": "/evil.sh",
        "GCONV_PATH": "/evil",
        "NODE_OPTIONS": "--require /evil.js",
        "PERL5OPT": "-M/evil",
        "GLIBC_TUNABLES": "glibc.malloc.x=1",
        "BASH_FUNC_ls%%": "() { evil; }",
        "lower_case": "x",
    }
    write_hooks(workspace, {"tool_call": [{"command": "./dump.sh", "env": {**evil, "HOOK_TARGET": "kept"}}]})
    host = nats_url.removeprefix("nats://")
    await start_worker(nats_url=f"nats://hooker:s3cret-pw@{host}")
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_for_file(out / "done")
    seen = env_of(out / "env")
    assert not set(evil) & set(seen), f"reached the hook: {sorted(set(evil) & set(seen))}"
    assert seen["HOOK_TARGET"] == "kept"
    assert seen["NATS_URL"] == f"nats://{host}", "credentials never reach a hook"
    assert "s3cret-pw" not in (out / "env").read_text()


def test_the_http_api_turns_away_a_hook_whose_env_names_a_loader_variable() -> None:
    body = {"event": "tool_call", "action": {"command": "/bin/true", "env": {"LD_AUDIT": "/x.so", "OK_NAME": "1"}}}
    with pytest.raises(HookConfigError, match="a hook's env may not set LD_AUDIT"):
        parse_api_hook(body, hook_id="h1")


async def test_hook_output_is_escaped_one_prefixed_log_line_per_output_line(
    bus: Bus, workspace: Path, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = "first\\n\\033[2J\\033[31mred\\rhookbus: ERROR forged line\\nlast\\n"
    script(workspace, "noisy.sh", f"printf '{hostile}'\necho ran > \"$HOOK_DONE\"\n")
    done = workspace / "done"
    write_hooks(workspace, {"tool_call": [{"id": "noisy", "command": "./noisy.sh", "env": {"HOOK_DONE": str(done)}}]})
    worker = await start_worker()
    with caplog.at_level(logging.INFO, logger="hookbus.shell"):
        await bus.emit("prx.lifecycle.tool_call", {})
        await wait_until(lambda: worker.stats.runs == 1 and any("| last" in r.getMessage() for r in caplog.records))
    output = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hook noisy | ")]
    assert output == [
        "hook noisy | first",
        "hook noisy | \\x1b[2J\\x1b[31mred\\x0dhookbus: ERROR forged line",
        "hook noisy | last",
    ]
    assert not any("\x1b" in r.getMessage() or "\r" in r.getMessage() for r in caplog.records)


async def test_a_flooded_slow_key_neither_delays_nor_sheds_another_key(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    fast = workspace / "fast"
    script(workspace, "slow.sh", "sleep 60\n")
    script(workspace, "fast.sh", f'echo "$ZERO_HOOK_EVENT" >> "{fast}"\n')
    write_hooks(
        workspace,
        {
            "eva.custom.slow": [{"command": "./slow.sh", "timeout_ms": 120_000}],
            "eva.custom.fast": [{"command": "./fast.sh"}],
        },
    )
    worker = await start_worker(max_procs=2, queue_size=3)
    for n in range(20):
        await bus.emit("eva.custom.slow", {"n": n})
    await wait_until(lambda: worker.stats.received == 20, what="the flood received")
    await wait_until(lambda: len(worker.runner.running) == 2, what="the slow key's two slots taken")
    slow_shed = worker.stats.shed_by_key["eva.custom.slow"]
    # 2 running and 3 queued, plus up to 3 the dispatcher took off the queue before the flood was in: the rest shed
    assert 14 <= slow_shed <= 17
    await bus.emit("eva.custom.fast", {})
    await wait_for_file(fast)
    await wait_until(lambda: worker.stats.runs == 1, what="the fast hook's run to end")
    assert fast.read_text() == "custom.fast\n"
    assert len(worker.runner.running) == 2, "the slow hooks were still running when the fast key's hook ran"
    assert worker.stats.shed_by_key == {"eva.custom.slow": slow_shed}, "the fast key shed nothing"


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from subscribers.shell_hooks._hooks_store import HooksStore

    async def main():
        store = HooksStore(Path(sys.argv[1]))
        for n in range(int(sys.argv[2])):
            action = {"command": "/bin/true", "args": [sys.argv[3], str(n)]}
            await store.create({"event": "tool_call", "action": action})

    asyncio.run(main())
    """
)


def test_hooks_json_writes_from_two_processes_are_never_lost(workspace: Path) -> None:
    path = workspace / "hooks.json"
    path.write_text('{"hooks": {}}')
    root = str(Path(__file__).resolve().parents[2])
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), "60", name], cwd=root) for name in ("a", "b", "c")
    ]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0, 0]
    written = sorted(tuple(entry.action.args) for entry in load(path).entries)
    assert written == sorted((name, str(n)) for name in "abc" for n in range(60))


def test_a_second_hookbus_up_on_one_workspace_is_refused(workspace: Path) -> None:
    first = UpProcess(workspace)
    try:
        second = run_cli(
            "up", "--workspace", str(workspace), "--port", "0", "--http-port", "0", "--metrics-port", "-1",
            env={"NATS_URL": ""},
        )  # fmt: skip
        assert second.returncode != 0
        assert f"workspace {workspace} is in use by another hookbus up (pid {first.proc.pid})" in second.stderr
        assert first.proc.poll() is None, "the first keeps running"
    finally:
        first.close()
