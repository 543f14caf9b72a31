"""The hookbus CLI, end to end, as real processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bus import Bus
from bus.testing import EventRecorder
from tests.conftest import hookbus_cmd, run_cli


class UpProcess:
    """`hookbus up` running as a child process, with what it printed."""

    def __init__(self, workspace: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *hookbus_cmd(),
                "up",
                "--workspace",
                str(workspace),
                "--port",
                "0",
                "--metrics-port",
                "0",
                "--http-port",
                "0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "NATS_URL"},
        )
        self.lines: list[str] = []
        self.stderr = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("ready"):
                break
        else:
            raise AssertionError(
                f"hookbus up did not get ready: {self.lines} {self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        text = "\n".join(self.lines)
        self.nats_url = re.search(r"nats\s+(nats://\S+)", text).group(1)  # type: ignore[union-attr]
        self.metrics_url = re.search(r"metrics\s+(http://\S+)", text).group(1)  # type: ignore[union-attr]

    def stop(self) -> tuple[int, str]:
        """SIGTERM, wait; the exit code and what it printed (its log lines are kept in ``stderr``)."""
        self.proc.send_signal(signal.SIGTERM)
        out, self.stderr = self.proc.communicate(timeout=20)
        return self.proc.returncode, out

    def close(self) -> None:
        """Stop it if still running (SIGTERM, so it stops its nats-server too) and close its pipes."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.communicate(timeout=20)


@pytest.fixture
def up(workspace: Path) -> Iterator[UpProcess]:
    process = UpProcess(workspace)
    try:
        yield process
    finally:
        process.close()


def children_named(parent: int, name: str) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", name], capture_output=True, text=True, check=False).stdout
    return {int(pid) for pid in out.split()}


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


async def test_up_emit_tail_end_to_end(up: UpProcess, workspace: Path) -> None:
    assert (workspace / "jetstream").is_dir()
    env = {**os.environ, "NATS_URL": up.nats_url}
    tail = subprocess.Popen(
        [*hookbus_cmd(), "tail", "prx.*", "--count", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    tail_json = subprocess.Popen(
        [*hookbus_cmd(), "tail", "--json", "--count", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for proc in (tail, tail_json):  # wait until each tail says it is subscribed
            assert proc.stderr is not None
            await asyncio.to_thread(proc.stderr.readline)
        done = await asyncio.to_thread(
            run_cli,
            "emit",
            "tool_call",
            '{"tool": "shell", "success": true, "output": "ok"}',
            "--session",
            "s1",
            env={"NATS_URL": up.nats_url},
        )
        assert done.returncode == 0, done.stderr
        done = await asyncio.to_thread(
            run_cli,
            "emit",
            "prx.lifecycle.error",
            env={"NATS_URL": up.nats_url},
            input='{"component": "c", "message": "m"}',
        )
        assert done.returncode == 0, done.stderr
        out, _ = await asyncio.to_thread(tail.communicate, timeout=20)
        lines = out.splitlines()
        assert len(lines) == 2
        assert "prx.lifecycle.tool_call depth=0 session=s1" in lines[0] and '"tool":"shell"' in lines[0]
        assert "prx.lifecycle.error" in lines[1]
        out_json, _ = await asyncio.to_thread(tail_json.communicate, timeout=20)
        envelope = orjson.loads(out_json.splitlines()[0])
        assert envelope["event"] == "tool_call" and envelope["payload"]["output"] == "ok"
        assert envelope["source"] == "hookbus-emit", "a person's events name the command, not 'unknown'"
    finally:
        for proc in (tail, tail_json):
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=20)


async def test_up_serves_metrics_and_stops_cleanly_on_sigterm(up: UpProcess) -> None:
    async with Bus(up.nats_url) as bus:
        rec = EventRecorder()
        await bus.subscribe(">", rec)
        await bus.flush()
        await bus.emit("eva.custom.ping", {})
        await rec.wait_for(1)
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(up.metrics_url, timeout=10).read().decode())
    assert "# TYPE hookbus_events_emitted_total counter" in body
    assert "hookbus_events_dropped_total" in body
    code, out = up.stop()
    assert code == 0
    assert "stopped" in out


def test_up_stops_its_nats_server(workspace: Path) -> None:
    up = UpProcess(workspace)
    try:
        [server] = children_named(up.proc.pid, "nats-server")
        assert alive(server)
        code, _ = up.stop()
        assert code == 0
        assert not alive(server)
    finally:
        up.close()


def test_up_reports_a_busy_port_in_one_line(up: UpProcess, tmp_path: Path) -> None:
    port = up.nats_url.rsplit(":", 1)[1]
    done = run_cli(
        "up", "--workspace", str(tmp_path / "other"), "--port", port, "--metrics-port", "-1", env={"NATS_URL": ""}
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"hookbus: error: port {port} on 127.0.0.1 is already in use: choose another")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_emit_errors_are_one_line() -> None:
    bad_json = run_cli("emit", "eva.custom.x", "{not json", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert bad_json.returncode == 1
    assert bad_json.stderr.strip().startswith("hookbus: error: the payload is not valid JSON")
    bad_subject = run_cli("emit", "eva.*", "{}", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert bad_subject.returncode == 1
    assert "invalid subject 'eva.*': wildcard" in bad_subject.stderr
    unreachable = run_cli(
        "emit", "eva.custom.x", "{}", "--connect-timeout", "0.2", env={"NATS_URL": "nats://127.0.0.1:1"}
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.count("\n") == 1 and "no NATS server at nats://127.0.0.1:1" in unreachable.stderr


def test_bad_flags_are_refused() -> None:
    done = run_cli("up", "--port", "70000")
    assert done.returncode == 1
    assert "--port 70000 is not a port number" in done.stderr


def test_events_lists_the_catalog() -> None:
    done = run_cli("events")
    assert done.returncode == 0
    assert "prx.lifecycle.tool_call" in done.stdout and "tool: string" in done.stdout
    assert "eva.spend.day" in done.stdout and "eva.custom.<name>" in done.stdout
    as_json = orjson.loads(run_cli("events", "--json").stdout)
    assert as_json["events"]["prx.lifecycle.llm_response"]["fields"]["duration_ms"] == "number"


def test_help_everywhere() -> None:
    for command in ([], ["up"], ["emit"], ["tail"], ["events"]):
        done = run_cli(*command, "--help")
        assert done.returncode == 0 and "usage: hookbus" in done.stdout


def test_tail_stops_on_sigint_even_when_started_with_it_ignored(nats_url: str) -> None:
    """A shell starts a background job with SIGINT ignored; the interrupt sent to the tail still ends it."""
    proc = subprocess.Popen(
        [*hookbus_cmd(), "tail", "--nats-url", nats_url],
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        while not proc.stderr.readline().startswith("tailing"):
            assert proc.poll() is None, "tail ended before it tailed"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=20)
