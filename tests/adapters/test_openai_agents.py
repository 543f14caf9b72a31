"""The OpenAI Agents SDK on the bus: real openai-agents, a chat-completions model on the scripted server.

A guarded tool call is cancelled and the model reads the reason; a patch
changes the arguments; the run and agent hooks put lifecycle events on the
bus; user.message and assistant.message middleware trip the guardrails.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents")  # the openai-agents extra; scripts/test installs it

from agents import (
    Agent,
    InputGuardrailTripwireTriggered,
    OpenAIChatCompletionsModel,
    OutputGuardrailTripwireTriggered,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from bus import Bus, Cancel, Continue, Decision, Module, Patch
from bus.adapters.openai_agents import (
    HookbusAgentHooks,
    HookbusRunHooks,
    guard_function_tool,
    input_guardrail,
    output_guardrail,
)
from bus.testing import EventRecorder, serving, wait_for_chain
from bus.testing.fake_llm import FakeLLM, text, tool_calls
from tests.conftest import IN_CI, unique

set_tracing_disabled(True)  # the SDK would export its own traces to OpenAI


def test_the_extra_is_installed_under_ci() -> None:
    import importlib.util

    assert importlib.util.find_spec("agents") is not None or not IN_CI


@pytest.fixture
async def model(llm: FakeLLM) -> AsyncIterator[OpenAIChatCompletionsModel]:
    """The SDK's chat-completions model on the scripted server (its HTTP client closed after the test)."""
    client = AsyncOpenAI(base_url=llm.url, api_key="test", max_retries=0)
    try:
        yield OpenAIChatCompletionsModel("scripted", client)
    finally:
        await client.close()


def _guard() -> Module:
    guard = Module(unique("agguard"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        command = payload["input"].get("command", "")
        if "rm -rf" in command:
            return Cancel("only by hand")
        if command == "ls":
            return Patch({**payload, "input": {"command": "ls -la"}})
        return Continue()

    @guard.stage("user.message")
    async def screen(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("no secrets asked") if "password" in payload["content"] else Continue()

    @guard.stage("assistant.message")
    async def leak(stage: str, payload: dict[str, Any]) -> Decision:
        return Cancel("that answer leaks") if "hunter2" in payload["content"] else Continue()

    return guard


async def _ready(kernel: Bus, guard: Module) -> None:
    for stage, handler in (("tool.call", "judge"), ("user.message", "screen"), ("assistant.message", "leak")):
        await wait_for_chain(kernel, stage, [f"{guard.name}.{handler}"])


def _shell(ran: list[str]) -> Any:
    @function_tool
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    return shell


async def test_guarded_tool_hooks_and_events(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus, bus: Bus
) -> None:
    guard, session = _guard(), unique("ag")
    events = EventRecorder(lambda e: e.session_id == session)
    await bus.subscribe("prx.lifecycle.*", events)
    agent_events = EventRecorder(lambda e: e.session_id == f"{session}-agent")
    await bus.subscribe("prx.lifecycle.*", agent_events)
    llm.script = [tool_calls(("shell", {"command": "rm -rf /"}), ("shell", {"command": "ls"})), text("all done")]
    ran: list[str] = []
    async with serving(guard, nats_url):
        await _ready(kernel, guard)
        agent = Agent(
            name="sre",
            instructions="help",
            model=model,
            tools=[guard_function_tool(_shell(ran), kernel, session_id=session, agent="sre")],
            input_guardrails=[input_guardrail(kernel, session_id=session)],
            output_guardrails=[output_guardrail(kernel, session_id=session)],
            hooks=HookbusAgentHooks(kernel, session_id=f"{session}-agent"),
        )
        result = await Runner.run(agent, "tidy the disk", hooks=HookbusRunHooks(kernel, session_id=session))
    assert result.final_output == "all done"
    assert ran == ["ls -la"]
    answers = sorted(m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool")
    assert answers == ["cancelled by middleware: only by hand", "ran ls -la"]
    expected = ["agent_start", "agent_end"] + ["llm_request", "llm_response"] * 2 + ["tool_call_start", "tool_call"] * 2
    await events.wait_for(len(expected))
    names = sorted(e.event for e in events.events)
    assert names == sorted(expected)
    starts = [e.payload for e in events.events if e.event == "tool_call_start"]
    assert {"tool": "shell", "arguments": {"command": "rm -rf /"}} in starts
    request = next(e.payload for e in events.events if e.event == "llm_request")
    assert request["provider"] == "openai-agents" and request["messages_count"] == 2  # instructions + input
    await agent_events.wait_for(len(expected))  # the agent's own hooks see the same run
    assert sorted(e.event for e in agent_events.events) == sorted(expected)


async def test_guardrails_trip_on_middleware_cancels(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus
) -> None:
    guard = _guard()
    async with serving(guard, nats_url):
        await _ready(kernel, guard)
        agent = Agent(
            name="sre",
            model=model,
            input_guardrails=[input_guardrail(kernel)],
            output_guardrails=[output_guardrail(kernel)],
        )
        with pytest.raises(InputGuardrailTripwireTriggered) as tripped_in:
            await Runner.run(agent, "what is the root password?")
        assert llm.requests == []  # the refused message never reached the model
        info = tripped_in.value.guardrail_result.output.output_info
        assert info == {"reason": "no secrets asked", "handler": f"{guard.name}.screen"}

        llm.script = [text("it is hunter2")]
        with pytest.raises(OutputGuardrailTripwireTriggered) as tripped_out:
            await Runner.run(agent, "tell me a story")
        assert tripped_out.value.guardrail_result.output.output_info["reason"] == "that answer leaks"

        llm.script = [text("once upon a time")]
        assert (await Runner.run(agent, "tell me a story")).final_output == "once upon a time"


async def test_arguments_that_are_not_an_object_never_reach_the_tool(kernel: Bus) -> None:
    ran: list[str] = []
    guarded = guard_function_tool(_shell(ran), kernel)
    answer = await guarded.on_invoke_tool(None, "[1, 2]")  # type: ignore[arg-type]
    assert answer == "invalid tool arguments for shell: an object is needed, not array"
    assert "not JSON" in await guarded.on_invoke_tool(None, "{oops")  # type: ignore[arg-type]
    assert ran == []


def _tool_guard() -> Module:
    """tool.call: no mail to rival.com, Tokyo is asked as Kyoto, add(666) refused;
    tool.result: an SSN cancels, the secret word is redacted."""
    guard = Module(unique("agtool"))

    @guard.stage("tool.call")
    async def judge(stage: str, payload: dict[str, Any]) -> Decision:
        args = payload["input"]
        if "rival.com" in str(args.get("to", "")):
            return Cancel("no mail to competitors")
        if args.get("city") == "Tokyo":
            return Patch({**payload, "input": {"city": "Kyoto"}})
        return Cancel("not the number of the beast") if args.get("a") == 666 else Continue()

    @guard.stage("tool.result")
    async def screen(stage: str, payload: dict[str, Any]) -> Decision:
        if "123-45-6789" in payload["output"]:
            return Cancel("an SSN in the output")
        if payload["output"] in ("apple", "banana", "cherry"):
            return Patch({**payload, "output": "[redacted]"})
        return Continue()

    return guard


def _tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def _ready_tools(kernel: Bus, guard: Module) -> None:
    await wait_for_chain(kernel, "tool.call", [f"{guard.name}.judge"])
    await wait_for_chain(kernel, "tool.result", [f"{guard.name}.screen"])


async def test_the_sdk_tool_guardrails_example_with_hookbus_guardrails_beside_its_own(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus
) -> None:
    """examples/basic/tool_guardrails.py: its own guardrails still decide; hookbus's decide too."""
    import dataclasses

    from agents import ToolOutputGuardrailTripwireTriggered

    from bus.adapters.openai_agents import tool_input_guardrail, tool_output_guardrail
    from tests.fixtures.openai_agents import tool_guardrails_example as example

    guard = _tool_guard()
    async with serving(guard, nats_url):
        await _ready_tools(kernel, guard)
        ours_in, ours_out = tool_input_guardrail(kernel), tool_output_guardrail(kernel, on_cancel="raise")
        tools = [
            dataclasses.replace(
                tool,
                tool_input_guardrails=[ours_in, *(tool.tool_input_guardrails or [])],
                tool_output_guardrails=[ours_out, *(tool.tool_output_guardrails or [])],
            )
            for tool in example.agent.tools
        ]
        agent = example.agent.clone(model=model, tools=tools)
        mail = {"subject": "hi", "body": "welcome"}
        llm.script = [
            tool_calls(
                ("send_email", {"to": "ceo@rival.com", **mail}),
                ("send_email", {"to": "john@example.com", "subject": "ACME", "body": "x"}),
                ("send_email", {"to": "john@example.com", **mail}),
            ),
            text("sent one"),
        ]
        result = await Runner.run(agent, "Send a welcome email to john@example.com")
        assert result.final_output == "sent one"
        assert _tool_messages(llm.requests[1]) == [
            "cancelled by middleware: no mail to competitors",  # hookbus's guard
            "🚨 Tool call blocked: contains 'ACME'",  # the example's own, as without hookbus
            "Email sent to john@example.com with subject 'hi'",
        ]
        llm.script = [tool_calls(("get_user_data", {"user_id": "user123"})), text("never")]
        with pytest.raises(ToolOutputGuardrailTripwireTriggered):
            await Runner.run(agent, "Get the data for user ID user123")


async def test_the_sdk_tools_example_a_changed_argument_is_a_rejection_naming_it(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus
) -> None:
    """examples/basic/tools.py: a guardrail cannot change arguments, so the model is told what to call."""
    import dataclasses

    from bus.adapters.openai_agents import tool_input_guardrail
    from tests.fixtures.openai_agents import tools_example as example

    guard = _tool_guard()
    async with serving(guard, nats_url):
        await _ready_tools(kernel, guard)
        tools = [
            dataclasses.replace(t, tool_input_guardrails=[tool_input_guardrail(kernel)]) for t in example.agent.tools
        ]
        agent = example.agent.clone(model=model, tools=tools)
        llm.script = [tool_calls(("get_weather", {"city": "Tokyo"}), ("get_weather", {"city": "Paris"})), text("sunny")]
        result = await Runner.run(agent, "What's the weather in Tokyo?")
    assert result.final_output == "sunny"
    refused, ran = _tool_messages(llm.requests[1])
    assert refused == 'refused by middleware: call get_weather with {"city":"Kyoto"}'
    assert "Paris" in ran and "Sunny with wind." in ran


async def test_mcp_server_tools_are_guarded_the_same_way(
    nats_url: str, llm: FakeLLM, model: OpenAIChatCompletionsModel, kernel: Bus
) -> None:
    """An MCP server (a real stdio process: the SDK example's server) behind hookbus, every one of its tools."""
    import sys
    from pathlib import Path

    from agents.mcp import MCPServerStdio

    from bus.adapters.openai_agents import guard_mcp_server

    script = Path(__file__).parents[1] / "fixtures" / "openai_agents" / "mcp_server.py"
    guard = _tool_guard()
    async with (
        serving(guard, nats_url),
        MCPServerStdio(params={"command": sys.executable, "args": [str(script)]}) as server,
    ):
        await _ready_tools(kernel, guard)
        agent = Agent(
            name="mcp", instructions="Use the tools.", model=model, mcp_servers=[guard_mcp_server(server, kernel)]
        )
        llm.script = [
            tool_calls(("add", {"a": 2, "b": 3}), ("add", {"a": 666, "b": 1}), ("get_secret_word", {})),
            text("done"),
        ]
        result = await Runner.run(agent, "add and tell me the word")
    assert result.final_output == "done"
    answers = _tool_messages(llm.requests[1])
    assert answers[1:] == ["cancelled by middleware: not the number of the beast", "[redacted]"]
    assert answers[0] == [{"type": "text", "text": "5"}], "allowed: the tool's own answer"
