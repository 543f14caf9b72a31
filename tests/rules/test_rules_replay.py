"""``hookbus replay --rules``: a rule file back-tested on recorded history, exiting 1 when a decision would change."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from tests.cli.test_cli import UpProcess
from tests.conftest import run_cli
from tests.services.test_replay import record_calls

RULES = """
rules:
  - name: no-rm
    stage: tool
    match: shell
    if: 'payload.input.command.startsWith("rm -rf")'
    then: {cancel: "rm -rf only by hand"}
  - name: no-curl
    stage: tool
    if: 'payload.input.command.contains("curl")'
    then: {cancel: "no curl"}
"""
#: Only the old guard's decision: curl cancelled, the rest continue.
SAME = """
rules:
  - name: no-curl
    stage: tool
    if: 'payload.input.command.contains("curl")'
    then: {cancel: "no curl"}
  - name: watch-rm
    stage: tool
    if: 'payload.input.command.contains("rm")'
    then: cancel
    mode: shadow
"""


async def test_replay_finds_exactly_the_calls_a_rule_file_changes(
    recorded: UpProcess, workspace: Path, tmp_path: Path
) -> None:
    await record_calls(recorded.nats_url, workspace)
    changed, same = tmp_path / "guards.yaml", tmp_path / "same.yaml"
    changed.write_text(RULES)
    same.write_text(SAME)
    common = ("--since", "7d", "--stage", "tool.call", "--workspace", str(workspace), "--nats-url", recorded.nats_url)
    done = await asyncio.to_thread(run_cli, "replay", "--rules", str(changed), *common, "--json", timeout=120)
    assert done.returncode == 1, done.stderr  # a decision would change: the CI check fails
    report = orjson.loads(done.stdout)
    assert report["calls"] == 4 and report["differing"] == 1
    differing = [(call["payload"]["input"]["command"], call["recorded"], call["replayed"], call["replayed_why"])
                 for call in report["first_differing"]]  # fmt: skip
    assert differing == [("rm -rf /srv/data", "continue", "cancel", "rm -rf only by hand")]
    kept = await asyncio.to_thread(run_cli, "replay", "--rules", str(same), *common, timeout=120)
    assert kept.returncode == 0, kept.stdout + kept.stderr  # a shadow rule changes no decision
    assert "4 recorded calls of tool.call; 0 decided differently" in kept.stdout
