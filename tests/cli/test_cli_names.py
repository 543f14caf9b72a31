"""Names checked where they are typed: ``hookbus emit``, ``hookbus intercept``, hooks.json and triggers.yaml keys.

The refusals' exact lines are in tests/cli/test_cli_errors.py; here, what goes
through, what warns, and that a warning does not stop the work.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Continue, Module, Stage
from bus._core.catalog import check_emitted, suggest_event, warn_misspelt
from bus.testing import EventRecorder, serving, wait_for_chain
from subscribers.shell_hooks._hooks_config import parse_config
from tests.conftest import run_cli, unique
from triggers.engine import _config as triggers_config


async def test_any_sends_a_free_subject_and_strict_passes_a_good_payload(nats_url: str, bus: Bus) -> None:
    rec = EventRecorder()
    await bus.subscribe("acme.>", rec)
    await bus.subscribe("prx.lifecycle.tool_call", rec)
    await bus.flush()
    env = {"NATS_URL": nats_url}
    refused = await asyncio.to_thread(run_cli, "emit", "acme.build.done", "{}", env=env)
    assert refused.returncode == 1 and "not a catalogued event" in refused.stderr
    free = await asyncio.to_thread(run_cli, "emit", "acme.build.done", '{"n": 1}', "--any", env=env)
    good = '{"tool": "shell", "success": true, "output": "ok"}'
    strict = await asyncio.to_thread(run_cli, "emit", "tool_call", good, "--strict", env=env)
    assert (free.returncode, strict.returncode) == (0, 0), (free.stderr, strict.stderr)
    events = await rec.wait_for(2)
    assert sorted(e.subject for e in events) == ["acme.build.done", "prx.lifecycle.tool_call"]


def test_catalogued_and_family_names_pass() -> None:
    for subject in ("prx.lifecycle.tool_call", "eva.turn.completed", "eva.custom.deploy", "eva.skill.search.run"):
        check_emitted(subject)
    assert suggest_event("eva.deploy") is None  # nothing close: no guess offered


async def test_intercept_warns_on_a_stage_like_a_declared_one(nats_url: str) -> None:
    guard = Module(unique("guard"))

    @guard.stage(Stage.TOOL_CALL)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Continue:
        return Continue()

    async with Bus(nats_url, trust_new=True) as kernel, serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.no_rm"])
        done = await asyncio.to_thread(run_cli, "intercept", "tool_call", "{}", "--nats-url", nats_url)
    assert done.returncode == 0
    assert done.stdout.strip() == '{"decision":"continue"}'
    assert (
        "hookbus: WARNING: stage 'tool_call' has no handler, but 'tool.call' does: a typo? (the call continues)"
        in done.stderr.splitlines()
    )


def test_hooks_json_keys_that_look_misspelt_are_warned_about() -> None:
    data = b'{"hooks": {"tool.call": [{"command": "true"}], "acme.build.done": [{"command": "true"}]}}'
    config = parse_config(data, "hooks.json")
    assert len(config.entries) == 2  # a warning, not a refusal
    assert [w for w in config.warnings if "matches no known event" in w] == [
        "hooks.json: 'tool.call' matches no known event: did you mean prx.lifecycle.tool_call?"
    ]


def test_triggers_yaml_on_that_looks_misspelt_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "triggers.yaml"
    path.write_text(
        "triggers:\n"
        "  - {name: late, on: eva.turn.complete, prompt: hi, agent: eva}\n"
        "  - {name: fine, on: eva.turn.completed, prompt: hi, agent: eva}\n"
        "  - {name: mine, on: acme.build.done, prompt: hi, agent: eva}\n"
    )
    with caplog.at_level(logging.WARNING, logger="hookbus.catalog"):
        specs = triggers_config.load(path)
    assert sorted(specs) == ["fine", "late", "mine"]
    assert [r.getMessage() for r in caplog.records if r.name == "hookbus.catalog"] == [
        f"{path}: trigger 'late': field 'on': 'eva.turn.complete' matches no known event: "
        "did you mean eva.turn.completed?"
    ]


def test_warn_misspelt_leaves_patterns_and_other_domains_alone() -> None:
    said: list[str] = []
    for key in ("prx.lifecycle.*", "eva.>", "acme.tool.call", "tool_call", "eva.custom.x", "_INBOX.x"):
        warn_misspelt(key, "here", said)
    assert said == []
    warn_misspelt("tool_calls", "here", said)
    assert said == ["here: 'tool_calls' matches no known event: did you mean prx.lifecycle.tool_call?"]
