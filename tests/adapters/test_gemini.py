"""``hookbus gemini-hook``: Gemini CLI's hook inputs as its hooks reference describes them, answered in its output.

Each input runs the real command as a process through the relay of ``hookbus
up`` (in-process here). tests/fixtures/gemini/README.md says where the shapes
come from.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bus import Bus, Cancel, Continue, Decision, Module, Patch
from bus.adapters.claude_code import _gemini as gemini
from bus.adapters.claude_code._mapping import parse
from bus.adapters.claude_code.relay import Relay
from bus.testing import EventRecorder, serving, wait_for_chain
from tests.adapters.test_claude_code import env_for, guarded, run_hook
from tests.conftest import run_cli, unique
from tests.support.waiting import barrier, without_barriers

__all__ = ["guarded"]  # the fixture, shared

SESSION = "gemini-session-0c9a"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "gemini"


def gemini_input(event: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "transcript_path": "/home/dev/.gemini/tmp/demo/chats/session.json",
        "cwd": "/home/dev/demo",
        "hook_event_name": event,
        "timestamp": "2026-12-01T21:00:00.000Z",
        **fields,
    }


def shell(command: str) -> dict[str, Any]:
    return gemini_input("BeforeTool", tool_name="run_shell_command", tool_input={"command": command})


def llm_request(text: str, model: str = "gemini-2.5-pro") -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}],
        "config": {"temperature": 1.0, "maxOutputTokens": 1024},
        "toolConfig": {"mode": "AUTO", "allowedFunctionNames": ["read_file", "run_shell_command"]},
    }


def llm_response(text: str) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": [text]}, "finishReason": "STOP"}],
        "usageMetadata": {"totalTokenCount": 42},
    }


def model_guard(name: str) -> Module:
    """llm.request: no model 'gemini-blocked', 'cooler' lowers the temperature, 'canned' is answered here;
    assistant.message: an answer with an SSN in it is redacted."""
    module = Module(name)

    @module.stage("llm.request", fail_closed=True)
    async def model_policy(stage: str, payload: dict[str, Any]) -> Decision:
        last = str(payload["messages"][-1]["content"]) if payload.get("messages") else ""
        if payload.get("model") == "gemini-blocked":
            return Cancel("that model is not allowed")
        if "canned" in last:
            return Patch({**payload, "result": "a canned answer"})
        if "cooler" in last:
            return Patch({**payload, "temperature": 0.2})
        return Continue()

    @module.stage("assistant.message")
    async def redact(stage: str, payload: dict[str, Any]) -> Decision:
        if "123-45-6789" in payload.get("content", ""):
            return Patch({**payload, "answer": payload["content"].replace("123-45-6789", "[redacted]")})
        return Continue()

    return module


@pytest.fixture
async def relay(nats_url: str, guarded: str) -> AsyncIterator[Bus]:
    name = unique("gmguard")
    guard_served = serving(model_guard(name), nats_url, detach_on_stop=True)
    async with guard_served, Bus(nats_url, name="relay", trust_new=True) as bus:
        started = Relay(bus)
        await started.start()
        await wait_for_chain(bus, "tool.call", [f"{guarded}.no_rm"])
        await wait_for_chain(bus, "llm.request", [f"{name}.model_policy"])
        await wait_for_chain(bus, "assistant.message", [f"{name}.redact"])
        try:
            yield bus
        finally:
            await started.stop()


async def gemini_hook(payload: Any, env: dict[str, str]) -> tuple[int, Any, str]:
    return await run_hook("gemini-hook", payload, env)


async def test_tool_calls_results_and_prompts_in_gemini_s_output(
    nats_url: str, relay: Bus, guarded: str, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    code, output, _ = await gemini_hook(shell("rm -rf /srv"), env)
    assert (code, output) == (0, {"decision": "deny", "reason": f"hookbus ({guarded}.no_rm): only by hand"})
    code, output, _ = await gemini_hook(shell("ls"), env)
    assert (code, output) == (
        0,
        {"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": {"command": "ls -la"}}},
    )
    code, output, stderr = await gemini_hook(shell("pwd"), env)
    assert (code, output, stderr) == (0, None, "")
    after = gemini_input(
        "AfterTool",
        tool_name="run_shell_command",
        tool_input={"command": "cat .env"},
        tool_response={"llmContent": "TOKEN=ghp_abc", "returnDisplay": "TOKEN=ghp_abc"},
    )
    code, output, _ = await gemini_hook(after, env)  # the reason replaces the output the model sees
    assert (code, output) == (
        0,
        {"decision": "deny", "reason": f"hookbus ({guarded}.hide_tokens): a token in the output"},
    )
    code, output, _ = await gemini_hook(gemini_input("BeforeAgent", prompt="my key is sk-1"), env)
    assert (code, output) == (
        0,
        {"decision": "deny", "reason": f"hookbus ({guarded}.no_secret): no secrets in prompts"},
    )


def test_a_guard_that_drops_an_argument_is_refused_since_gemini_merges_tool_input() -> None:
    """Gemini merges ``tool_input`` over the model's arguments: a removed one would survive the merge."""
    dialect = gemini.GeminiDialect()
    step = dialect.plan(
        parse(gemini_input("BeforeTool", tool_name="write_file", tool_input={"path": "a", "content": "x"}))
    )
    answer = dialect.answer(step, Patch({**step.payload, "input": {"path": "a"}}))
    assert answer.output is not None and answer.output["decision"] == "deny"
    assert "removed arguments" in answer.output["reason"]


async def test_model_requests_are_overridden_answered_or_refused_and_answers_redacted(
    nats_url: str, relay: Bus, tmp_path: Path
) -> None:
    env = env_for(nats_url, tmp_path)
    code, output, _ = await gemini_hook(
        gemini_input("BeforeModel", llm_request=llm_request("hi", "gemini-blocked")), env
    )
    assert code == 0 and output["decision"] == "deny" and "that model is not allowed" in output["reason"]
    code, output, _ = await gemini_hook(gemini_input("BeforeModel", llm_request=llm_request("be cooler")), env)
    assert (code, output) == (
        0,
        {"hookSpecificOutput": {"hookEventName": "BeforeModel", "llm_request": {"config": {"temperature": 0.2}}}},
    )
    code, output, _ = await gemini_hook(gemini_input("BeforeModel", llm_request=llm_request("canned please")), env)
    assert (code, output) == (
        0,
        {
            "hookSpecificOutput": {
                "hookEventName": "BeforeModel",
                "llm_response": gemini.synthetic_response("a canned answer"),
            }
        },
    )
    # a hostile request shape is still judged, never a parse failure that lets the call through
    hostile = {"model": "gemini-blocked", "messages": "not a list", "config": 5}
    code, output, _ = await gemini_hook(gemini_input("BeforeModel", llm_request=hostile), env)
    assert code == 0 and output["decision"] == "deny"
    code, output, stderr = await gemini_hook(gemini_input("BeforeModel", llm_request=llm_request("hello")), env)
    assert (code, output, stderr) == (0, None, "")
    answered = gemini_input("AfterModel", llm_request=llm_request("who"), llm_response=llm_response("SSN 123-45-6789"))
    code, output, _ = await gemini_hook(answered, env)
    assert output["hookSpecificOutput"]["llm_response"]["candidates"][0]["content"]["parts"] == ["SSN [redacted]"]


async def test_session_and_selection_events_reach_the_bus(nats_url: str, relay: Bus, tmp_path: Path) -> None:
    recorder = EventRecorder()
    await relay.subscribe("prx.lifecycle.>", recorder)
    await relay.subscribe("eva.custom.>", recorder)
    await relay.flush()
    env = env_for(nats_url, tmp_path)
    for payload in (
        gemini_input("SessionStart", source="startup"),
        gemini_input("BeforeToolSelection", llm_request=llm_request("list files")),
        gemini_input("AfterAgent", prompt="list files", prompt_response="done", stop_hook_active=False),
        gemini_input("PreCompress", trigger="auto"),
        gemini_input("SessionEnd", reason="exit"),
    ):
        code, output, stderr = await gemini_hook(payload, env)
        assert (code, output) == (0, None), stderr
    await barrier(relay, "prx.lifecycle.error", recorder)
    events = without_barriers(recorder.events)
    assert [event.subject for event in events] == [
        "prx.lifecycle.agent_start",
        "eva.custom.gemini.before_tool_selection",
        "prx.lifecycle.turn_complete",
        "eva.custom.pre_compact",
        "prx.lifecycle.agent_end",
    ]
    assert {event.session_id for event in events} == {SESSION}
    assert events[0].payload["agent"] == "gemini-cli" and events[0].payload["source"] == "startup"
    assert events[1].payload["model"] == "gemini-2.5-pro" and events[4].payload["reason"] == "exit"


async def test_an_unreachable_bus_refuses_a_tool_call_with_fail_closed(tmp_path: Path) -> None:
    env = env_for("nats://127.0.0.1:1", tmp_path)
    code, output, _ = await run_hook("gemini-hook", shell("ls"), env, "--fail-closed", "--connect-timeout", "0.5")
    assert code == 0 and output["decision"] == "deny" and "cannot be reached" in output["reason"]


def test_install_merges_into_a_gemini_settings_file_as_gemini_documents_it(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    theirs = json.loads((FIXTURES / "settings.json").read_text())
    settings.write_text(json.dumps(theirs))
    done = run_cli("gemini-hook", "install", "--settings", str(settings), "--hook-timeout", "20")
    assert done.returncode == 0, done.stderr
    hooks = json.loads(settings.read_text())["hooks"]
    assert set(hooks) == set(gemini.INSTALLED_EVENTS) | set(theirs["hooks"])
    for event, groups in theirs["hooks"].items():
        assert hooks[event][: len(groups)] == groups, "the user's own hooks are kept as they were"
    ours = hooks["BeforeTool"][-1]
    assert ours["matcher"] == "*" and ours["hooks"][0]["command"].endswith(" gemini-hook")
    assert ours["hooks"][0]["timeout"] == 20_000, "Gemini CLI counts hook timeouts in milliseconds"
    done = run_cli("gemini-hook", "install", "--http", "http://127.0.0.1:8477")
    assert done.returncode == 1 and "Gemini CLI has no http hook type" in done.stderr
