"""``hookbus codex-hook``: Codex's hook inputs, in the shapes its hook documentation and input schemas describe
(Claude Code's fields plus ``turn_id`` and ``model``), answered in the output Codex accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from bus import Bus, Cancel, Continue, Patch
from bus.adapters.claude_code import _codex as codex
from bus.adapters.claude_code._mapping import Step, parse
from bus.testing import EventRecorder
from tests.adapters import test_claude_code as claude
from tests.adapters.test_claude_code import denial, env_for, run_hook
from tests.conftest import run_cli

#: The guard module and the relay of tests/adapters/test_claude_code.py, shared.
guarded, relay = claude.guarded, claude.relay

SESSION = "019a2c4e-codex-session"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"


def schema(name: str) -> dict[str, Any]:
    """One of Codex's generated hook schemas (tests/fixtures/codex/README.md says from where)."""
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.schema.json").read_text())
    return loaded


SECRETS = "no secrets in prompts"


def codex_input(event: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "turn_id": "turn-7",
        "transcript_path": None,
        "cwd": "/srv/app",
        "hook_event_name": event,
        "model": "gpt-5-codex",
        "permission_mode": "default",
        **fields,
    }


def shell(command: str) -> dict[str, Any]:
    return codex_input("PreToolUse", tool_name="Bash", tool_input={"command": command}, tool_use_id="call_1")


async def codex_hook(payload: Any, env: dict[str, str]) -> tuple[int, Any, str]:
    return await run_hook("codex-hook", payload, env)


async def test_codex_calls_are_denied_and_a_changed_input_is_applied_with_allow(
    nats_url: str, relay: Bus, guarded: str, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    pre_output = schema("pre-tool-use.command.output")
    code, output, _ = await codex_hook(shell("rm -rf /srv"), env)
    assert code == 0 and denial(output) == f"hookbus ({guarded}.no_rm): only by hand"
    assert set(output) == {"hookSpecificOutput"}, "Codex fails a hook whose output has fields it does not know"
    jsonschema.validate(output, pre_output)
    code, output, _ = await codex_hook(shell("ls"), env)
    assert code == 0
    # Codex applies updatedInput, and only beside permissionDecision "allow" (else the hook fails, the call runs)
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": {"command": "ls -la"},
        }
    }
    jsonschema.validate(output, pre_output)
    code, output, stderr = await codex_hook(shell("pwd"), env)
    assert (code, output, stderr) == (0, None, ""), "allowed: no output, Codex's own approval flow applies"
    code, output, _ = await codex_hook(codex_input("UserPromptSubmit", prompt="key sk-123"), env)
    assert code == 0 and output == {
        "decision": "block",
        "reason": f"hookbus ({guarded}.no_secret): no secrets in prompts",
    }


def test_codex_install_configures_the_events_codex_documents(tmp_path: Path) -> None:
    done = run_cli("codex-hook", "install", "--fail-closed")
    assert done.returncode == 0, done.stderr
    hooks = json.loads(done.stdout)["hooks"]
    assert list(hooks) == list(codex.INSTALLED_EVENTS)
    assert hooks["PreToolUse"][0]["hooks"][0]["command"].endswith(" codex-hook --fail-closed")
    done = run_cli("codex-hook", "install", "--http", "http://127.0.0.1:8477")
    assert done.returncode == 1 and "Codex has no http hook type" in done.stderr


def permission_request(command: str) -> dict[str, Any]:
    payload = codex_input("PermissionRequest", tool_name="Bash", tool_input={"command": command})
    jsonschema.validate(payload, schema("permission-request.command.input"))
    return payload


async def test_a_permission_request_runs_the_call_chain_and_answers_in_codex_s_decision_form(
    nats_url: str, relay: Bus, guarded: str, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    out_schema = schema("permission-request.command.output")
    code, output, _ = await codex_hook(permission_request("rm -rf /srv"), env)
    assert code == 0
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": f"hookbus ({guarded}.no_rm): only by hand"},
        }
    }
    jsonschema.validate(output, out_schema)
    # Codex reserves updatedInput on PermissionRequest (and fails the hook on it): a changed input is refused
    code, output, _ = await codex_hook(permission_request("ls"), env)
    assert code == 0 and output["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert '"ls -la"' in output["hookSpecificOutput"]["decision"]["message"]
    jsonschema.validate(output, out_schema)
    code, output, stderr = await codex_hook(permission_request("pwd"), env)
    assert (code, output, stderr) == (0, None, ""), "no decision: Codex asks its user as usual"


async def test_codex_s_own_events_reach_the_bus(nats_url: str, relay: Bus, tmp_path: Path) -> None:
    recorder = EventRecorder()
    await relay.subscribe("prx.lifecycle.>", recorder)
    await relay.subscribe("eva.custom.post_compact", recorder)
    await relay.flush()
    env = env_for(nats_url, tmp_path)
    inputs = [
        (codex_input("PostCompact", trigger="auto"), "post-compact"),
        (
            codex_input("SubagentStart", agent_id="agent-2", agent_type="explorer"),
            "subagent-start",
        ),
        (
            codex_input("StopFailure", error="rate_limit", error_details="429", last_assistant_message=None),
            "stop-failure",
        ),
    ]
    del inputs[0][0]["permission_mode"]  # PostCompact's input has none
    for payload, name in inputs:
        jsonschema.validate(payload, schema(f"{name}.command.input"))
        code, output, stderr = await codex_hook(payload, env)
        assert (code, output) == (0, None), stderr
    await claude.barrier(relay, "prx.lifecycle.error", recorder)
    events = claude.without_barriers(recorder.events)
    assert [event.subject for event in events] == [
        "eva.custom.post_compact",
        "prx.lifecycle.agent_start",
        "prx.lifecycle.turn_complete",
    ]
    assert {event.session_id for event in events} == {SESSION}
    compact, sub, failed = (event.payload for event in events)
    assert compact["trigger"] == "auto" and compact["agent"] == "codex"
    assert sub["subagent"] == "agent-2" and sub["agent_type"] == "explorer"
    assert failed["success"] is False and failed["error"] == "rate_limit" and failed["error_details"] == "429"


def test_a_decision_codex_cannot_write_is_a_refusal_never_a_pass() -> None:
    """``ask`` (or any decision beyond continue/cancel/patch): Codex refuses ask and runs the tool, so refuse."""

    class Ask:  # the shape an ask/defer decision takes: not one Codex has an output for
        reason = "please confirm"

    dialect = codex.CodexDialect()
    step = dialect.plan(parse(shell("git push --force")))
    answer = dialect.answer(step, Ask())  # type: ignore[arg-type]
    assert denial(answer.output).startswith("hookbus: a guard asked for 'ask'")
    jsonschema.validate(answer.output, schema("pre-tool-use.command.output"))
    assert dialect.answer(step, Continue()).output is None
    assert dialect.answer(Step("Stop"), Cancel("x")).output is None, "no stage: nothing to refuse"
    patched = dialect.answer(step, Patch({**step.payload, "result": "done"}))
    assert denial(patched.output).startswith("hookbus answered without running the tool")


CASES = json.loads((FIXTURES / "matcher-cases.json").read_text())


@pytest.mark.parametrize("case", CASES["matches"], ids=lambda c: f"{c['test']}:{c['matcher']}:{c['input']}")
def test_codex_s_own_matcher_cases(case: dict[str, Any]) -> None:
    assert codex.matches(case["matcher"], case["input"]) is case["matches"]
    if "valid" in case:
        assert codex.valid_matcher(case["matcher"]) is case["valid"]


@pytest.mark.parametrize("case", CASES["events"], ids=lambda c: f"{c['event']}:{c['matcher']}")
def test_codex_s_events_with_and_without_matchers(case: dict[str, Any]) -> None:
    assert codex.matcher_for(case["event"], case["matcher"]) == case["pattern"]


def test_the_trust_hash_is_codex_s_over_the_normalized_identity() -> None:
    """codex-rs discovery.rs ``command_hook_hash``: sha256 of the identity as sorted compact JSON (fingerprint.rs)."""
    import hashlib

    command = "/usr/local/bin/hookbus codex-hook"
    text = (
        '{"event_name":"pre_tool_use","hooks":[{"async":false,"command":"/usr/local/bin/hookbus codex-hook",'
        '"timeout":30,"type":"command"}],"matcher":"*"}'
    )
    assert codex.hook_hash("PreToolUse", command, 30, "*") == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    # the matcher of an event Codex does not match on is not part of it; an unset timeout is Codex's 600
    text = '{"event_name":"stop","hooks":[{"async":false,"command":"x","timeout":600,"type":"command"}]}'
    assert codex.hook_hash("Stop", "x", None, "^done$") == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert codex.hook_key("/h/.codex/hooks.json", "UserPromptSubmit", 1, 0) == (
        "/h/.codex/hooks.json:user_prompt_submit:1:0"
    )


def test_install_names_the_trust_codex_needs_for_each_hookbus_hook(tmp_path: Path) -> None:
    """An untrusted or modified hook is skipped by Codex: install says what to trust, hash by hash."""
    hooks_file = tmp_path / "hooks.json"
    theirs = {"type": "command", "command": "python3 ~/.codex/hooks/log.py", "timeout": 5}
    hooks_file.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [theirs]}]}}))
    done = run_cli("codex-hook", "install", "--settings", str(hooks_file))
    assert done.returncode == 0, done.stderr
    written = orjson.loads(hooks_file.read_bytes())["hooks"]
    entries = dict(re.findall(r'\[hooks\.state\."([^"]+)"\]\ntrusted_hash = "(sha256:[0-9a-f]{64})"', done.stderr))
    assert len(entries) == len(codex.INSTALLED_EVENTS)
    ours = written["PreToolUse"][1]
    key = codex.hook_key(str(hooks_file.resolve()), "PreToolUse", 1, 0)
    assert entries[key] == codex.hook_hash("PreToolUse", ours["hooks"][0]["command"], 30, ours.get("matcher"))
    assert not any(":pre_tool_use:0:" in k for k in entries), "the user's own hook is theirs to trust"
