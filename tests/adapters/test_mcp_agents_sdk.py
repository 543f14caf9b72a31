"""An Agents SDK agent's MCP server object behind the fleet's guards: the real openai-agents package, a real
stdio MCP server (the SDK example's), the SDK's own agent loop on a chat-completions model on the scripted server.

A cancel reaches the model as an error result with the reason, a patch changes the arguments the server gets,
a tool.result patch the output; every call is an event under the proxy's tool names.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")  # the openai-agents extra; scripts/test installs it

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI

from bus import Bus, Cancel, Continue, Decision, Module, Patch
from bus.adapters.openai_agents import guard_mcp_calls
from bus.testing import EventRecorder, serving, wait_for_chain
from bus.testing.fake_llm import FakeLLM, text, tool_calls
from tests.conftest import unique

set_tracing_disabled(True)
SERVER = Path(__file__).parents[1] / "fixtures" / "openai_agents" / "mcp_server.py"


@pytest.fixture
async def model(llm: FakeLLM) -> AsyncIterator[OpenAIChatCompletionsModel]:
    client = AsyncOpenAI(base_url=llm.url, api_key="test", max_retries=0)
    try:
        yield OpenAIChatCompletionsModel("scripted", client)
    finally:
        await client.close()


def _guard(seen: list[str]) -> Module:
    """tool.call: add(666) refused, add(1, b) asked as add(100, b); tool.result: the secret word redacted."""
    guard = Module(unique("sdkmcp"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        seen.append(payload["name"])
        args = payload["input"]
        if payload["name"] != "mcp__echo__add":
            return Continue()
        if args.get("a") == 666:
            return Cancel("not the number of the beast")
        return Patch({**payload, "input": {**args, "a": 100}}) if args.get("a") == 1 else Continue()

    @guard.stage("tool.result")
    async def screen(stage: str, payload: dict[str, Any]) -> Decision:
        if payload["name"] == "mcp__echo__get_secret_word":
            return Patch({**payload, "output": "[redacted]"})
        return Continue()

    return guard


def _tool_answers(request: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_an_agents_sdk_mcp_server_calls_through_the_guards(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus, bus: Bus
) -> None:
    seen: list[str] = []
    guard, session = _guard(seen), unique("sdkmcp")
    events = EventRecorder(lambda e: e.session_id == session)
    await bus.subscribe("prx.lifecycle.*", events)
    async with (
        serving(guard, nats_url),
        MCPServerStdio(params={"command": sys.executable, "args": [str(SERVER)]}, name="echo") as server,
    ):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
        await wait_for_chain(kernel, "tool.result", [f"{guard.name}.screen"])
        guarded = guard_mcp_calls(server, kernel, session_id=session)
        assert guard_mcp_calls(guarded, kernel) is guarded  # a second wrap is the same object, asked once
        agent = Agent(name="calc", instructions="Use the tools.", model=model, mcp_servers=[guarded])
        llm.script = [
            tool_calls(
                ("add", {"a": 2, "b": 3}),
                ("add", {"a": 666, "b": 1}),
                ("add", {"a": 1, "b": 2}),
                ("get_secret_word", {}),
            ),
            text("done"),
        ]
        result = await Runner.run(agent, "add and tell me the word")
    assert result.final_output == "done"
    answers = [str(a) for a in _tool_answers(llm.requests[1])]
    assert "5" in answers[0], "allowed: the server's own answer"
    assert "not the number of the beast" in answers[1], "cancelled: the reason, the server never called"
    assert "102" in answers[2], "patched: the server added 100 + 2"
    assert "[redacted]" in answers[3] and not any(w in answers[3] for w in ("apple", "banana", "cherry"))
    assert seen.count("mcp__echo__add") == 3 and "mcp__echo__get_secret_word" in seen
    await events.wait_for(8)
    starts = [e.payload for e in events.events if e.event == "tool_call_start"]
    assert {"tool": "mcp__echo__add", "arguments": {"a": 666, "b": 1}} in starts
    ends = [e.payload for e in events.events if e.event == "tool_call"]
    assert any(e["tool"] == "mcp__echo__add" and e["success"] is False for e in ends)


async def test_call_tool_as_the_sdk_calls_it_keeps_meta_and_structured_output(nats_url: str, kernel: Bus) -> None:
    """The server object's call_tool driven as the SDK's MCPUtil does (with meta): an unguarded call is unchanged."""
    guard = _guard([])
    async with (
        serving(guard, nats_url),
        MCPServerStdio(params={"command": sys.executable, "args": [str(SERVER)]}, name="echo") as server,
    ):
        await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
        plain = await server.call_tool("add", {"a": 4, "b": 5})
        guard_mcp_calls(server, kernel)
        same = await server.call_tool("add", {"a": 4, "b": 5}, meta={"trace": "t1"})
        refused = await server.call_tool("add", {"a": 666, "b": 0})
    assert same.model_dump() == plain.model_dump()
    assert refused.is_error is True
    assert "not the number of the beast" in refused.content[0].text  # type: ignore[union-attr]
