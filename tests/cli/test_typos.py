"""No silent typo: each command that takes a stage or an event names what a misspelt one resembles, on
stderr, and keeps its exit code; valid names get no hint. Real processes, a real nats-server."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from subscribers.journal._store import DB_NAME, JournalStore
from tests.conftest import hookbus_cmd, run_cli


def test_intercept_names_the_stage_a_typo_resembles(nats_url: str) -> None:
    done = run_cli("intercept", "tool.cal", '{"name": "shell"}', "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert '"decision":"continue"' in done.stdout
    assert "'tool.cal' is no built-in or declared stage: did you mean tool.call?" in done.stderr
    fine = run_cli("intercept", "tool.call", '{"name": "shell"}', "--nats-url", nats_url)
    assert fine.returncode == 0 and "did you mean" not in fine.stderr
    free = run_cli("intercept", "acme.deploy", "{}", "--nats-url", nats_url)
    assert free.returncode == 0 and "did you mean" not in free.stderr  # a free stage name is legitimate


def test_chain_names_the_stage_a_typo_resembles(nats_url: str) -> None:
    done = run_cli("chain", "tool.reslt", "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert "did you mean tool.result?" in done.stderr


async def test_tail_names_the_event_a_typo_resembles_and_still_tails(nats_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *hookbus_cmd(), "tail", "tool_cal", "--nats-url", nats_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = []
        while not any(line.startswith("tailing") for line in lines):
            raw = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert raw, f"tail ended early: {lines}"
            lines.append(raw.decode().strip())
        assert "hookbus tail: 'tool_cal' matches no known event: did you mean prx.lifecycle.tool_call?" in lines
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert await asyncio.wait_for(proc.wait(), 60) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def test_hooks_test_names_the_event_a_typo_resembles(workspace: Path) -> None:
    (workspace / "hooks.json").write_text('{"hooks": {}}')
    done = run_cli("hooks", "test", "tool_cal", "{}", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert "did you mean prx.lifecycle.tool_call?" in done.stderr
    fine = run_cli("hooks", "test", "tool_call", "{}", "--workspace", str(workspace))
    assert "did you mean" not in fine.stderr


def test_journal_point_names_the_stage_or_event_a_typo_resembles(tmp_path: Path) -> None:
    JournalStore(tmp_path / DB_NAME).close()
    stage = run_cli("journal", "--point", "tool.cal", "--workspace", str(tmp_path))
    assert stage.returncode == 0, stage.stderr
    assert "did you mean tool.call?" in stage.stderr
    event = run_cli("journal", "--point", "prx.lifecycle.tool_cal", "--workspace", str(tmp_path))
    assert "did you mean prx.lifecycle.tool_call?" in event.stderr
    fine = run_cli("journal", "--point", "tool.call", "--workspace", str(tmp_path))
    assert "did you mean" not in fine.stderr


def test_triggers_test_names_the_trigger_and_the_subject_a_typo_resembles(workspace: Path) -> None:
    (workspace / "triggers.yaml").write_text(
        "triggers:\n  - {name: deploys, on: eva.custom.>, prompt: 'deploy of {payload.app}', agent: eva}\n"
    )
    named = run_cli("triggers", "test", "deploy", '{"app": "web"}', "--workspace", str(workspace))
    assert named.returncode == 1 and "did you mean deploys?" in named.stderr
    subject = run_cli(
        "triggers", "test", "deploys", '{"app": "web"}', "--subject", "eva.custm.deploy", "--workspace", str(workspace)
    )
    assert "did you mean eva.custom.deploy?" in subject.stderr


def test_emit_warns_of_a_wrongly_typed_payload_and_strict_refuses_it(nats_url: str) -> None:
    payload = '{"tool": 1, "success": "yes"}'
    done = run_cli("emit", "prx.lifecycle.tool_call", payload, "--nats-url", nats_url)
    assert done.returncode == 0, done.stderr
    assert "hookbus emit: warning:" in done.stderr and "--strict refuses it" in done.stderr
    strict = run_cli("emit", "prx.lifecycle.tool_call", payload, "--strict", "--nats-url", nats_url)
    assert strict.returncode != 0
    fine = run_cli("emit", "prx.lifecycle.tool_call", '{"tool": "shell", "success": true, "output": ""}',
                   "--nats-url", nats_url)  # fmt: skip
    assert fine.returncode == 0 and "warning" not in fine.stderr, fine.stderr
