"""The reference turn runner against a scripted OpenAI-compatible server: events, depth, retries, middleware."""

from __future__ import annotations

import uuid
from typing import Any

from bus import Bus, Cancel, Continue, Module, Patch, Stage
from bus.testing import EventRecorder, fake_llm, serving, wait_for_chain
from tests.support.turn_support import spend_turn, turn


async def run_turn(
    bus: Bus, llm: fake_llm.FakeLLM, depth: int = 2, **client: Any
) -> tuple[EventRecorder, dict[str, Any]]:
    """Serve turns for a fresh agent, request one, return what it emitted and its result."""
    result, rec, _ = await turn(bus, llm, prompt="what time is it?", depth=depth, api_key="sk-test", **client)
    return rec, result


async def test_a_turn_with_a_tool_call_emits_the_lifecycle_at_the_turn_depth(
    kernel: Bus, llm: fake_llm.FakeLLM
) -> None:
    llm.script = [fake_llm.tool_calls(("echo", {"text": "hi"})), fake_llm.text("it is noon")]
    rec, result = await run_turn(kernel, llm, depth=2)
    assert result["status"] == "completed" and result["answer"] == "it is noon"
    names = [e.event for e in rec.events]
    assert names == [
        "agent_start", "llm_request", "llm_response", "tool_call_start", "tool_call",
        "llm_request", "llm_response", "turn_complete", "agent_end", "turn.completed",
    ]  # fmt: skip
    assert {e.depth for e in rec.events} == {2}
    assert {e.session_id for e in rec.events} == {"s1"}
    by = {e.event: e.payload for e in rec.events}
    assert by["llm_response"]["provider"] == "fake" and by["llm_response"]["model"] == "model-a"
    assert by["llm_response"]["success"] is True and by["llm_response"]["duration_ms"] >= 0
    assert by["tool_call_start"] == {"tool": "echo", "arguments": {"text": "hi"}}
    assert by["tool_call"] == {"tool": "echo", "success": True, "output": "hi"}
    assert by["agent_end"] == {"success": True, "messages_count": 4}
    assert by["turn.completed"]["answer"] == "it is noon"
    assert llm.requests[0]["tools"] and llm.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": "hi",
    }


async def test_transient_errors_retry_visibly_then_succeed(kernel: Bus, llm: fake_llm.FakeLLM) -> None:
    llm.script = [fake_llm.status(500), fake_llm.hang(2), fake_llm.text("finally")]
    rec, result = await run_turn(kernel, llm, timeout=0.5)
    assert result["status"] == "completed"
    retries = [e.payload["message"] for e in rec.events if e.event == "error"]
    assert len(retries) == 2
    assert "HTTP 500; retry 1 of 2" in retries[0] and "no answer within 0.5s; retry 2 of 2" in retries[1]
    assert len(llm.requests) == 3


async def test_giving_up_emits_error_and_turn_failed(kernel: Bus, llm: fake_llm.FakeLLM) -> None:
    llm.script = [fake_llm.status(503)] * 3
    rec, result = await run_turn(kernel, llm)
    assert result["status"] == "failed" and "HTTP 503" in result["error"]
    names = [e.event for e in rec.events]
    assert names[-4:] == ["llm_response", "error", "agent_end", "turn.failed"]
    by = {e.event: e.payload for e in rec.events}
    assert by["llm_response"]["success"] is False
    assert by["agent_end"]["success"] is False
    assert by["error"]["component"] == "llm"


async def test_middleware_patches_the_request_and_vetoes_a_tool(
    kernel: Bus, nats_url: str, llm: fake_llm.FakeLLM
) -> None:
    guard = Module(f"g{uuid.uuid4().hex[:6]}")

    @guard.stage(Stage.LLM_REQUEST)
    async def cheaper(stage: str, payload: dict[str, Any]) -> Patch:
        return Patch({**payload, "model": "model-cheap", "temperature": 0.1})

    @guard.stage(Stage.TOOL_CALL, match="echo")
    async def no_echo(stage: str, payload: dict[str, Any]) -> Cancel | Continue:
        return Cancel("echo is not allowed") if payload["name"] == "echo" else Continue()

    llm.script = [fake_llm.tool_calls(("echo", {"text": "x"}), ("clock", {})), fake_llm.text("ok")]
    async with serving(guard, nats_url):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.no_echo"])
        await wait_for_chain(kernel, "llm.request", [f"{guard.name}.cheaper"])
        rec, result = await run_turn(kernel, llm)
    assert result["status"] == "completed"
    assert llm.requests[0]["model"] == "model-cheap" and llm.requests[0]["temperature"] == 0.1
    calls = [e.payload for e in rec.events if e.event == "tool_call"]
    assert calls[0] == {"tool": "echo", "success": False, "output": "cancelled by middleware: echo is not allowed"}
    assert calls[1]["tool"] == "clock" and calls[1]["success"] is True


async def test_trigger_and_agent_end_to_end(workspace: Any, llm: fake_llm.FakeLLM) -> None:
    llm.default = fake_llm.text("too much")
    line, done = await spend_turn(workspace, "--llm-url", llm.url, "--model", "m1")
    assert "agent eva: serving turns" in line
    assert done.payload["answer"] == "too much" and done.payload["trigger"] == "spend" and done.depth == 1
    assert llm.requests[0]["messages"][0]["content"] == "spent 42"
