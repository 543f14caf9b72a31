"""``hookbus rules test`` locally, and ``hookbus up`` pushing a workspace's rules/*.yaml, as real processes."""

from __future__ import annotations

from pathlib import Path

import orjson

from bus import Bus, Cancel, Continue
from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli
from tests.support.waiting import wait_until

GUARDS = """
rules:
  - name: no-rm
    stage: tool
    match: shell
    if: 'payload.input.command.contains("rm -rf")'
    then: {cancel: "no rm -rf for {{ ctx.agent }}"}
  - name: trial-tokens
    stage: inference
    when: {users: ["trial-*"]}
    if: 'size(payload.messages) > 2'
    then: {patch: {set: {max_tokens: 100}}}
"""


def test_rules_test_runs_a_file_without_a_bus(tmp_path: Path) -> None:
    path = tmp_path / "guards.yaml"
    path.write_text(GUARDS)
    call = orjson.dumps({"name": "shell", "input": {"command": "rm -rf /"}}).decode()
    done = run_cli("rules", "test", str(path), "tool", call, "--agent", "eva", env={"NATS_URL": "nats://127.0.0.1:1"})
    assert done.returncode == 0, done.stderr
    assert "guards.no-rm: if -> true: cancel: no rm -rf for eva" in done.stdout
    assert done.stdout.rstrip().endswith("decision: cancel")
    request = orjson.dumps({"messages": [1, 2, 3]}).decode()
    trial = run_cli("rules", "test", str(path), "inference", request, "--user", "trial-7")
    assert "decision: patch" in trial.stdout and '"max_tokens":100' in trial.stdout, trial.stdout
    paid = run_cli("rules", "test", str(path), "inference", request, "--user", "paid-1")
    assert "decision: continue" in paid.stdout, paid.stdout


def test_rules_test_refuses_a_broken_file_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("rules:\n  - name: x\n    stage: tool\n    if: 'payload.name == '\n")
    done = run_cli("rules", "test", str(path), "tool", "{}")
    assert done.returncode != 0
    assert f"{path}:4:" in done.stderr and "Syntax error" in done.stderr, done.stderr


async def test_up_pushes_the_workspaces_rules(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "rules").mkdir(parents=True)
    (workspace / "rules" / "guards.yaml").write_text(GUARDS)
    (workspace / "rules" / "broken.yaml").write_text("rules:\n  - name: x\n    stage: tool\n    if: 'nope'\n")
    up = UpProcess(workspace)
    try:
        assert any("rules" in line and "1 file(s), 2 rule(s) pushed" in line for line in up.lines), up.lines
        async with Bus(up.nats_url, trust_new=True) as bus:
            view = await bus.middleware.start()
            await view.wait_until(lambda: "tool.call" in view.chains and bool(view.chains["tool.call"].links), 10)
            decision = await bus.intercept(
                "tool.call", {"name": "shell", "input": {"command": "rm -rf /"}}, {"agent": "a"}
            )
            assert isinstance(decision, Cancel) and decision.reason == "no rm -rf for a"
            assert "broken" not in view.rules.book.files
        up.stop()
        assert "broken.yaml:4:" in up.stderr, up.stderr  # refused with its file and line, never pushed
    finally:
        up.close()


async def test_shadow_report_counts_what_a_shadow_rule_would_have_done(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rules = tmp_path / "watch.yaml"
    rules.write_text(
        "rules:\n  - name: force\n    stage: tool\n    if: 'payload.input.command.contains(\"--force\")'\n"
        "    then: cancel\n    reason: force-push\n    mode: shadow\n"
    )
    up = UpProcess(workspace)
    try:
        async with Bus(up.nats_url, rules=[rules]) as agent:
            for command in ("git push --force", "git status", "git push --force origin main"):
                call = {"name": "shell", "input": {"command": command}}
                assert await agent.intercept("tool.call", call, {"agent": "eva", "session": "s9"}) == Continue()

        def reported() -> str:
            done = run_cli("rules", "shadow-report", "watch.force", "--since", "1h", "--workspace", str(workspace))
            assert done.returncode == 0, done.stderr
            return done.stdout

        await wait_until(lambda: "2 calls would have changed" in reported(), what="the shadow entries stored")
        text = reported()
        assert "would_cancel: 2" in text and "agent=eva session=s9" in text and "force-push" in text
    finally:
        up.close()
