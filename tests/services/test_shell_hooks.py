"""Shell hooks with a real worker, real scripts and a real nats-server."""

from __future__ import annotations

import logging
import os
import sysconfig
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from bus import Bus
from bus.testing import EventRecorder
from subscribers.shell_hooks._shell import ENV_PAYLOAD_LIMIT
from tests.conftest import StartWorker
from tests.support.hooks_support import script, wait_for_file, wait_until, write_hooks

DUMP = """
out="$OUT_DIR"
printf '%s' "$ZERO_HOOK_PAYLOAD" > "$out/env_payload"
printf '%s' "${ZERO_HOOK_PAYLOAD+set}" > "$out/env_payload_set"
cat "$ZERO_HOOK_PAYLOAD_FILE" > "$out/file_payload"
printf '%s' "$ZERO_HOOK_PAYLOAD_FILE" > "$out/file_path"
cat > "$out/stdin"
env > "$out/env"
echo done > "$out/done"
"""


def dump_hook(workspace: Path) -> Path:
    """A tool_call hook that writes every channel it gets into the returned directory."""
    out = workspace / "out"
    out.mkdir()
    script(workspace, "dump.sh", DUMP)
    write_hooks(workspace, {"tool_call": [{"command": "./dump.sh", "stdin_json": True, "env": {"OUT_DIR": str(out)}}]})
    return out


def env_of(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


async def test_payload_reaches_the_hook_through_all_three_channels(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    out = dump_hook(workspace)
    recorder = EventRecorder()
    await bus.subscribe("prx.lifecycle.tool_call", recorder)
    worker = await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True}, session_id="sess_1")
    await wait_for_file(out / "done")
    raw = (await recorder.wait_for(1))[0].raw.decode()
    assert (out / "env_payload").read_text() == raw
    assert (out / "file_payload").read_text() == raw
    assert (out / "stdin").read_text() == raw
    assert orjson.loads(raw)["payload"]["tool"] == "shell"
    env = env_of(out / "env")
    assert env["ZERO_HOOK_EVENT"] == "tool_call"
    assert env["ZERO_HOOK_SESSION"] == "sess_1"
    assert env["ZERO_HOOK_TIMESTAMP"] == orjson.loads(raw)["timestamp"]
    assert env["HOOKBUS_DEPTH"] == "1"
    assert env["NATS_URL"] == bus.servers[0]
    assert env["PATH"].split(":")[0] == sysconfig.get_path("scripts")
    assert "HOME" not in env
    await wait_until(lambda: worker.stats.runs == 1, what="the run to be counted")
    assert not Path((out / "file_path").read_text()).exists(), "the payload file must be removed after the hook"


async def test_stdin_is_empty_without_stdin_json(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    out = workspace / "out"
    out.mkdir()
    script(workspace, "dump.sh", DUMP)
    write_hooks(workspace, {"tool_call": [{"command": "./dump.sh", "env": {"OUT_DIR": str(out)}}]})
    await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {"tool": "x"})
    await wait_for_file(out / "done")
    assert (out / "stdin").read_text() == ""
    assert (out / "env_payload_set").read_text() == "set"


async def test_payload_over_8_kb_leaves_the_variable_empty_and_flagged(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    """As PRX does: ZERO_HOOK_PAYLOAD is set but empty, and ZERO_HOOK_PAYLOAD_TRUNCATED=1."""
    out = dump_hook(workspace)
    recorder = EventRecorder()
    await bus.subscribe("prx.lifecycle.tool_call", recorder)
    await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {"tool": "x", "output": "y" * ENV_PAYLOAD_LIMIT})
    await wait_for_file(out / "done")
    raw = (await recorder.wait_for(1))[0].raw.decode()
    assert len(raw) > ENV_PAYLOAD_LIMIT
    assert (out / "env_payload_set").read_text() == "set" and (out / "env_payload").read_text() == ""
    assert env_of(out / "env")["ZERO_HOOK_PAYLOAD_TRUNCATED"] == "1"
    assert (out / "file_payload").read_text() == raw
    assert (out / "stdin").read_text() == raw


async def test_blocked_variables_in_env_are_ignored(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    out = workspace / "out"
    out.mkdir()
    script(workspace, "dump.sh", DUMP)
    evil = {"LD_PRELOAD": "/nonexistent/evil.so", "LD_LIBRARY_PATH": "/evil", "DYLD_INSERT_LIBRARIES": "/evil"}
    env = {**evil, "PATH": "/evil", "HOME": "/evil", "OUT_DIR": str(out), "KEPT": "yes", "HOOKBUS_DEPTH": "0"}
    write_hooks(workspace, {"tool_call": [{"command": "./dump.sh", "env": env}]})
    os.environ["HOOKBUS_TEST_WORKER_SECRET"] = "s3cret"  # the worker's own environment must not leak either
    try:
        await start_worker()
        await bus.emit("prx.lifecycle.tool_call", {"tool": "x"})
        await wait_for_file(out / "done")
    finally:
        del os.environ["HOOKBUS_TEST_WORKER_SECRET"]
    seen = env_of(out / "env")
    assert not set(evil) & set(seen)
    assert "HOME" not in seen
    assert "/evil" not in seen["PATH"]
    assert seen["KEPT"] == "yes"
    assert seen["HOOKBUS_DEPTH"] == "1", "the recursion counter is not overridable"
    assert "HOOKBUS_TEST_WORKER_SECRET" not in seen


async def test_relative_command_and_cwd_resolve_against_the_workspace(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    (workspace / "hooks" / "work").mkdir(parents=True)
    script(workspace, "hooks/where.sh", 'pwd > "$OUT"\n')
    out = workspace / "pwd.txt"
    write_hooks(
        workspace, {"tool_call": [{"command": "hooks/where.sh", "cwd": "hooks/work", "env": {"OUT": str(out)}}]}
    )
    await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    assert (await wait_for_file(out)).strip() == str((workspace / "hooks" / "work").resolve())


async def test_actions_of_one_event_run_concurrently_and_independently(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    # The first action waits for a file only the second one writes: it finishes only if both run at once.
    script(workspace, "wait.sh", 'while [ ! -f "$FLAG" ]; do sleep 0.02; done; echo ok > "$OUT"\n')
    script(workspace, "flag.sh", 'echo up > "$FLAG"\n')
    script(workspace, "fail.sh", "exit 3\n")
    flag, out = workspace / "flag", workspace / "out"
    env = {"FLAG": str(flag), "OUT": str(out)}
    write_hooks(
        workspace,
        {
            "tool_call": [
                {"command": "./fail.sh"},
                {"command": "./wait.sh", "env": env},
                {"command": "./flag.sh", "env": env},
            ]
        },
    )
    worker = await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    assert (await wait_for_file(out)).strip() == "ok"
    await wait_until(lambda: worker.stats.runs == 3, what="three runs")
    assert worker.stats.failures == 1


async def test_keys_may_be_subjects_and_patterns(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    script(workspace, "log.sh", 'echo "$ZERO_HOOK_EVENT" >> "$OUT"\n')
    out = workspace / "events.txt"
    env = {"OUT": str(out)}
    write_hooks(
        workspace,
        {
            "eva.custom.deploy": [{"command": "./log.sh", "env": env}],
            "prx.lifecycle.*": [{"command": "./log.sh", "env": env}],
        },
    )
    worker = await start_worker()
    assert worker.patterns == ["eva.custom.deploy", "prx.lifecycle.*"]
    await bus.emit("eva.custom.deploy", {})
    await bus.emit("prx.lifecycle.agent_start", {})
    await wait_until(lambda: worker.stats.runs == 2, what="two runs")
    assert sorted(out.read_text().split()) == ["agent_start", "custom.deploy"]


async def test_hot_reload_and_a_broken_file_keeps_the_last_good_config(
    bus: Bus, workspace: Path, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    script(workspace, "a.sh", 'echo a >> "$OUT"\n')
    script(workspace, "b.sh", 'echo b >> "$OUT"\n')
    out = workspace / "out"
    env = {"OUT": str(out)}
    write_hooks(workspace, {"tool_call": [{"command": "./a.sh", "env": env}]})
    worker = await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: worker.stats.runs == 1, what="hook a")

    write_hooks(workspace, {"agent_end": [{"command": "./b.sh", "env": env}]})  # rename over: new inode
    await wait_until(lambda: worker.patterns == ["prx.lifecycle.agent_end"], what="the reload")
    await bus.emit("prx.lifecycle.tool_call", {})  # no longer hooked
    await bus.emit("prx.lifecycle.agent_end", {})
    await wait_until(lambda: worker.stats.runs == 2, what="hook b")

    caplog.set_level(logging.ERROR, logger="hookbus.hooks")
    broken = b'{"hooks": {"agent_end": [{"command": "./a.sh", "timeout_ms": "soon"}]}}'
    (workspace / "hooks.json").write_bytes(broken)  # written in place
    await wait_until(lambda: worker.hooks.last_error is not None, what="the broken file to be seen")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert str(workspace / "hooks.json") in errors[0]
    assert "hooks.agent_end[0].timeout_ms" in errors[0]
    await bus.emit("prx.lifecycle.agent_end", {})
    await wait_until(lambda: worker.stats.runs == 3, what="hook b, still configured")
    assert out.read_text().split() == ["a", "b", "b"]


REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("semicolon", {"command": "./ok.sh; touch pwned"}),
    ("pipe", {"command": "./ok.sh|sh"}),
    ("ampersand", {"command": "./ok.sh&"}),
    ("backtick", {"command": "./ok.sh`id`"}),
    ("dollar-paren", {"command": "./ok.sh$(id)"}),
    ("redirect-out", {"command": "./ok.sh>x"}),
    ("redirect-in", {"command": "./ok.sh<x"}),
    ("nul-command", {"command": "./ok.sh\0x"}),
    ("nul-arg", {"command": "./ok.sh", "args": ["a\0b"]}),
    ("nul-env-key", {"command": "./ok.sh", "env": {"A\0B": "1"}}),
    ("nul-env-value", {"command": "./ok.sh", "env": {"A": "1\0"}}),
    ("cwd-dotdot", {"command": "./ok.sh", "cwd": "../"}),
    ("cwd-symlink", {"command": "./ok.sh", "cwd": "escape"}),
]


@pytest.mark.parametrize(("case", "action"), REFUSED, ids=[case for case, _ in REFUSED])
async def test_refused_hooks_never_run(
    bus: Bus,
    workspace: Path,
    start_worker: StartWorker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
    action: dict[str, Any],
) -> None:
    script(workspace, "ok.sh", f'touch "{tmp_path}/ran-${{1:-refused}}"\n')
    (workspace / "escape").symlink_to(tmp_path)
    caplog.set_level(logging.ERROR, logger="hookbus.hooks")
    write_hooks(workspace, {"tool_call": [action, {"command": "./ok.sh", "args": ["good"]}]})
    worker = await start_worker()
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: worker.stats.refusals == 1 and worker.stats.runs == 1, what="one refusal and one run")
    assert (tmp_path / "ran-good").exists()  # the other action of the same event ran
    assert not (tmp_path / "ran-refused").exists()
    assert not (workspace / "pwned").exists()
    if case != "cwd-symlink":  # refused on sight: logged when loaded
        assert any("refused" in r.getMessage() for r in caplog.records)


async def test_timeout_sends_sigterm_then_sigkill_to_the_group(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    marks = workspace / "marks"
    body = f"""
trap 'echo TERM >> {marks}' TERM
sleep 300 &
echo "$! $$" > {workspace}/pids
while true; do sleep 0.05; done
"""
    script(workspace, "stubborn.sh", body)
    write_hooks(workspace, {"tool_call": [{"command": "./stubborn.sh", "timeout_ms": 300}]})
    worker = await start_worker(kill_grace_s=0.3)
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_until(lambda: worker.stats.timeouts == 1, what="the timeout")
    assert "TERM" in marks.read_text()
    for pid in map(int, (workspace / "pids").read_text().split()):
        await wait_until(lambda pid=pid: not _alive(pid), what=f"pid {pid} to be gone")
    assert worker.stats.runs == 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"


async def test_stop_kills_running_hook_groups(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    script(workspace, "long.sh", f'sleep 300 &\necho "$! $$" > {workspace}/pids\nwait\n')
    write_hooks(workspace, {"tool_call": [{"command": "./long.sh"}]})
    worker = await start_worker(drain_timeout=0.2)
    await bus.emit("prx.lifecycle.tool_call", {})
    await wait_for_file(workspace / "pids")
    await worker.stop()
    for pid in map(int, (workspace / "pids").read_text().split()):
        await wait_until(lambda pid=pid: not _alive(pid), what=f"pid {pid} to be gone")


async def test_a_flood_is_bounded_and_fully_accounted(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    write_hooks(workspace, {"tool_call": [{"command": "/bin/true"}]})
    worker = await start_worker(max_procs=4, queue_size=50)
    for _ in range(2000):
        await bus.emit("prx.lifecycle.tool_call", {})
    await bus.flush()
    stats = worker.stats
    await wait_until(lambda: stats.runs + stats.shed == 2000, timeout=60, what="every event run or shed")
    assert stats.received == 2000
    assert 1 <= stats.running_peak <= 4
    assert stats.runs >= 1
    assert stats.failures == 0


async def test_workers_in_one_queue_group_split_events(
    nats_url: str, bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    script(workspace, "log.sh", 'echo "$ZERO_HOOK_PAYLOAD" >> "$OUT"\n')
    out = workspace / "out"
    write_hooks(workspace, {"tool_call": [{"command": "./log.sh", "env": {"OUT": str(out)}}]})
    async with Bus(nats_url, name="second") as other:
        first = await start_worker(queue="split-test")
        second = await start_worker(queue="split-test", bus=other)
        for n in range(40):
            await bus.emit("prx.lifecycle.tool_call", {"n": n})
        await wait_until(lambda: first.stats.runs + second.stats.runs == 40, what="40 runs")
        await second.stop()
    assert first.stats.runs > 0
    assert second.stats.runs > 0
    ns = sorted(orjson.loads(line)["payload"]["n"] for line in out.read_text().splitlines())
    assert ns == list(range(40)), "each event ran exactly once"


async def test_a_hook_that_re_emits_its_event_stops_at_depth_8(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    root = str(Path(__file__).resolve().parents[2])
    action = {"command": "hookbus", "args": ["emit", "eva.custom.loop", "{}"], "env": {"PYTHONPATH": root}}
    write_hooks(workspace, {"eva.custom.loop": [action]})
    recorder = EventRecorder()
    await bus.subscribe("eva.custom.loop", recorder)
    worker = await start_worker()
    await bus.emit("eva.custom.loop", {})
    await wait_until(lambda: worker.stats.runs == 8, timeout=60, what="eight hook runs")
    await wait_until(lambda: len(recorder.events) == 8, what="eight events")
    await bus.flush()
    assert [event.depth for event in recorder.events] == list(range(8))
    assert worker.stats.failures == 0
    assert worker.stats.runs == 8


async def test_per_hook_metrics(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    script(workspace, "fail.sh", "exit 2\n")
    script(workspace, "slow.sh", "sleep 5\n")
    hooks = [
        {"id": "m_ok", "command": "/bin/true"},
        {"id": "m_fail", "command": "./fail.sh"},
        {"id": "m_slow", "command": "./slow.sh", "timeout_ms": 50},
        {"id": "m_bad", "command": "a|b"},
    ]
    write_hooks(workspace, {"eva.custom.metrics": hooks})

    def value(name: str, hook: str) -> float:
        return (
            REGISTRY.get_sample_value(f"hookbus_shell_hook_{name}", {"hook": hook, "event": "eva.custom.metrics"}) or 0
        )

    before = {(n, h): value(n, h) for n in METRICS for h in ("m_ok", "m_fail", "m_slow", "m_bad")}
    worker = await start_worker(kill_grace_s=0.1)
    await bus.emit("eva.custom.metrics", {})
    await wait_until(lambda: worker.stats.runs == 3 and worker.stats.refusals == 1, what="four outcomes")
    delta = {key: value(*key) - start for key, start in before.items()}
    assert delta[("runs_total", "m_ok")] == 1
    assert delta[("duration_seconds_count", "m_ok")] == 1
    assert delta[("failures_total", "m_fail")] == 1
    assert delta[("timeouts_total", "m_slow")] == 1
    assert delta[("failures_total", "m_slow")] == 0
    assert delta[("refusals_total", "m_bad")] == 1
    assert delta[("runs_total", "m_bad")] == 0


METRICS = ("runs_total", "failures_total", "timeouts_total", "refusals_total", "duration_seconds_count")


async def test_hook_runs_are_journaled_without_the_payload(
    bus: Bus, workspace: Path, start_worker: StartWorker
) -> None:
    from bus._journal.entries import decode_entry

    entries = []

    async def take(msg: Any) -> None:
        entries.append(decode_entry(msg.data))

    await bus.port.nc.subscribe("hookbus.journal.shell_hook", cb=take)
    script(workspace, "fail.sh", "exit 3\n")
    write_hooks(
        workspace, {"eva.custom.j": [{"id": "j_ok", "command": "/bin/true"}, {"id": "j_fail", "command": "./fail.sh"}]}
    )
    await start_worker()
    await bus.emit("eva.custom.j", {"secret": "hunter2"}, session_id="s9")
    await wait_until(lambda: len(entries) == 2, what="two journal entries")
    by_hook = {e.who: e for e in entries}
    assert by_hook["j_ok"].decision == "ok" and by_hook["j_ok"].point == "eva.custom.j"
    assert by_hook["j_fail"].decision == "failed" and "3" in (by_hook["j_fail"].cause or "")
    assert all(e.session == "s9" and e.kind == "shell_hook" and e.duration_ms is not None for e in entries)
    assert all("hunter2" not in e.encode().decode() for e in entries)


async def test_hooks_metrics_snapshot(bus: Bus, workspace: Path, start_worker: StartWorker) -> None:
    from subscribers.shell_hooks import _hook_metrics as metrics

    script(workspace, "fail.sh", "echo nope >&2; exit 2\n")
    write_hooks(
        workspace,
        {"eva.custom.snap": [{"id": "s_ok", "command": "/bin/true"}, {"id": "s_fail", "command": "./fail.sh"}]},
    )
    worker = await start_worker()
    for _ in range(3):
        await bus.emit("eva.custom.snap", {})
    await wait_until(lambda: worker.stats.runs == 6, what="six runs")
    rows = {(r["hook"], r["point"]): r for r in metrics.snapshot()}
    ok, fail = rows[("s_ok", "eva.custom.snap")], rows[("s_fail", "eva.custom.snap")]
    assert ok["calls"] == 3 and ok["failures"] == 0 and ok["last_error"] is None
    assert ok["mean_ms"] == pytest.approx(ok["total_ms"] / 3, abs=0.01)
    assert fail["calls"] == 3 and fail["failures"] == 3 and fail["last_error"]
