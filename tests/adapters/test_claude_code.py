"""``hookbus claude-hook``: Claude Code's hook inputs, as its hook documentation describes them, against a real bus.

The inputs are written here in the shapes Claude Code documents (common
fields ``session_id``, ``transcript_path``, ``cwd``, ``permission_mode``,
``hook_event_name``; per event ``tool_name``/``tool_input``/``tool_use_id``,
``tool_response``, ``prompt``, ``source``, ``reason``, ``trigger``). Each
runs the real command as a process, through the relay of ``hookbus up``
(in-process here), through its own client when no relay serves, and with no
bus at all (the fail mode).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus import Bus, Cancel, Continue, Decision, Module, NatsServer, Patch
from bus.adapters._errors import AgentHookError
from bus.adapters._subjects import adapter_subject
from bus.adapters.claude_code._mapping import parse, plan
from bus.adapters.claude_code.relay import Relay
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.conftest import run_cli, unique
from tests.support.waiting import barrier, without_barriers

SESSION = "0b7c1f9e-5d6a-4c1b-9a57-claude"


def hook_input(event: str, **fields: Any) -> dict[str, Any]:
    """A hook input with Claude Code's common fields."""
    return {
        "session_id": SESSION,
        "transcript_path": "/home/dev/.claude/projects/demo/session.jsonl",
        "cwd": "/home/dev/demo",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def bash(command: str) -> dict[str, Any]:
    return hook_input(
        "PreToolUse",
        tool_name="Bash",
        tool_input={"command": command, "description": "run it"},
        tool_use_id="toolu_01",
    )


def guard(name: str) -> Module:
    """A fail-closed guard: no ``rm -rf``, ``ls`` becomes ``ls -la``, no prompt with a secret in it."""
    module = Module(name)

    @module.stage("tool.call", fail_closed=True)
    async def no_rm(stage: str, payload: dict[str, Any]) -> Decision:
        command = str(payload.get("input", {}).get("command", ""))
        if "rm -rf" in command:
            return Cancel("only by hand")
        if command == "ls":
            return Patch({**payload, "input": {**payload["input"], "command": "ls -la"}})
        return Continue()

    @module.stage("user.message")
    async def no_secret(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("no secrets in prompts") if "sk-" in payload.get("content", "") else Continue()

    @module.stage("tool.result")
    async def hide_tokens(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("a token in the output") if "ghp_" in payload.get("output", "") else Continue()

    return module


@pytest.fixture
async def guarded(nats_url: str) -> AsyncIterator[str]:
    """A guard module served and trusted (first sight, by a trust_new kernel); yields its name."""
    name = unique("ccguard")
    async with serving(guard(name), nats_url, detach_on_stop=True):
        async with Bus(nats_url, trust_new=True) as kernel:
            await wait_for_chain(kernel, "tool.call", [f"{name}.no_rm"])
            await wait_for_chain(kernel, "user.message", [f"{name}.no_secret"])
            await wait_for_chain(kernel, "tool.result", [f"{name}.hide_tokens"])
        yield name


@pytest.fixture
async def relay(nats_url: str, guarded: str) -> AsyncIterator[Bus]:
    """The relay ``hookbus up`` runs, on a Bus of its own; yields that Bus."""
    async with Bus(nats_url, name="relay") as bus:
        started = Relay(bus)
        await started.start()
        await wait_for_chain(bus, "tool.call", [f"{guarded}.no_rm"])
        try:
            yield bus
        finally:
            await started.stop()


def env_for(url: str, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    return {**env, "NATS_URL": url, "XDG_STATE_HOME": str(state)}


async def run_hook(command: str, payload: Any, env: dict[str, str], *args: str) -> tuple[int, Any, str]:
    """Run ``hookbus <command>`` (a one-shot hook) on ``payload``: (exit code, its JSON output or None, stderr)."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    done = await asyncio.to_thread(run_cli, command, *args, env=env, input=text)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


async def claude_hook(payload: Any, env: dict[str, str], *args: str) -> tuple[int, Any, str]:
    return await run_hook("claude-hook", payload, env, *args)


def denial(output: Any) -> str:
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse" and specific["permissionDecision"] == "deny"
    return str(specific["permissionDecisionReason"])


async def test_a_guarded_call_is_denied_with_the_reason_and_a_patch_is_the_updated_input(
    nats_url: str, relay: Bus, guarded: str, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    code, output, _ = await claude_hook(bash("rm -rf /"), env)
    assert code == 0 and denial(output) == f"hookbus ({guarded}.no_rm): only by hand"

    code, output, _ = await claude_hook(bash("ls"), env)
    assert code == 0
    assert output == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "updatedInput": {"command": "ls -la", "description": "run it"},
        }
    }
    code, output, stderr = await claude_hook(bash("pwd"), env)
    assert (code, output, stderr) == (0, None, ""), "a call the guards pass is left to Claude Code's own flow"

    state = json.loads((tmp_path / "hookbus" / "agent-guards.json").read_text())
    assert state[nats_url]["tool.call"] == [f"{guarded}.no_rm"], "the fail-closed guard is remembered"


async def test_session_events_reach_the_bus_with_session_and_cwd(nats_url: str, relay: Bus, tmp_path: Path) -> None:
    recorder = EventRecorder()
    await relay.subscribe("prx.lifecycle.>", recorder)
    await relay.subscribe("eva.custom.pre_compact", recorder)
    await relay.flush()
    env = env_for(nats_url, tmp_path)
    inputs = [
        hook_input("SessionStart", source="startup"),
        bash("pwd"),
        bash("rm -rf /"),  # refused: no tool_call_start for it
        hook_input(
            "PostToolUse",
            tool_name="Bash",
            tool_input={"command": "pwd"},
            tool_response={"stdout": "/home/dev/demo", "stderr": "", "interrupted": False},
            tool_use_id="toolu_01",
        ),
        hook_input("PreCompact", trigger="auto", custom_instructions=""),
        hook_input("Stop", stop_hook_active=False),
        hook_input("SessionEnd", reason="logout"),
    ]
    for one in inputs:
        code, _, stderr = await claude_hook(one, env)
        assert code == 0, stderr
    await barrier(relay, "prx.lifecycle.error", recorder)
    events = without_barriers(recorder.events)
    assert [event.subject for event in events] == [
        "prx.lifecycle.agent_start",
        "prx.lifecycle.tool_call_start",
        "prx.lifecycle.tool_call",
        "eva.custom.pre_compact",
        "prx.lifecycle.turn_complete",
        "prx.lifecycle.agent_end",
    ]
    assert {event.session_id for event in events} == {SESSION}
    assert all(event.payload["cwd"] == "/home/dev/demo" for event in events)
    start, call_start, call = events[0].payload, events[1].payload, events[2].payload
    assert start["agent"] == "claude-code" and start["source"] == "startup"
    assert call_start["tool"] == "Bash" and call_start["arguments"]["command"] == "pwd"
    assert call["success"] is True and orjson.loads(call["output"])["stdout"] == "/home/dev/demo"
    assert events[3].payload["trigger"] == "auto" and events[5].payload["reason"] == "logout"


async def test_results_and_prompts_go_through_their_stages(nats_url: str, relay: Bus, tmp_path: Path) -> None:
    env = env_for(nats_url, tmp_path)
    code, output, _ = await claude_hook(hook_input("UserPromptSubmit", prompt="use sk-live-123 to deploy"), env)
    assert code == 0 and output["decision"] == "block" and output["reason"].endswith("no secrets in prompts")
    code, output, _ = await claude_hook(hook_input("UserPromptSubmit", prompt="deploy it"), env)
    assert (code, output) == (0, None)
    result = hook_input(
        "PostToolUse", tool_name="Bash", tool_input={"command": "env"}, tool_response={"stdout": "T=ghp_abc"}
    )
    code, output, _ = await claude_hook(result, env)
    assert code == 0 and output["decision"] == "block" and output["reason"].endswith("a token in the output")


async def test_without_a_relay_the_command_decides_on_its_own_connection(
    nats_url: str, guarded: str, tmp_path: Path
) -> None:
    code, output, _ = await claude_hook(bash("rm -rf ~"), env_for(nats_url, tmp_path))
    assert code == 0 and denial(output) == f"hookbus ({guarded}.no_rm): only by hand"


async def test_an_unreachable_bus_refuses_what_a_fail_closed_guard_held_and_lets_the_rest_go(
    own_server: NatsServer, tmp_path: Path
) -> None:
    name = unique("ccguard")
    env = env_for(own_server.url, tmp_path)
    async with serving(guard(name), own_server.url, detach_on_stop=True), Bus(own_server.url, trust_new=True) as bus:
        relay = Relay(bus)
        await relay.start()
        await wait_for_chain(bus, "tool.call", [f"{name}.no_rm"])
        assert (await claude_hook(bash("pwd"), env))[0] == 0  # the guards in force are remembered
        await relay.stop()
    own_server.stop()

    code, output, _ = await claude_hook(bash("pwd"), env)
    reason = denial(output)
    assert code == 0 and reason.startswith(f"hookbus: {name}.no_rm is fail-closed and the bus cannot be reached")
    code, output, stderr = await claude_hook(hook_input("UserPromptSubmit", prompt="hi"), env)
    assert code == 1 and output is None, "user.message has no fail-closed guard: a non-blocking error"
    assert "user.message continues (no fail-closed guard known)" in stderr
    code, output, _ = await claude_hook(hook_input("UserPromptSubmit", prompt="hi"), env, "--fail-closed")
    assert code == 0 and output["decision"] == "block" and "(--fail-closed)" in output["reason"]
    code, output, stderr = await claude_hook(hook_input("SessionStart", source="startup"), env)
    assert code == 1 and "SessionStart not sent" in stderr


async def test_malformed_inputs_are_named_and_never_run(nats_url: str, relay: Bus, tmp_path: Path) -> None:
    env = env_for(nats_url, tmp_path)
    for payload, named in [
        ("not json", "the hook input is not valid JSON"),
        ({**bash("ls"), "tool_input": "ls"}, "the hook input: field 'tool_input': expected `object | null`, got `str`"),
    ]:
        code, output, stderr = await claude_hook(payload, env)
        assert code == 1 and output is None and named in stderr, (payload, stderr)
    for payload, named in [  # the same checks, without a process each
        ("[1]", "the hook input must be a JSON object, not array"),
        ({"session_id": SESSION}, "the hook input: field 'hook_event_name' is required"),
        (hook_input("PreToolUse", tool_input={}), "PreToolUse needs 'tool_name'"),
    ]:
        with pytest.raises(AgentHookError, match=re.escape(named)):
            plan(parse(payload if isinstance(payload, str) else json.dumps(payload)), "claude-code")
    # the relay checks what it receives too: a hostile request gets an error naming the field
    for request, named in [
        (b"{}", "adapter request: field 'input' is required"),
        (orjson.dumps({"input": bash("ls"), "depth": 8}), "field 'depth'"),
        (orjson.dumps({"input": {"hook_event_name": 5}}), "field 'hook_event_name'"),
    ]:
        reply = orjson.loads(await relay.port.request_raw(adapter_subject("claude-code"), request, 5.0))
        assert named in reply["error"], (request, reply)


def test_the_hook_command_loads_no_nats_client_nor_event_loop(nats_url: str) -> None:
    script = (
        "import sys\nfrom bus._cli import agent_hook\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nats', 'aiohttp', 'asyncio', 'tenacity')))\n"
    )
    done = run_cli_python(script)
    assert done == "[]"


def run_cli_python(script: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_install_prints_the_hooks_and_merges_into_settings(tmp_path: Path) -> None:
    done = run_cli("claude-hook", "install", "--nats-url", "nats://10.0.0.5:4222")
    assert done.returncode == 0, done.stderr
    hooks = json.loads(done.stdout)["hooks"]
    assert list(hooks) == [
        "PreToolUse",
        "PostToolUse",
        "UserPromptSubmit",
        "SessionStart",
        "SessionEnd",
        "Stop",
        "PreCompact",
    ]
    [group] = hooks["PreToolUse"]
    assert group["matcher"] == "*" and "matcher" not in hooks["Stop"][0]
    [hook] = group["hooks"]
    assert hook["type"] == "command" and hook["timeout"] == 30
    assert hook["command"].endswith(" claude-hook --nats-url nats://10.0.0.5:4222")

    settings = tmp_path / "settings.json"
    mine = {"type": "command", "command": "python3 .claude/hooks/check.py", "timeout": 5}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [mine]}]}}))
    for _ in range(2):  # a second install replaces the first
        done = run_cli(
            "claude-hook", "install", "--settings", str(settings), "--http", "http://127.0.0.1:8477",
            "--agent", "eva", "--workspace", str(tmp_path / "ws"),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"HOOKBUS_HOOK_TOKEN=$(cat {tmp_path / 'ws' / 'hook-tokens' / 'eva'})" in done.stderr
    merged = json.loads(settings.read_text())
    assert merged["model"] == "opus"
    assert merged["hooks"]["PreToolUse"][0] == {"matcher": "Bash", "hooks": [mine]}
    [ours] = merged["hooks"]["PreToolUse"][1]["hooks"]
    assert ours["type"] == "http" and ours["url"] == "http://127.0.0.1:8477/hooks/claude-code"
    assert ours["headers"] == {"Authorization": "Bearer $HOOKBUS_HOOK_TOKEN"}
    assert ours["allowedEnvVars"] == ["HOOKBUS_HOOK_TOKEN"]
    assert len(merged["hooks"]["Stop"]) == 1

    settings.write_text('{"hooks": []}')
    done = run_cli("claude-hook", "install", "--settings", str(settings))
    assert done.returncode == 1 and "'hooks' must be an object, not array" in done.stderr
