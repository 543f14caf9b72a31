"""`hookbus worker` and `hookbus hooks test`, as real processes."""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from bus import Bus
from tests.conftest import hookbus_cmd, run_cli
from tests.support.hooks_support import script, wait_for_file, wait_until, write_hooks


async def test_worker_command_runs_hooks_against_an_existing_nats(nats_url: str, workspace: Path) -> None:
    script(workspace, "mark.sh", f'echo "$ZERO_HOOK_EVENT" > {workspace}/mark\n')
    write_hooks(workspace, {"eva.custom.deploy": [{"command": "./mark.sh"}]})
    proc = subprocess.Popen(
        [
            *hookbus_cmd(),
            "worker",
            "--nats-url",
            nats_url,
            "--workspace",
            str(workspace),
            "--queue",
            "cli-test",
            "--metrics-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "1 hooks" in banner
        assert "queue group cli-test" in banner
        async with Bus(nats_url) as bus:
            await bus.emit("eva.custom.deploy", {"version": "1.2"})
        assert (await wait_for_file(workspace / "mark")).strip() == "custom.deploy"
        metrics_url = re.search(r"metrics (http://\S+)", banner).group(1)  # type: ignore[union-attr]
        await wait_until(lambda: 'event="eva.custom.deploy"' in _get(metrics_url), what="the run in /metrics")
        assert "hookbus_shell_hook_runs_total" in _get(metrics_url)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=20)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def test_hooks_test_runs_matching_hooks_once_and_reports(workspace: Path) -> None:
    script(workspace, "show.sh", 'echo "tool=$(cat "$ZERO_HOOK_PAYLOAD_FILE")"\necho oops >&2\n')
    script(workspace, "fail.sh", "echo failing\nexit 4\n")
    write_hooks(
        workspace,
        {
            "tool_call": [{"command": "./show.sh"}, {"command": "./fail.sh"}],
            "agent_start": [{"command": "./show.sh"}],
            "prx.lifecycle.*": [{"command": "./bad;cmd"}],
        },
    )
    done = run_cli("hooks", "test", "tool_call", '{"tool": "shell"}', "--workspace", str(workspace))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "./show.sh: ok, exit 0" in out
    assert '"payload":{"tool":"shell"}' in out
    assert "| oops" in out
    assert "./fail.sh: failed, exit 4" in out
    assert "| failing" in out
    assert "./bad;cmd: refused: command contains shell metacharacters" in out
    assert "3 hooks run for prx.lifecycle.tool_call: 1 ok, 2 not ok" in out

    done = run_cli("hooks", "test", "agent_start", "--workspace", str(workspace))
    assert "agent_start" in done.stdout
    done = run_cli("hooks", "test", "eva.custom.nothing", "--workspace", str(workspace))
    assert done.returncode == 0
    assert "no enabled hook" in done.stdout


def test_hooks_test_reports_a_broken_file_in_one_line(workspace: Path) -> None:
    (workspace / "hooks.json").write_text('{"hooks": {"tool_call": [{"command": "x", "cwd": 3}]}}')
    done = run_cli("hooks", "test", "tool_call", "--workspace", str(workspace))
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == f"hookbus: error: {workspace / 'hooks.json'}: hooks.tool_call[0].cwd: expected `str | null`, got `int`"
    )
